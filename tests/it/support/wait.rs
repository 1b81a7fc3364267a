//! The one "wait until" helper (`eventually`), and what tests wait for with it.

use super::*;

/// Polls `f` until it returns Some, for at most `limit`. The limit only stops a hung test;
/// it is not an assertion about speed. An attempt that never returns (a request the API
/// server never answers) is bounded by what is left of the limit, so a hang fails the test
/// instead of stalling the run.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left.max(Duration::from_secs(5)), f()).await {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(_) => panic!("gave up waiting for: {what} (an attempt did not return)"),
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Events recorded for an object, as (type, reason, note).
pub async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until an Event for the object matches `pred` (Events are published asynchronously).
pub async fn wait_for_event(
    client: &Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&(String, String, String)) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = events_for(client, ns, name).await;
        if events.iter().any(&pred) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("no matching Event for {ns}/{name}; have {events:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long a test waits for something the operator should do; it only stops a hung test.
pub const GUARD: Duration = Duration::from_secs(60);

/// Waits (up to GUARD) until object `name` exists and satisfies `pred`.
pub async fn object_where<K>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    eventually(GUARD, what, || async {
        api.get_opt(name).await.ok().flatten().filter(|o| pred(o))
    })
    .await
}

/// Waits (up to GUARD) until Deployment `name` asks for `want` replicas.
pub async fn deployment_at(
    client: &Client,
    ns: &str,
    name: &str,
    want: i32,
) -> k8s_openapi::api::apps::v1::Deployment {
    object_where(
        client,
        ns,
        name,
        &format!("Deployment {name} at {want}"),
        |d| replicas(d) == Some(want),
    )
    .await
}

/// Waits (up to GUARD) until TDSet `name` no longer exists (its finalizers have let go).
pub async fn tdset_gone(client: &Client, ns: &str, name: &str) {
    let api: Api<tdset_operator::api::TDSet> = Api::namespaced(client.clone(), ns);
    eventually(GUARD, &format!("TDSet {ns}/{name} deleted"), || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// Waits until TDSet `name` has condition `type_` with `reason` (any status).
pub async fn tdset_with_reason(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> tdset_operator::api::TDSet {
    object_where(client, ns, name, &format!("{type_} reason {reason}"), |t| {
        condition(t, type_).is_some_and(|c| c.reason == reason)
    })
    .await
}

/// Waits until TDSet `name` is Degraded for `reason`; its message.
pub async fn degraded_for(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    let t = tdset_with_reason(client, ns, name, "Degraded", reason).await;
    let degraded = condition(&t, "Degraded").expect("a Degraded condition");
    assert_eq!(degraded.status, "True", "{degraded:?}");
    degraded.message.clone()
}
