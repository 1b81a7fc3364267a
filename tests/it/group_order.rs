//! Ordered wake-up and sleep of a group (`scaleTargetSelector.order`) on the real API server,
//! with kube-controller-manager and kwok's pods, which go Ready a set delay after they are
//! bound. What is compared is the order in which one watch of the namespace's Deployments saw
//! their changes (one resource's events are ordered by the API server), never a wall clock.

use crate::support::*;
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::{Value, json};
use tdset_operator::api::{OrderDirection, TDSet};
use tdset_operator::clock::SystemClock;

const T0: &str = "2026-05-04T09:59:40Z";

fn at(secs: i64) -> DateTime<Utc> {
    utc(T0) + Duration::seconds(secs)
}

/// `name`, a Deployment of the `dev` environment in `tier` (none: in no tier), at `replicas`,
/// whose pods go Ready `delay` after they are bound.
fn workload(name: &str, tier: Option<&str>, replicas: i32, delay: &str) -> Value {
    let mut d = app_deployment(name, replicas);
    d["metadata"]["labels"]["env"] = json!("dev");
    if let Some(t) = tier {
        d["metadata"]["labels"]["tier"] = json!(t);
    }
    d["spec"]["template"]["metadata"]["annotations"] =
        json!({"pod-ready.stage.kwok.x-k8s.io/delay": delay});
    d
}

/// A group of the `dev` environment, tiers data then backend, asleep over each `(sleep, wake)`
/// (seconds after `T0`), its own counts otherwise.
fn environment(nights: &[(i64, i64)], tier_timeout: Option<&str>) -> Value {
    let mut sel = json!({
        "kinds": ["Deployment"],
        "selector": {"matchLabels": {"env": "dev"}},
        "order": [{"matchLabels": {"tier": "data"}}, {"matchLabels": {"tier": "backend"}}],
    });
    if let Some(t) = tier_timeout {
        sel["tierTimeout"] = json!(t);
    }
    json!({
        "scaleTargetSelector": sel,
        "schedulingConfig": [],
        "overrides": nights.iter().map(|(sleep, wake)| json!({
            "start": at(*sleep).to_rfc3339(), "end": at(*wake).to_rfc3339(),
            "replica": 0, "reason": "night"})).collect::<Vec<_>>(),
    })
}

async fn order_status(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<tdset_operator::api::OrderStatus> {
    let t = Api::<TDSet>::namespaced(client.clone(), ns)
        .get_status(name)
        .await
        .ok()?;
    t.status?.group?.order
}

/// A whole environment of three tiers: going to sleep, the front ends go first and each tier
/// once the one after it has no ready replicas left; waking, the data tier first and each tier
/// once the one before it is ready. The status says which tier is waited on, and the change
/// is one entry in the history, seen ready once the last tier is. With a Measured warm-up,
/// the next wake-up starts the sum of the tiers' times ahead, and the whole environment is
/// ready at its transition.
#[tokio::test]
async fn an_environment_wakes_tier_by_tier_and_sleeps_in_reverse() {
    let (client, ns) = setup("group-order").await;
    let n = &ns.name;
    let recorder = Recorder::start(&client, n);
    for (name, tier, own) in [
        ("db", Some("data"), 1),
        ("api", Some("backend"), 2),
        ("web", None, 2),
    ] {
        let _: Deployment = create_object(&client, n, workload(name, tier, own, "5s")).await;
    }
    for (name, own) in [("db", 1), ("api", 2), ("web", 2)] {
        recorder
            .until(0, name, "its own count ready", move |spec, ready| {
                spec == own && ready == own
            })
            .await;
    }
    let clock = SystemClock::starting_at(utc(T0));
    let _op = Operator::start(&client, n, clock, None, "test");
    let mut env = environment(&[(25, 70), (100, 150)], None);
    env["warmUp"] = json!({"mode": "Measured"});
    create_tdset(&client, n, &tdset("env", env)).await;

    // Going to sleep at T0+25: web, then api once web has no ready replicas, then db.
    let mark = recorder.log().len();
    let web_down = recorder
        .until(mark, "web", "set to 0", |spec, _| spec == 0)
        .await;
    let web_gone = recorder
        .until(web_down, "web", "no ready replicas", |spec, ready| {
            spec == 0 && ready == 0
        })
        .await;
    let api_down = recorder
        .until(mark, "api", "set to 0", |spec, _| spec == 0)
        .await;
    let api_gone = recorder
        .until(api_down, "api", "no ready replicas", |spec, ready| {
            spec == 0 && ready == 0
        })
        .await;
    let db_down = recorder
        .until(mark, "db", "set to 0", |spec, _| spec == 0)
        .await;
    let log = recorder.log();
    assert!(
        web_gone < api_down,
        "api was set to 0 before web had gone: {log:?}"
    );
    assert!(
        api_gone < db_down,
        "db was set to 0 before api had gone: {log:?}"
    );

    // Waking at T0+70: db first; while it starts, the status names the tier waited on.
    let mark = recorder.log().len();
    let db_up = recorder
        .until(mark, "db", "set to 1", |spec, _| spec == 1)
        .await;
    let waiting = eventually(GUARD, "the status to name the tier waited on", || async {
        order_status(&client, n, "env")
            .await
            .filter(|o| o.direction == OrderDirection::Waking)
    })
    .await;
    assert_eq!((waiting.tier, waiting.tiers), (1, 3), "{waiting:?}");
    assert!(waiting.waiting_for.contains("Deployment db"), "{waiting:?}");
    assert!(waiting.started.is_some(), "{waiting:?}");
    let db_ready = recorder
        .until(db_up, "db", "ready", |spec, ready| spec == 1 && ready == 1)
        .await;
    let api_up = recorder
        .until(mark, "api", "set to 2", |spec, _| spec == 2)
        .await;
    let api_ready = recorder
        .until(api_up, "api", "ready", |spec, ready| {
            spec == 2 && ready == 2
        })
        .await;
    let web_up = recorder
        .until(mark, "web", "set to 2", |spec, _| spec == 2)
        .await;
    let log = recorder.log();
    assert!(
        db_ready < api_up,
        "api was woken before db was ready: {log:?}"
    );
    assert!(
        api_ready < web_up,
        "web was woken before api was ready: {log:?}"
    );

    // One entry for the wake-up, from the total before its first tier to the total after its
    // last, seen ready once the last tier was.
    let t = object_where(&client, n, "env", "the wake-up seen ready", |t: &TDSet| {
        t.status.as_ref().is_some_and(|s| {
            s.history
                .first()
                .is_some_and(|e| utc(&e.at) == at(70) && e.ready_at.is_some())
        })
    })
    .await;
    let status = t.status.unwrap();
    let wakes: Vec<_> = status
        .history
        .iter()
        .filter(|e| utc(&e.at) >= at(70))
        .collect();
    assert_eq!(wakes.len(), 1, "{:#?}", status.history);
    assert_eq!(
        (wakes[0].from, wakes[0].to),
        (Some(0), Some(5)),
        "{wakes:?}"
    );
    let sleeps: Vec<_> = status
        .history
        .iter()
        .filter(|e| utc(&e.at) == at(25))
        .collect();
    assert_eq!(sleeps.len(), 1, "{:#?}", status.history);
    assert_eq!(
        status.group.as_ref().and_then(|g| g.order.clone()),
        None,
        "nothing held back any more"
    );
    // Three tiers of 5 s each, one after the other: the wake-up took their sum.
    let first = wakes[0];
    let took = utc(first.ready_at.as_deref().unwrap()) - utc(first.applied_at.as_deref().unwrap());
    assert!(took >= Duration::seconds(15), "{first:?}");

    // The second wake-up, at T0+150: written ahead by what the first took, each tier still
    // after the one before it, and the whole environment ready by its transition. It is some
    // 60 s away (GUARD) when the first was seen ready quickly: a longer guard, which only stops
    // a hung test (the assertions below are about the operator's clock).
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let t = eventually(
        Duration::seconds(240).to_std().unwrap(),
        "the second wake-up seen ready",
        || async {
            let t = tdsets.get("env").await.ok()?;
            let seen = t.status.as_ref().is_some_and(|s| {
                s.history
                    .iter()
                    .any(|e| utc(&e.at) == at(150) && e.ready_at.is_some())
            });
            seen.then_some(t)
        },
    )
    .await;
    let status = t.status.unwrap();
    let second = status
        .history
        .iter()
        .find(|e| utc(&e.at) == at(150))
        .unwrap();
    let applied = utc(second.applied_at.as_deref().unwrap());
    assert!(
        applied <= at(150) - took,
        "{second:?} (the first took {took})"
    );
    assert!(
        utc(second.ready_at.as_deref().unwrap()) <= at(151),
        "{second:?}\n{status:#?}"
    );
    let log = recorder.log();
    let mark = log
        .iter()
        .rposition(|(n, spec, _)| n == "db" && *spec == 0)
        .unwrap();
    let db_ready = recorder
        .first(mark, "db", |spec, ready| spec == 1 && ready == 1)
        .unwrap();
    let api_up = recorder.first(mark, "api", |spec, _| spec == 2).unwrap();
    let api_ready = recorder
        .first(api_up, "api", |spec, ready| spec == 2 && ready == 2)
        .unwrap();
    let web_up = recorder.first(mark, "web", |spec, _| spec == 2).unwrap();
    assert!(db_ready < api_up && api_ready < web_up, "{log:?}");
    ns.cleanup().await;
}

/// A tier that never gets ready holds the next one back for `tierTimeout`, no longer: the next
/// is written anyway, and the TDSet says so in a Warning.
#[tokio::test]
async fn a_tier_that_never_gets_ready_is_passed_over_after_its_timeout_and_said() {
    let (client, ns) = setup("group-order-timeout").await;
    let n = &ns.name;
    let recorder = Recorder::start(&client, n);
    // db's pods are never Ready within the test; web's at once.
    let _: Deployment = create_object(&client, n, workload("db", Some("data"), 1, "1h")).await;
    let _: Deployment = create_object(&client, n, workload("web", None, 1, "1s")).await;
    let clock = SystemClock::starting_at(utc(T0));
    let op = Operator::start(&client, n, clock, None, "test");
    create_tdset(
        &client,
        n,
        &tdset("env", environment(&[(0, 30)], Some("8s"))),
    )
    .await;
    recorder.until(0, "db", "asleep", |spec, _| spec == 0).await;
    let mark = recorder.log().len();
    let db_up = recorder
        .until(mark, "db", "set to 1", |spec, _| spec == 1)
        .await;
    let web_up = recorder
        .until(mark, "web", "set to 1", |spec, _| spec == 1)
        .await;
    assert!(db_up < web_up, "{:?}", recorder.log());
    assert!(
        recorder.first(db_up, "db", |_, ready| ready > 0).is_none(),
        "db was never ready, so only the timeout let web go: {:?}",
        recorder.log()
    );
    wait_for_event(&client, n, "env", |(kind, reason, note)| {
        kind == "Warning"
            && reason == "TierTimedOut"
            && note.contains("Deployment db: 0 of 1 ready")
    })
    .await;
    assert!(op.counter("tdset_group_tier_timeouts_total") >= 1.0);
    ns.cleanup().await;
}

/// An HPA is in the tier of the workload it scales, matched by kind and name: a StatefulSet
/// `db` in the data tier with its HPA, beside an untiered Deployment also named `db`. Waking,
/// the data tier's HPA floor is written with its tier, so the tier gets there and the next
/// one follows (the first version put the HPA in the Deployment's tier, held its floor back
/// behind the data tier that waited for it, and the data tier waited out `tierTimeout`).
#[tokio::test]
async fn an_hpa_wakes_in_the_tier_of_its_own_workload_not_of_a_same_named_one() {
    let (client, ns) = setup("group-order-hpa").await;
    let n = &ns.name;
    let recorder = Recorder::start(&client, n);
    let _: k8s_openapi::api::apps::v1::StatefulSet = create_object(
        &client,
        n,
        json!({
            "metadata": {"name": "db", "labels": {"app": "db-sts", "env": "dev", "tier": "data"}},
            "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db-sts"}},
                     "template": {"metadata": {"labels": {"app": "db-sts"}},
                                  "spec": {"containers": [{"name": "app", "image": "redis:7"}]}}}
        }),
    )
    .await;
    let mut hpa = hpa("db", "db", 1, 5);
    hpa["spec"]["scaleTargetRef"]["kind"] = json!("StatefulSet");
    let _: k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler =
        create_object(&client, n, hpa).await;
    let _: Deployment = create_object(&client, n, workload("db", None, 1, "1s")).await;
    let clock = SystemClock::starting_at(utc(T0));
    let _op = Operator::start(&client, n, clock, None, "test");
    // Asleep until T0+15s, 2 of each after it; a tier is waited for far longer than the test.
    let mut env = environment(&[(-60, 15)], Some("1h"));
    env["scaleTargetSelector"]["kinds"] = json!(["Deployment", "StatefulSet"]);
    env["defaultReplica"] = json!(2);
    create_tdset(&client, n, &tdset("env", env)).await;
    recorder.until(0, "db", "asleep", |spec, _| spec == 0).await;

    // Waking: the StatefulSet's floor of 2 is its tier's, so the data tier gets there and the
    // Deployment db, in the last tier, follows.
    let mark = recorder.log().len();
    recorder
        .until(mark, "db", "set to 2", |spec, _| spec == 2)
        .await;
    let sts: k8s_openapi::api::apps::v1::StatefulSet =
        Api::namespaced(client.clone(), n).get("db").await.unwrap();
    let ready = sts.status.and_then(|s| s.ready_replicas).unwrap_or(0);
    assert!(ready >= 2, "the data tier was passed over: {ready} ready");
    ns.cleanup().await;
}
