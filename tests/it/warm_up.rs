//! `spec.warmUp` on the real API server: a scale-up written ahead of its transition, a
//! scale-down written at its instant, and the same schedule without a lead beside it. The
//! operator's clock starts at `T0` and runs at real speed; what is compared is that clock's
//! own record of each write (`status.history`'s `appliedAt`), never the test's wall clock.

use crate::support::*;
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::{Value, json};
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

/// The first entry of TDSet `name`'s history that `found` accepts, once there is one.
async fn entry_where(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    found: impl Fn(&HistoryEntry) -> bool,
) -> HistoryEntry {
    eventually(GUARD * 2, &format!("{name}: {what}"), || async {
        let t = Api::<TDSet>::namespaced(client.clone(), ns)
            .get_status(name)
            .await
            .ok()?;
        t.status?.history.into_iter().find(|e| found(e))
    })
    .await
}

/// The history entry of the change to `to`, once it has landed.
async fn landed(client: &kube::Client, ns: &str, name: &str, to: i32) -> HistoryEntry {
    let what = format!("the change to {to} landed");
    entry_where(client, ns, name, &what, |e| {
        e.to == Some(to) && e.applied_at.is_some()
    })
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

/// `app`, a Deployment of someone else's whose pods go Ready `delay` after they are bound
/// (kwok's stage delay: a slow start-up or readiness probe), at `replicas`.
fn slow_deployment(app: &str, replicas: i32, delay: &str) -> Value {
    let mut d = app_deployment(app, replicas);
    d["spec"]["template"]["metadata"]["annotations"] =
        json!({"pod-ready.stage.kwok.x-k8s.io/delay": delay});
    d
}

/// `app` at 1, and at 3 over each `(start, end)`, in seconds after `T0`.
fn windows(app: &str, rises: &[(i64, i64)], warm_up: Option<Value>) -> Value {
    let mut spec = spec(app, warm_up);
    spec["overrides"] = rises
        .iter()
        .map(|(from, to)| {
            json!({"start": at(*from).to_rfc3339(), "end": at(*to).to_rfc3339(),
                   "replica": 3, "reason": "peak"})
        })
        .collect();
    spec
}

/// The history entry of the scale-up at `secs` after `T0`, once its count was seen ready.
async fn ready(client: &kube::Client, ns: &str, name: &str, secs: i64) -> HistoryEntry {
    ready_to(client, ns, name, secs, 3).await
}

/// The history entry of the scale-up to `to` at `secs` after `T0`, once seen ready.
async fn ready_to(client: &kube::Client, ns: &str, name: &str, secs: i64, to: i32) -> HistoryEntry {
    let what = format!("the scale-up at T0+{secs}s seen ready");
    entry_where(client, ns, name, &what, |e| {
        utc(&e.at) == at(secs) && e.to == Some(to) && e.ready_at.is_some()
    })
    .await
}

fn ready_at(e: &HistoryEntry) -> DateTime<Utc> {
    utc(e.ready_at.as_deref().expect("seen ready"))
}

/// Pods that are Ready 8 s after they are bound. The first scale-up of a Measured TDSet is
/// written at its transition (nothing measured yet) and is late; from the second on it is
/// written ahead by what was measured plus a margin, and is ready by the transition. The same
/// schedule without `warmUp` is late every time, and says so. A restart of the operator
/// between two scale-ups keeps what was measured.
#[tokio::test]
async fn a_measured_lead_learns_the_time_to_ready_and_serves_at_the_transition() {
    let (client, ns) = setup("warm-up-measured").await;
    let n = &ns.name;
    for app in ["measured", "off"] {
        let _: Deployment = create_object(&client, n, slow_deployment(app, 1, "8s")).await;
    }
    let clock = SystemClock::starting_at(utc(T0));
    let op = Operator::start(&client, n, clock, None, "test");
    // A group of two such Deployments, asleep but for the same windows: timed as a whole.
    for app in ["data", "api"] {
        let mut d = slow_deployment(app, 1, "8s");
        d["metadata"]["labels"]["tier"] = json!("slow");
        let _: Deployment = create_object(&client, n, d).await;
    }
    let rises = [(20, 45), (75, 100), (130, 155)];
    let measured = json!({"mode": "Measured"});
    let single = windows("measured", &rises, Some(measured.clone()));
    create_tdset(&client, n, &tdset("measured", single)).await;
    create_tdset(&client, n, &tdset("off", windows("off", &rises, None))).await;
    let mut group = windows("group", &rises, Some(measured));
    group["scaleTargetRef"] = Value::Null;
    group["scaleTargetSelector"] =
        json!({"kinds": ["Deployment"], "selector": {"matchLabels": {"tier": "slow"}}});
    group["defaultReplica"] = json!(0);
    create_tdset(&client, n, &tdset("group", group)).await;

    // The first scale-up: written at its transition, ready when the pods are (8 s or more).
    let first = ready(&client, n, "measured", 20).await;
    assert!(applied(&first) >= at(20), "{first:?}");
    let took = (ready_at(&first) - applied(&first)).num_seconds();
    assert!(took >= 8, "ready {took} s after the write: {first:?}");
    let t = object_where(&client, n, "measured", "a sample", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.warm_up.as_ref())
            .is_some_and(|w| !w.samples.is_empty())
    })
    .await;
    let warm_up = t.status.unwrap().warm_up.unwrap();
    assert_eq!(warm_up.basis, tdset_operator::api::LeadBasis::Measured);
    let sample = i64::from(warm_up.samples[0]);
    assert!(
        (took..=took + 1).contains(&sample),
        "{warm_up:?}, took {took}"
    );
    // The 90th percentile of one sample is itself; the margin is 5 s at this size.
    let lead = Duration::seconds(sample + 5);
    assert_eq!(
        tdset_operator::schedule::parse_duration(&warm_up.lead),
        Some(lead)
    );

    // The second: written the measured time plus its margin ahead, and ready by its
    // transition (a second's grace for the reconcile that sees it); without warmUp, late.
    let second = ready(&client, n, "measured", 75).await;
    assert!(
        applied(&second) >= at(75) - lead - Duration::seconds(1),
        "written at {:?}, lead {lead}",
        second.applied_at
    );
    assert!(
        applied(&second) < at(75) - Duration::seconds(8),
        "{second:?}"
    );
    assert!(ready_at(&second) <= at(76), "{second:?}");
    let off = ready(&client, n, "off", 75).await;
    assert!(applied(&off) >= at(75), "{off:?}");
    assert!(ready_at(&off) >= at(75) + Duration::seconds(8), "{off:?}");
    wait_for_event(&client, n, "off", |(kind, reason, note)| {
        kind == "Warning" && reason == "ScaleUpLate" && note.contains("spec.warmUp")
    })
    .await;
    // The group: its second scale-up (two workloads, 0 to 3 each) ready by its transition.
    let group = ready_to(&client, n, "group", 75, 6).await;
    let status = Api::<TDSet>::namespaced(client.clone(), n)
        .get_status("group")
        .await
        .unwrap()
        .status;
    assert!(
        applied(&group) < at(75) - Duration::seconds(8),
        "{group:?}\n{status:#?}"
    );
    assert!(ready_at(&group) <= at(76), "{group:?}");
    assert!(op.counter("tdset_scale_up_lateness_seconds_count") >= 3.0);
    assert!(op.counter("tdset_warm_up_early_replica_seconds_total") > 0.0);

    // A restart (the process dies) before the third: what was measured is in status, and the
    // third is written ahead again, not at its transition as the first was.
    op.kill();
    let _op = Operator::start(&client, n, clock, None, "test");
    let third = ready(&client, n, "measured", 130).await;
    assert!(
        applied(&third) < at(130) - Duration::seconds(8),
        "{third:?}"
    );
    assert!(ready_at(&third) <= at(131), "{third:?}");
    let group = ready_to(&client, n, "group", 130, 6).await;
    assert!(
        applied(&group) < at(130) - Duration::seconds(8),
        "{group:?}"
    );
    ns.cleanup().await;
}

/// A group waking with a lead: its Deployment is written ahead, so that it serves at the
/// transition, but its CronJob's suspend is no capacity to warm up: it follows the schedule
/// and is lifted at the transition, not with the lead (the first version lifted it with the
/// lead, so jobs could be created before the window began).
#[tokio::test]
async fn a_waking_groups_cronjob_is_unsuspended_at_the_transition_not_ahead() {
    use k8s_openapi::api::batch::v1::CronJob;
    let (client, ns) = setup("warm-up-cron").await;
    let n = &ns.name;
    let mut api = app_deployment("api", 1);
    api["metadata"]["labels"]["env"] = json!("dev");
    let _: Deployment = create_object(&client, n, api).await;
    let _: CronJob = create_object(
        &client,
        n,
        json!({
            "metadata": {"name": "report", "labels": {"env": "dev"}},
            "spec": {"schedule": "0 3 * * *",
                     "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "job", "image": "busybox", "command": ["true"]}]}}}}}
        }),
    )
    .await;
    let clock = SystemClock::starting_at(utc(T0));
    let _op = Operator::start(&client, n, clock, None, "test");
    // Asleep until T0+12s, each workload's own count (the level `own`) after it.
    let spec = json!({
        "scaleTargetSelector": {"kinds": ["Deployment", "CronJob"],
                                "selector": {"matchLabels": {"env": "dev"}}},
        "schedulingConfig": [],
        "overrides": [{"start": at(-60).to_rfc3339(), "end": at(12).to_rfc3339(),
                       "replica": 0, "reason": "night"}],
        "warmUp": {"mode": "Fixed", "lead": "6s"},
    });
    create_tdset(&client, n, &tdset("env", spec)).await;
    let suspended = |c: &CronJob| c.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    object_where(&client, n, "report", "CronJob report suspended", suspended).await;
    deployment_at(&client, n, "api", 0).await;

    // The Deployment is written ahead of the transition...
    let tdsets = Api::<TDSet>::namespaced(client.clone(), n);
    let woken = eventually(GUARD, "the wake-up written ahead", || async {
        let t = tdsets.get_status("env").await.ok()?;
        (t.status?.history.into_iter())
            .filter(|e| utc(&e.at) == at(12) && e.applied_at.is_some())
            .min_by_key(applied)
    })
    .await;
    assert!(applied(&woken) < at(12), "{woken:?}");
    deployment_at(&client, n, "api", 1).await;
    // ...the CronJob not: read before the transition, it is still suspended.
    let report: CronJob = Api::namespaced(client.clone(), n)
        .get("report")
        .await
        .unwrap();
    if tdset_operator::clock::Clock::now(&clock) < at(12) {
        let suspend = report.spec.as_ref().and_then(|s| s.suspend);
        assert!(suspended(&report), "unsuspended ahead: suspend={suspend:?}");
    }
    // Its own change, lifted at the transition: recorded there, applied at or after it.
    object_where(
        &client,
        n,
        "report",
        "CronJob report running",
        |c: &CronJob| !suspended(c),
    )
    .await;
    let lifted = entry_where(&client, n, "env", "the CronJob's change", |e| {
        utc(&e.at) == at(12) && e.to == Some(2) && e.applied_at.is_some()
    })
    .await;
    assert!(applied(&lifted) >= at(12), "{lifted:?}");
    ns.cleanup().await;
}
