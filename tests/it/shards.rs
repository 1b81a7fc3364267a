//! Shards on the real API server: two operator processes, each with its own selector and
//! Lease, split the TDSets; a TDSet moved from one shard to the other is let go of before it
//! is written again, and one moved away from a dead shard waits for that shard's Lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;

/// The shards' Leases expire after this long without renewal.
const LEASE_SECONDS: u64 = 4;

/// Shard `name` of the operator, as a process, taking the TDSets `selector` matches.
async fn shard(ns: &str, name: &str, selector: &str, log: &str) -> OperatorProcess {
    let op = OperatorProcess::start(
        &control_plane().kubeconfig,
        ns,
        &[
            "--shard",
            name,
            "--shard-selector",
            selector,
            "--instance",
            &format!("{name}-0"),
            "--lease-namespace",
            ns,
            "--lease-duration",
            &LEASE_SECONDS.to_string(),
            "--fake-now",
            "2026-05-01T12:00:00Z",
        ],
        &format!("{log}-{name}.log"),
    );
    eventually(GUARD, &format!("shard {name} leads its Lease"), || async {
        (op.metric("tdset_leader") == 1.0).then_some(())
    })
    .await;
    op
}

/// A TDSet labelled `labels` that scales Deployment `target` to `replicas` at noon (1 otherwise).
fn scaling(name: &str, labels: Value, target: &str, replicas: i32) -> TDSet {
    let mut t = tdset(
        name,
        json!({
            "schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": replicas}],
            "defaultReplica": 1,
            "intervalMint": 60,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
        }),
    );
    t.metadata.labels = serde_json::from_value(labels).ok();
    t
}

fn shard_of(t: &TDSet) -> Option<String> {
    t.status.as_ref().and_then(|s| s.shard.clone())
}

async fn tdset_claimed_by(client: &Client, ns: &str, name: &str, shard: &str) -> TDSet {
    object_where(
        client,
        ns,
        name,
        &format!("{name} claimed by shard {shard}"),
        |t: &TDSet| shard_of(t).as_deref() == Some(shard),
    )
    .await
}

/// Someone's Deployment "web" at 1, and TDSet "t" of shard a (label team=a) that scales it to
/// 3 at noon; returns once it is at 3 and the claim is a's.
async fn web_at_3_held_by_a(client: &Client, ns: &str) {
    let _: Deployment = create_object(client, ns, app_deployment("web", 1)).await;
    create_tdset(client, ns, &scaling("t", json!({"team": "a"}), "web", 3)).await;
    deployment_at(client, ns, "web", 3).await;
    tdset_claimed_by(client, ns, "t", "a").await;
}

/// Moves TDSet `name` to labels `labels` and sets its noon count to `replicas`, in one write.
async fn move_tdset(client: &Client, ns: &str, name: &str, labels: Value, replicas: i32) {
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), ns);
    let current = tdsets.get(name).await.expect("the TDSet");
    let mut windows = serde_json::to_value(&current.spec.scheduling_config).unwrap();
    windows[0]["replica"] = json!(replicas);
    let mut all_labels = json!({"team": null});
    for (k, v) in labels.as_object().into_iter().flatten() {
        all_labels[k] = v.clone();
    }
    tdsets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": all_labels}, "spec": {"schedulingConfig": windows}}),
            ),
        )
        .await
        .expect("moving the TDSet");
}

/// Every version of one object the API server produced from now on: (resourceVersion, value).
fn record<K, T>(api: Api<K>, name: &str, value: fn(&K) -> T) -> Arc<Mutex<Vec<(u64, T)>>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    T: Send + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, config).applied_objects());
        while let Some(Ok(o)) = events.next().await {
            let rv = o
                .resource_version()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.lock().unwrap().push((rv, value(&o)));
        }
    });
    seen
}

#[tokio::test]
async fn each_shard_writes_only_the_tdsets_its_selector_matches() {
    let (client, ns) = setup("shards-split").await;
    for d in ["web-a", "web-b", "web-none"] {
        let _: Deployment = create_object(&client, &ns.name, app_deployment(d, 1)).await;
    }
    // Matched by no shard: created first, so both shards have listed it before the others.
    create_tdset(
        &client,
        &ns.name,
        &scaling("t-none", json!({"team": "c"}), "web-none", 5),
    )
    .await;
    let a = shard(&ns.name, "a", "team=a", "shards-split").await;
    let b = shard(&ns.name, "b", "team in (b)", "shards-split").await;
    create_tdset(
        &client,
        &ns.name,
        &scaling("t-a", json!({"team": "a"}), "web-a", 3),
    )
    .await;
    create_tdset(
        &client,
        &ns.name,
        &scaling("t-b", json!({"team": "b"}), "web-b", 4),
    )
    .await;

    deployment_at(&client, &ns.name, "web-a", 3).await;
    deployment_at(&client, &ns.name, "web-b", 4).await;
    tdset_claimed_by(&client, &ns.name, "t-a", "a").await;
    tdset_claimed_by(&client, &ns.name, "t-b", "b").await;
    // One writer per workload holds across shards: a younger TDSet of shard b on shard a's
    // workload writes nothing to it.
    create_tdset(
        &client,
        &ns.name,
        &scaling("t-b2", json!({"team": "b"}), "web-a", 7),
    )
    .await;
    let degraded =
        tdset_with_reason(&client, &ns.name, "t-b2", "Degraded", "ConflictingTDSet").await;
    assert_eq!(shard_of(&degraded).as_deref(), Some("b"));

    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let untouched = tdsets.get("t-none").await.unwrap();
    assert!(
        untouched.status.is_none(),
        "no shard matches t-none, yet: {:?}",
        untouched.status
    );
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(replicas(&deploys.get("web-none").await.unwrap()), Some(1));
    assert_eq!(replicas(&deploys.get("web-a").await.unwrap()), Some(3));

    // `kubectl get tds -o wide` shows who reconciles what.
    let wide = succeeded(
        "kubectl get tds -o wide",
        kubectl(&["get", "tds", "-n", &ns.name, "-o", "wide"]),
    );
    // Columns by position: empty cells leave no word behind.
    let at = wide
        .lines()
        .next()
        .and_then(|h| h.find("SHARD"))
        .expect("a SHARD column");
    let shard_of_row = |name: &str| {
        wide.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| l.get(at..))
            .and_then(|cell| cell.split_whitespace().next())
            .map(str::to_string)
    };
    assert_eq!(shard_of_row("t-a").as_deref(), Some("a"), "{wide}");
    assert_eq!(shard_of_row("t-b").as_deref(), Some("b"), "{wide}");
    // Each shard's metrics say which shard they are (alerts group by it).
    let (_, page) = a.get("/metrics").expect("shard a's metrics");
    assert!(page.contains("tdset_leader{shard=\"a\"} 1"), "{page}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    for (lease, holder) in [("tdset-operator-a", "a-0"), ("tdset-operator-b", "b-0")] {
        let l = leases.get(lease).await.expect("the shard's Lease");
        assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some(holder));
    }
    drop((a, b));
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tdset_moved_between_live_shards_is_let_go_of_before_the_other_shard_writes_it() {
    let (client, ns) = setup("shards-move").await;
    let a = shard(&ns.name, "a", "team=a", "shards-move").await;
    let b = shard(&ns.name, "b", "team=b", "shards-move").await;
    web_at_3_held_by_a(&client, &ns.name).await;

    let claims = record(
        Api::<TDSet>::namespaced(client.clone(), &ns.name),
        "t",
        shard_of,
    );
    let counts = record(
        Api::<Deployment>::namespaced(client.clone(), &ns.name),
        "web",
        replicas,
    );
    eventually(GUARD, "the recorders started", || async {
        (!claims.lock().unwrap().is_empty() && !counts.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    move_tdset(&client, &ns.name, "t", json!({"team": "b"}), 5).await;
    deployment_at(&client, &ns.name, "web", 5).await;
    tdset_claimed_by(&client, &ns.name, "t", "b").await;

    let claims = claims.lock().unwrap().clone();
    let counts = counts.lock().unwrap().clone();
    let released = claims
        .iter()
        .position(|(_, s)| s.is_none())
        .unwrap_or_else(|| panic!("shard a never let go: {claims:?}"));
    let taken = claims
        .iter()
        .position(|(_, s)| s.as_deref() == Some("b"))
        .expect("shard b's claim");
    assert!(
        claims[..released]
            .iter()
            .all(|(_, s)| s.as_deref() == Some("a"))
            && released < taken,
        "the claim must go from a to none to b: {claims:?}"
    );
    let (five_at, _) = counts.iter().find(|(_, r)| *r == Some(5)).unwrap();
    assert!(
        *five_at > claims[taken].0,
        "shard b wrote the workload (rv {five_at}) before it held the claim (rv {}): {counts:?} {claims:?}",
        claims[taken].0
    );
    assert!(
        counts.iter().all(|(_, r)| matches!(r, Some(3 | 5))),
        "{counts:?}"
    );

    // Shard a holds nothing now, so writes nothing more; shard b alone follows the TDSet.
    let a_writes = eventually(GUARD, "shard a idle", || async {
        (a.metric("tdset_bookkeeping_pending") == 0.0).then(|| a.metric("tdset_api_writes_total"))
    })
    .await;
    move_tdset(&client, &ns.name, "t", json!({"team": "b"}), 6).await;
    deployment_at(&client, &ns.name, "web", 6).await;
    object_where(&client, &ns.name, "t", "status at 6", |t: &TDSet| {
        t.status.as_ref().and_then(|s| s.desired_replicas) == Some(6)
    })
    .await;
    assert_eq!(
        a.metric("tdset_api_writes_total"),
        a_writes,
        "shard a wrote after letting go"
    );
    drop((a, b));
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tdset_moved_away_from_a_dead_shard_is_taken_only_once_its_lease_has_expired() {
    let (client, ns) = setup("shards-dead").await;
    let a = shard(&ns.name, "a", "team=a", "shards-dead").await;
    let b = shard(&ns.name, "b", "team=b", "shards-dead").await;
    web_at_3_held_by_a(&client, &ns.name).await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web-b", 1)).await;
    let t_b = scaling("t-b", json!({"team": "b"}), "web-b", 2);
    create_tdset(&client, &ns.name, &t_b).await;
    deployment_at(&client, &ns.name, "web-b", 2).await;

    a.sigkill();
    // Shard b's own TDSets go on as before.
    move_tdset(&client, &ns.name, "t-b", json!({"team": "b"}), 4).await;
    deployment_at(&client, &ns.name, "web-b", 4).await;

    move_tdset(&client, &ns.name, "t", json!({"team": "b"}), 5).await;
    let moved = tokio::time::Instant::now();
    // Shard b first reads a's Lease after the move and must see it unrenewed for the whole
    // duration: until then nothing changes.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let safe_until = moved + Duration::from_secs(LEASE_SECONDS) - Duration::from_millis(300);
    let mut looks = 0;
    while tokio::time::Instant::now() < safe_until {
        assert_eq!(
            replicas(&deploys.get("web").await.unwrap()),
            Some(3),
            "written while shard a's Lease was valid"
        );
        assert_eq!(
            shard_of(&tdsets.get("t").await.unwrap()).as_deref(),
            Some("a")
        );
        looks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(looks >= 5, "looked only {looks} times");
    deployment_at(&client, &ns.name, "web", 5).await;
    tdset_claimed_by(&client, &ns.name, "t", "b").await;
    eprintln!("taken over {:?} after the move", moved.elapsed());
    drop(b);
    ns.cleanup().await;
}

#[tokio::test]
async fn a_shard_that_restarts_lets_go_of_what_moved_while_it_was_down() {
    let (client, ns) = setup("shards-restart").await;
    let a = shard(&ns.name, "a", "team=a", "shards-restart-1").await;
    web_at_3_held_by_a(&client, &ns.name).await;

    a.sigkill();
    // Moved to labels no shard matches: nobody would ever see it move.
    move_tdset(&client, &ns.name, "t", json!({"team": "c"}), 5).await;
    let a = shard(&ns.name, "a", "team=a", "shards-restart-2").await;
    object_where(
        &client,
        &ns.name,
        "t",
        "shard a's claim removed",
        |t: &TDSet| shard_of(t).is_none(),
    )
    .await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(replicas(&deploys.get("web").await.unwrap()), Some(3));
    drop(a);
    ns.cleanup().await;
}

/// Every change of a TDSet's claim from one shard to another passes through "nobody's": a
/// shard let go before the other took it (no shard is dead in these tests).
fn handed_over_cleanly(claims: &[(u64, Option<String>)]) -> bool {
    let mut last: Option<&str> = None;
    for (_, c) in claims {
        match (last, c.as_deref()) {
            (Some(x), Some(y)) if x != y => return false,
            (_, now) => last = now,
        }
    }
    true
}

#[tokio::test]
async fn overlapping_shards_never_both_write_a_tdset_even_across_a_restart_of_the_holder() {
    let (client, ns) = setup("shards-overlap").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 1)).await;
    let selectors = [("a", "team=a"), ("b", "team in (a,b)")];
    let mut shards = std::collections::HashMap::new();
    for (name, selector) in selectors {
        shards.insert(
            name,
            shard(&ns.name, name, selector, "shards-overlap").await,
        );
    }
    let claims = record(
        Api::<TDSet>::namespaced(client.clone(), &ns.name),
        "t",
        shard_of,
    );
    create_tdset(
        &client,
        &ns.name,
        &scaling("t", json!({"team": "a"}), "web", 3),
    )
    .await;
    deployment_at(&client, &ns.name, "web", 3).await;
    // The shard that lost the race waits, and says so in its metrics.
    let waiting = || {
        shards
            .values()
            .map(|s| s.metric("tdset_shard_handovers_waiting"))
            .sum::<f64>()
    };
    eventually(GUARD, "one shard waiting", || async {
        (waiting() == 1.0).then_some(())
    })
    .await;

    // The holder dies and comes back (a crash, a rolling update): the other shard, whose
    // selector matches too, must not take the TDSet over meanwhile, even once the holder's
    // Lease has expired: the holder's next leader goes on with its claim.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let holder = shard_of(&tdsets.get("t").await.unwrap()).expect("a claim");
    let holder: &str = if holder == "a" { "a" } else { "b" };
    shards.remove(holder).unwrap().sigkill();
    tokio::time::sleep(Duration::from_secs(3 * LEASE_SECONDS)).await;
    let selector = selectors.iter().find(|(n, _)| *n == holder).unwrap().1;
    shards.insert(
        holder,
        shard(&ns.name, holder, selector, "shards-overlap-2").await,
    );
    move_tdset(&client, &ns.name, "t", json!({"team": "a"}), 6).await;
    deployment_at(&client, &ns.name, "web", 6).await;

    let claims = claims.lock().unwrap().clone();
    let holders: std::collections::BTreeSet<_> =
        claims.iter().filter_map(|(_, s)| s.clone()).collect();
    assert_eq!(holders.len(), 1, "claimed by both: {claims:?}");
    drop(shards);
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tdset_moved_back_and_forth_quickly_is_always_let_go_of_before_it_is_taken() {
    let (client, ns) = setup("shards-flap").await;
    let a = shard(&ns.name, "a", "team=a", "shards-flap").await;
    let b = shard(&ns.name, "b", "team=b", "shards-flap").await;
    web_at_3_held_by_a(&client, &ns.name).await;
    let claims = record(
        Api::<TDSet>::namespaced(client.clone(), &ns.name),
        "t",
        shard_of,
    );
    // Two writers fighting over the label (a person and a GitOps loop): 20 moves, some faster
    // than a shard lets go, each with its own count.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..20u64 {
        let team = if i % 2 == 0 { "b" } else { "a" };
        tdsets
            .patch(
                "t",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"team": team}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(i * 37 % 200)).await;
    }
    move_tdset(&client, &ns.name, "t", json!({"team": "b"}), 7).await;
    deployment_at(&client, &ns.name, "web", 7).await;
    tdset_claimed_by(&client, &ns.name, "t", "b").await;
    let claims = claims.lock().unwrap().clone();
    assert!(
        handed_over_cleanly(&claims),
        "a claim changed shards without being let go of: {claims:?}"
    );
    drop((a, b));
    ns.cleanup().await;
}

/// A group TDSet labelled `labels` over the namespace's Deployment `web` (label `app: web`),
/// at `replicas` at noon (1 otherwise).
fn grouping(name: &str, labels: Value, replicas: i32) -> TDSet {
    let mut t = tdset(
        name,
        json!({
            "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"app": "web"}}},
            "schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": replicas}],
            "defaultReplica": 1,
            "intervalMint": 60,
        }),
    );
    t.metadata.labels = serde_json::from_value(labels).ok();
    t
}

/// A shard keeps other shards' TDSets only in the namespaces where it has TDSets of its own
/// (issue 34: 1000 of another shard's largest groups cost a shard 191.6 kB each). Shard a has
/// none here while shard b's `scaleTargetRef` holds `web` (which leaves no mark on `web`);
/// a's first TDSet here, a younger group over `web`, must still yield to b's older claim: the
/// namespace is listed afresh before a writes anything in it, after a restart as well as when
/// a TDSet moves back to a.
#[tokio::test]
async fn a_shards_first_tdset_in_a_namespace_yields_to_another_shards_older_claim() {
    let (client, ns) = setup("shards-scope").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("web", 1)).await;
    let web = record(
        Api::<Deployment>::namespaced(client.clone(), n),
        "web",
        replicas,
    );
    let mut a = shard(n, "a", "team=a", "shards-scope").await;
    let b = shard(n, "b", "team=b", "shards-scope").await;
    create_tdset(&client, n, &scaling("old", json!({"team": "b"}), "web", 3)).await;
    deployment_at(&client, n, "web", 3).await;
    let _: TDSet = object_where(&client, n, "old", "old's status written", |t: &TDSet| {
        t.status
            .as_ref()
            .is_some_and(|s| s.desired_replicas == Some(3) && !s.history.is_empty())
    })
    .await;
    assert_eq!(a.metric("tdset_shard_other_tdsets_indexed"), 0.0);

    // Created a second later: its claim is younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &grouping("young", json!({"team": "a"}), 5)).await;
    let young = tdset_with_reason(&client, n, "young", "Degraded", "ConflictingTDSet").await;
    assert_eq!(shard_of(&young).as_deref(), Some("a"));
    let untouched = |web: &Mutex<Vec<(u64, Option<i32>)>>| {
        let seen = web.lock().unwrap().clone();
        assert!(
            seen.iter().all(|(_, r)| *r != Some(5)),
            "the younger group wrote web: {seen:?}"
        );
    };
    untouched(&web);
    // a had let b's TDSet go (it had nothing here), and listed the namespace again before
    // young's first write.
    assert_eq!(a.metric("tdset_shard_index_fills_total"), 1.0);
    assert_eq!(a.metric("tdset_shard_other_tdsets_indexed"), 1.0);

    // A restart lists everything: b's group comes before a's TDSet, in namespace order, and is
    // kept without a second list.
    a.sigkill();
    a = shard(n, "a", "team=a", "shards-scope-2").await;
    eventually(GUARD, "young reconciled by the new shard a", || async {
        (a.metric("tdset_reconciles_total") > 0.0).then_some(())
    })
    .await;
    assert_eq!(a.metric("tdset_shard_other_tdsets_indexed"), 1.0);
    assert_eq!(a.metric("tdset_shard_index_fills_total"), 0.0);

    // a's only TDSet here moves to b: a lets the namespace go, and lists it again when the
    // TDSet comes back.
    move_tdset(&client, n, "young", json!({"team": "b"}), 5).await;
    tdset_claimed_by(&client, n, "young", "b").await;
    eventually(
        GUARD,
        "shard a keeping nothing of the namespace",
        || async { (a.metric("tdset_shard_other_tdsets_indexed") == 0.0).then_some(()) },
    )
    .await;
    move_tdset(&client, n, "young", json!({"team": "a"}), 5).await;
    tdset_claimed_by(&client, n, "young", "a").await;
    eventually(GUARD, "the namespace listed again", || async {
        (a.metric("tdset_shard_index_fills_total") == 1.0).then_some(())
    })
    .await;
    tdset_with_reason(&client, n, "young", "Degraded", "ConflictingTDSet").await;
    untouched(&web);

    // The older group goes: the younger takes web over.
    delete_tdset_and_wait(&client, n, "old").await;
    deployment_at(&client, n, "web", 5).await;
    drop((a, b));
    ns.cleanup().await;
}
