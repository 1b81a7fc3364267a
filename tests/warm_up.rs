//! `spec.warmUp` on the real API server: a scale-up written ahead of its transition, a
//! scale-down written at its instant, and the same schedule without a lead beside it. The
//! operator's clock starts at `T0` and runs at real speed; what is compared is that clock's
//! own record of each write (`status.history`'s `appliedAt`), never the test's wall clock.

mod support;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::{Value, json};
use support::*;
use tdset_operator::api::{HistoryEntry, TDSet};
use tdset_operator::clock::SystemClock;

const T0: &str = "2026-05-04T09:59:40Z";

fn at(secs: i64) -> DateTime<Utc> {
    utc(T0) + Duration::seconds(secs)
}

/// `app` at 1, 3 from `T0+20s` to `T0+35s`, with `warm_up`.
fn spec(app: &str, warm_up: Option<Value>) -> Value {
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
        "schedulingConfig": [],
        "defaultReplica": 1,
        "overrides": [{"start": at(20).to_rfc3339(), "end": at(35).to_rfc3339(),
                       "replica": 3, "reason": "launch"}],
    });
    if let Some(w) = warm_up {
        spec["warmUp"] = w;
    }
    spec
}

/// The history entry of the change to `to`, once it has landed.
async fn landed(client: &kube::Client, ns: &str, name: &str, to: i32) -> HistoryEntry {
    eventually(
        GUARD,
        &format!("{name}: the change to {to} landed"),
        || async {
            let t = Api::<TDSet>::namespaced(client.clone(), ns)
                .get_status(name)
                .await
                .ok()?;
            t.status?
                .history
                .into_iter()
                .find(|e| e.to == Some(to) && e.applied_at.is_some())
        },
    )
    .await
}

fn applied(e: &HistoryEntry) -> DateTime<Utc> {
    utc(e.applied_at.as_deref().expect("landed"))
}

#[tokio::test]
async fn a_scale_up_is_written_ahead_and_a_scale_down_on_time() {
    let (client, ns) = setup("warm-up").await;
    let n = &ns.name;
    for app in ["led", "plain"] {
        let _: Deployment = create_object(&client, n, app_deployment(app, 1)).await;
    }
    let _op = Operator::start(&client, n, SystemClock::starting_at(utc(T0)), None, "test");
    let fixed = json!({"mode": "Fixed", "lead": "10s"});
    create_tdset(&client, n, &tdset("led", spec("led", Some(fixed)))).await;
    create_tdset(&client, n, &tdset("plain", spec("plain", None))).await;

    // Before the rise: status says when the schedule changes, and when the write starts.
    let t = object_where(
        &client,
        n,
        "led",
        "the write's start in status",
        |t: &TDSet| {
            t.status
                .as_ref()
                .is_some_and(|s| s.next_write_time.is_some())
        },
    )
    .await;
    let status = t.status.unwrap();
    assert_eq!(status.next_transition_time.map(|t| utc(&t)), Some(at(20)));
    assert_eq!(status.next_write_time.map(|t| utc(&t)), Some(at(10)));
    assert_eq!(status.desired_replicas, Some(1));

    // The rise: recorded at its instant, applied up to 10 s before it; without a lead, at it.
    let rise = landed(&client, n, "led", 3).await;
    assert_eq!(utc(&rise.at), at(20));
    assert!(
        applied(&rise) >= at(10) && applied(&rise) < at(20),
        "written at {:?}, for 3 from {}",
        rise.applied_at,
        rise.at
    );
    assert!(rise.reason.contains("warmUp"), "{}", rise.reason);
    let plain = landed(&client, n, "plain", 3).await;
    assert!(applied(&plain) >= at(20), "{plain:?}");

    // The fall is never early, with a lead or without.
    for name in ["led", "plain"] {
        let fall = landed(&client, n, name, 1).await;
        assert_eq!(utc(&fall.at), at(35));
        assert!(applied(&fall) >= at(35), "{name}: {fall:?}");
        deployment_at(&client, n, name, 1).await;
    }
    ns.cleanup().await;
}
