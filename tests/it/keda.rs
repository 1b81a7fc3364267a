//! KEDA ScaledObjects as targets (issue 50), against a real KEDA operator (v2.21.0, built from
//! its module with the control plane, its CRDs from the same module) on the suite's control
//! plane with kube-controller-manager. Each test runs its own KEDA, watching its namespace.
//!
//! The ScaledObjects use a cron trigger that is never active: KEDA holds the workload at its
//! `minReplicaCount`, so the counts below are KEDA's own doing, from what the operator wrote.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";
const PAUSED: &str = "autoscaling.keda.sh/paused";

/// Noon on a Friday (UTC).
fn noon() -> SystemClock {
    SystemClock::starting_at(utc("2026-05-01T12:00:00Z"))
}

/// Deployment `name` at `replicas`, and ScaledObject `name` over it (`min`..10), with
/// `annotations`; once KEDA has made its HPA.
async fn scaled_web(client: &Client, ns: &str, replicas: i32, min: i32, annotations: Value) {
    let _: Deployment = create_object(client, ns, app_deployment("web", replicas)).await;
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": min,
                 "maxReplicaCount": 10, "triggers": [never_active_cron()]}
    }))
    .unwrap();
    scaled_objects(client, ns)
        .create(&PostParams::default(), &object)
        .await
        .expect("creating the ScaledObject");
}

/// Waits until ScaledObject `web` satisfies `pred` (as JSON).
async fn scaled_object_where(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let api = scaled_objects(client, ns);
    eventually(GUARD, what, || async {
        let o = api.get_opt("web").await.ok().flatten()?;
        let v = serde_json::to_value(o).ok()?;
        pred(&v).then_some(v)
    })
    .await
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// KEDA's Paused condition.
fn paused(o: &Value) -> Option<bool> {
    let c = o
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Paused")?;
    Some(c["status"] == "True")
}

fn spec_count(o: &Value, field: &str) -> Option<i64> {
    o.pointer(&format!("/spec/{field}"))?.as_i64()
}

/// A TDSet over ScaledObject web: `day` replicas from `start`:00 to 17:00, 0 otherwise (at
/// noon: start 9 is the day, start 13 the night).
fn over_web(start: u32, day: i32, ceiling: Option<i32>) -> Value {
    let mut window = json!({"name": "office", "startTime": start, "endTime": 17, "replica": day});
    if let Some(max) = ceiling {
        window["maxReplica"] = json!(max);
    }
    json!({
        "scaleTargetRef": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "web"},
        "schedulingConfig": [window],
        "defaultReplica": 0,
    })
}

async fn set_spec(client: &Client, ns: &str, spec: Value) {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .patch(
            "sched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .expect("editing the TDSet");
}

/// KEDA's HPA for ScaledObject web, once it is there and satisfies `pred`.
async fn keda_hpa(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&HorizontalPodAutoscaler) -> bool,
) -> HorizontalPodAutoscaler {
    object_where(client, ns, "keda-hpa-web", what, pred).await
}

async fn keda_hpa_gone(client: &Client, ns: &str) {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    eventually(GUARD, "KEDA's HPA deleted", || async {
        matches!(api.get_opt("keda-hpa-web").await, Ok(None)).then_some(())
    })
    .await;
}

fn target_record(t: &TDSet) -> Option<&tdset_operator::api::TargetStatus> {
    t.status.as_ref()?.target.as_ref()
}

/// A Helm upgrade sets Deployment web's count while its ScaledObject is paused at 0: KEDA
/// would leave it, and TDSet `tdset` makes KEDA put it back (a `DriftCorrected` Event), and web
/// is at 0 again. (KEDA may still be finishing its own pause: its HPA's deletion has it
/// reconcile once more, which scales to 0 too. A drift KEDA put right by itself proves
/// nothing, so it is made again.)
async fn helm_sets_web_while_paused(client: &Client, n: &str, tdset: &str) {
    let deploys = Api::<Deployment>::namespaced(client.clone(), n);
    let mut corrected = false;
    for _ in 0..3 {
        let helm = Patch::Merge(json!({"spec": {"replicas": 3}}));
        deploys
            .patch("web", &PatchParams::default(), &helm)
            .await
            .unwrap();
        corrected = eventually(GUARD, "the drift put right", || async {
            let events = events_for(client, n, tdset).await;
            if events
                .iter()
                .any(|(_, reason, _)| reason == "DriftCorrected")
            {
                return Some(true);
            }
            let d = deploys.get("web").await.ok()?;
            (replicas(&d) == Some(0)).then_some(false)
        })
        .await;
        if corrected {
            break;
        }
    }
    assert!(corrected, "the operator never put the drifted count right");
    deployment_at(client, n, "web", 0).await;
}

/// The night: KEDA's pause (both annotations), which KEDA takes (Paused, its HPA deleted, the
/// workload at 0); a count changed by hand while paused (KEDA does not watch the workload) is
/// put right through the ScaledObject; the morning takes the pause off and sets the floor, and
/// KEDA's HPA comes back and KEDA scales the workload up to it; a scheduled ceiling lands as
/// `maxReplicaCount`; letting go gives the own ceiling back.
#[tokio::test]
async fn a_scaled_object_sleeps_through_keda_s_pause_is_kept_asleep_and_wakes_with_its_hpa() {
    let (client, ns) = setup("keda-night").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    scaled_web(&client, n, 2, 2, json!({})).await;
    // KEDA is at work, at the version it was built as.
    let h = keda_hpa(&client, n, "KEDA's HPA", |_| true).await;
    let version = h
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/version"));
    assert_eq!(version.map(String::as_str), Some("2.21.0"));

    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_web(13, 3, None))).await;
    let night = scaled_object_where(&client, n, "paused by the schedule, and by KEDA", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("0")
            && annotation(o, PAUSED) == Some("true")
            && paused(o) == Some(true)
    })
    .await;
    assert_eq!(
        spec_count(&night, "minReplicaCount"),
        Some(2),
        "the floor is left while paused"
    );
    deployment_at(&client, n, "web", 0).await;
    keda_hpa_gone(&client, n).await;
    let t = object_where(
        &client,
        n,
        "sched",
        "the originals recorded",
        |t: &TDSet| target_record(t).is_some_and(|r| r.original_pause.is_some()),
    )
    .await;
    let record = target_record(&t).unwrap();
    assert_eq!(
        record.original_pause,
        Some(Default::default()),
        "no pause of the user's"
    );
    assert_eq!(record.original_replicas, Some(2));

    // A Helm upgrade sets the count while paused: KEDA would leave it. The operator makes
    // KEDA put it back.
    helm_sets_web_while_paused(&client, n, "sched").await;

    // The morning: the pause taken off, the floor set; KEDA's HPA back, the workload up.
    set_spec(&client, n, over_web(9, 3, None)).await;
    let day = scaled_object_where(&client, n, "unpaused with the day's floor", |o| {
        annotation(o, PAUSED_REPLICAS).is_none()
            && annotation(o, PAUSED).is_none()
            && paused(o) == Some(false)
            && spec_count(o, "minReplicaCount") == Some(3)
    })
    .await;
    assert_eq!(spec_count(&day, "maxReplicaCount"), Some(10));
    keda_hpa(&client, n, "KEDA's HPA back at the floor", |h| {
        h.spec.as_ref().and_then(|s| s.min_replicas) == Some(3)
    })
    .await;
    deployment_at(&client, n, "web", 3).await;

    // A ceiling by schedule, where KEDA keeps it; the own recorded first.
    set_spec(&client, n, over_web(9, 3, Some(5))).await;
    scaled_object_where(&client, n, "the ceiling 5", |o| {
        spec_count(o, "maxReplicaCount") == Some(5)
    })
    .await;
    keda_hpa(&client, n, "KEDA's HPA under the ceiling", |h| {
        h.spec.as_ref().map(|s| s.max_replicas) == Some(5)
    })
    .await;
    let t: TDSet = Api::namespaced(client.clone(), n)
        .get("sched")
        .await
        .unwrap();
    assert_eq!(
        target_record(&t).and_then(|r| r.original_max_replicas),
        Some(10)
    );

    // Deleted (onDelete: Keep): the own ceiling comes back, the floor stays.
    delete_tdset_and_wait(&client, n, "sched").await;
    let after = scaled_object_where(&client, n, "its own ceiling back", |o| {
        spec_count(o, "maxReplicaCount") == Some(10)
    })
    .await;
    assert_eq!(spec_count(&after, "minReplicaCount"), Some(3));
    assert_eq!(annotation(&after, PAUSED_REPLICAS), None);
    op.stop().await;
    ns.cleanup().await;
}

/// A pause of the user's own (at 1) before the night is recorded first, replaced by the
/// schedule's, and is the one left in the morning: KEDA holds the workload at 1 again.
#[tokio::test]
async fn a_user_s_own_pause_before_the_night_is_the_one_left_afterwards() {
    let (client, ns) = setup("keda-own").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    scaled_web(&client, n, 2, 2, json!({PAUSED_REPLICAS: "1"})).await;
    deployment_at(&client, n, "web", 1).await;

    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_web(13, 3, None))).await;
    scaled_object_where(&client, n, "the schedule's pause", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("0") && annotation(o, PAUSED) == Some("true")
    })
    .await;
    deployment_at(&client, n, "web", 0).await;
    let t: TDSet = Api::namespaced(client.clone(), n)
        .get("sched")
        .await
        .unwrap();
    let own = target_record(&t)
        .and_then(|r| r.original_pause.clone())
        .unwrap_or_default();
    assert_eq!(own.paused_replicas.as_deref(), Some("1"));
    assert_eq!(own.paused, None);

    set_spec(&client, n, over_web(9, 3, None)).await;
    scaled_object_where(&client, n, "the user's pause back", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("1") && annotation(o, PAUSED).is_none()
    })
    .await;
    deployment_at(&client, n, "web", 1).await;
    object_where(
        &client,
        n,
        "sched",
        "the pause given back, off the record",
        |t: &TDSet| target_record(t).is_some_and(|r| r.original_pause.is_none()),
    )
    .await;
    // Given back, it is the user's: the checks that follow (every 15 s) leave it, and so does
    // letting go.
    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
    delete_tdset_and_wait(&client, n, "sched").await;
    let after = serde_json::to_value(scaled_objects(&client, n).get("web").await.unwrap()).unwrap();
    assert_eq!(annotation(&after, PAUSED_REPLICAS), Some("1"));
    deployment_at(&client, n, "web", 1).await;
    op.stop().await;
    ns.cleanup().await;
}

/// KEDA, Deployment web (2) under ScaledObject web (floor 2), and TDSet sched's night: paused
/// by the schedule, KEDA's HPA deleted, the workload at 0.
async fn asleep_through_keda(client: &Client, n: &str) -> (KedaOperator, Operator) {
    let keda = KedaOperator::start(client, n).await;
    scaled_web(client, n, 2, 2, json!({})).await;
    keda_hpa(client, n, "KEDA's HPA", |_| true).await;
    let op = Operator::start(client, n, noon(), None, "test");
    create_tdset(client, n, &tdset("sched", over_web(13, 3, None))).await;
    deployment_at(client, n, "web", 0).await;
    keda_hpa_gone(client, n).await;
    (keda, op)
}

/// A TDSet deleted while its ScaledObject sleeps takes the pause off: KEDA resumes, makes its
/// HPA again and scales the workload back to its own minimum. The TDSet goes only once KEDA
/// has (keda#6982: a ScaledObject left paused with no pause on it, and nobody left to see it).
#[tokio::test]
async fn a_tdset_deleted_while_its_scaled_object_sleeps_gives_it_back_to_keda() {
    let (client, ns) = setup("keda-delete").await;
    let n = &ns.name;
    let (_keda, op) = asleep_through_keda(&client, n).await;

    delete_tdset_and_wait(&client, n, "sched").await;
    // Already so when the TDSet is gone: read once, not waited for.
    let so = serde_json::to_value(scaled_objects(&client, n).get("web").await.unwrap()).unwrap();
    assert_eq!(
        (
            annotation(&so, PAUSED_REPLICAS),
            annotation(&so, PAUSED),
            paused(&so)
        ),
        (None, None, Some(false)),
        "KEDA resumed before the TDSet went: {so:#}"
    );
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(web.spec.and_then(|s| s.replicas), Some(2));
    keda_hpa(&client, n, "KEDA's HPA made again", |_| true).await;
    op.stop().await;
    ns.cleanup().await;
}

/// A group given another form at night lets go of its workloads as a deletion does: the
/// ScaledObject's pause given back, and its workload's record of the night taken off once KEDA
/// runs it again, before the new form writes anything.
#[tokio::test]
async fn a_group_given_another_form_at_night_leaves_its_keda_workload_to_keda() {
    let (client, ns) = setup("keda-group-form").await;
    let n = &ns.name;
    let (_keda, op) = group_asleep_through_keda(&client, n).await;
    let _: Deployment = create_object(&client, n, app_deployment("api", 1)).await;

    set_spec(
        &client,
        n,
        json!({
            "scaleTargetSelector": null,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
            "schedulingConfig": [], "defaultReplica": 0,
        }),
    )
    .await;
    deployment_at(&client, n, "api", 0).await;
    // Already so once the new form writes: read once, not waited for.
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(replicas(&web), Some(2), "KEDA ran it again first");
    assert!(unmarked(&web), "no record left behind: {:?}", web.metadata);
    object_where(&client, n, "sched", "no group in status", |t: &TDSet| {
        t.status.as_ref().is_some_and(|s| s.group.is_none())
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// TDSet sched deleted (KEDA's operator down): once the ScaledObject is as `what` says, the
/// TDSet is still there, waiting for KEDA, and Deployment web still asleep.
async fn deleted_while_keda_is_down(
    client: &Client,
    n: &str,
    what: &str,
    so: impl Fn(&Value) -> bool,
) -> Api<TDSet> {
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    tdsets
        .delete("sched", &Default::default())
        .await
        .expect("deleting the TDSet");
    scaled_object_where(client, n, what, so).await;
    assert!(
        tdsets.get_opt("sched").await.unwrap().is_some(),
        "the TDSet is kept while KEDA is waited for"
    );
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(replicas(&web), Some(0), "still asleep");
    tdsets
}

/// The same with KEDA's operator down: nothing would take the workload off 0 (KEDA restores
/// nothing while it is not running). The TDSet is kept while KEDA is waited for (the pause
/// off, then `paused: "false"` as KEDA's documentation allows), then goes all the same, having
/// woken the workload to the ScaledObject's floor itself, with a Warning saying what KEDA did
/// not do.
#[tokio::test]
async fn a_tdset_deleted_while_keda_is_down_wakes_its_workload_itself_then_goes() {
    let (client, ns) = setup("keda-down").await;
    let n = &ns.name;
    let (keda, op) = asleep_through_keda(&client, n).await;
    drop(keda);

    deleted_while_keda_is_down(&client, n, "KEDA's documented unpause", |o| {
        annotation(o, PAUSED_REPLICAS).is_none() && annotation(o, PAUSED) == Some("false")
    })
    .await;
    tdset_gone(&client, n, "sched").await;
    deployment_at(&client, n, "web", 2).await;
    wait_for_event(&client, n, "sched", |(_, reason, note)| {
        reason == "KedaNotResumed" && note.contains("woke")
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// A ScaledObject deleted while the schedule has it paused at 0: KEDA's finalizer leaves the
/// workload at 0 (it restores nothing unless told to), and nothing would ever wake it; the
/// TDSet, which recorded the workload it put to sleep, wakes it to the ScaledObject's own floor.
#[tokio::test]
async fn a_scaled_object_deleted_while_it_sleeps_leaves_its_workload_woken() {
    let (client, ns) = setup("keda-gone").await;
    let n = &ns.name;
    let (_keda, op) = asleep_through_keda(&client, n).await;
    let t = object_where(
        &client,
        n,
        "sched",
        "the workload asleep on record",
        |t: &TDSet| target_record(t).is_some_and(|r| r.asleep.is_some()),
    )
    .await;
    let asleep = target_record(&t).and_then(|r| r.asleep.clone()).unwrap();
    assert_eq!(
        (asleep.target.kind.as_str(), asleep.target.name.as_str()),
        ("Deployment", "web")
    );

    scaled_objects(&client, n)
        .delete("web", &Default::default())
        .await
        .expect("deleting the ScaledObject");
    eventually(GUARD, "the ScaledObject gone", || async {
        matches!(scaled_objects(&client, n).get_opt("web").await, Ok(None)).then_some(())
    })
    .await;
    deployment_at(&client, n, "web", 2).await;
    object_where(
        &client,
        n,
        "sched",
        "nothing asleep on record",
        |t: &TDSet| target_record(t).is_some_and(|r| r.asleep.is_none()),
    )
    .await;
    let events = events_for(&client, n, "sched").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, m)| reason == "Restored" && m.contains("is gone")),
        "{events:?}"
    );
    op.stop().await;
    ns.cleanup().await;
}

/// The user's own pause is recorded, durable, before the schedule's replaces it: an operator
/// killed the instant its pause lands leaves the next one the user's pause to give back, not
/// the schedule's (which, taken for the user's, would keep the workload asleep for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_the_instant_its_pause_lands_the_operator_still_gives_the_user_s_own_back() {
    use futures::StreamExt;
    let (client, ns) = setup("keda-kill").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    scaled_web(&client, n, 2, 2, json!({PAUSED_REPLICAS: "1"})).await;
    deployment_at(&client, n, "web", 1).await;
    // A watch, started before the operator, sees the pause the moment it lands.
    let mut changes = kube::runtime::watcher(
        scaled_objects(&client, n),
        kube::runtime::watcher::Config::default().fields("metadata.name=web"),
    )
    .boxed();
    let kubeconfig = control_plane().kubeconfig.clone();
    let noon = ["--fake-now", "2026-05-01T12:00:00Z"];
    let op = OperatorProcess::start(&kubeconfig, n, &noon, "keda-kill-1.log");
    create_tdset(&client, n, &tdset("sched", over_web(13, 3, None))).await;
    let paused_now = tokio::time::timeout(GUARD, async {
        while let Some(event) = changes.next().await {
            if let Ok(kube::runtime::watcher::Event::Apply(o)) = event
                && o.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PAUSED_REPLICAS))
                    .map(String::as_str)
                    == Some("0")
            {
                return;
            }
        }
    })
    .await;
    op.sigkill();
    assert!(
        paused_now.is_ok(),
        "the operator never paused the ScaledObject"
    );
    let op = OperatorProcess::start(&kubeconfig, n, &noon, "keda-kill-2.log");
    deployment_at(&client, n, "web", 0).await;
    set_spec(&client, n, over_web(9, 3, None)).await;
    scaled_object_where(&client, n, "the user's own pause back", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("1") && annotation(o, PAUSED).is_none()
    })
    .await;
    deployment_at(&client, n, "web", 1).await;
    assert!(op.sigterm().success());
    ns.cleanup().await;
}

/// Deployment web labelled `env: dev`, at 2 under ScaledObject web (floor 2), once KEDA has
/// made its HPA.
async fn dev_web_under_keda(client: &Client, ns: &str) -> Api<Deployment> {
    scaled_web(client, ns, 2, 2, json!({})).await;
    keda_hpa(client, ns, "KEDA's HPA", |_| true).await;
    let deploys = Api::<Deployment>::namespaced(client.clone(), ns);
    let dev = Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}}));
    deploys
        .patch("web", &PatchParams::default(), &dev)
        .await
        .expect("labelling Deployment web");
    deploys
}

/// TDSet sched once its group has `targets` at the level (e.g. "2/2") and is not Degraded.
async fn group_at(client: &Client, ns: &str, targets: &str) -> TDSet {
    object_where(
        client,
        ns,
        "sched",
        &format!("{targets} at the level"),
        |t: &TDSet| {
            let group = t.status.as_ref().and_then(|s| s.group.as_ref());
            group.is_some_and(|g| g.targets == targets)
                && condition(t, "Degraded").is_some_and(|c| c.reason == "AsExpected")
        },
    )
    .await
}

/// A group over the Deployments labelled `env: dev`: `windows`, and 0 outside them.
fn over_dev(windows: Value) -> Value {
    json!({
        "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
        "schedulingConfig": windows, "defaultReplica": 0,
    })
}

/// A group over `env: dev` selects a Deployment KEDA scales. Put to 0 by the group, KEDA
/// would scale it back to its `minReplicaCount` and the two would take turns: the group
/// schedules it through its ScaledObject instead, as a `scaleTargetRef` TDSet does. The night
/// is KEDA's pause on the ScaledObject, recorded on it in the same guarded apply (held-by, the
/// own floor); KEDA takes the workload to 0 and deletes its HPA. The day takes the pause off
/// and sets the floor; KEDA's HPA comes back at it. Deleting the TDSet gives the own floor
/// back and leaves nothing of the operator's on the ScaledObject. The workload's count is
/// never changed by the operator (every count below is KEDA's doing); its annotations carry
/// the group's record of the night (what to wake it to should the ScaledObject go), written
/// before the pause.
#[tokio::test]
async fn a_group_sleeps_a_workload_keda_scales_through_its_scaled_object() {
    let (client, ns) = setup("keda-group").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    let deploys = dev_web_under_keda(&client, n).await;
    let _: Deployment = create_object(
        &client,
        n,
        crate::group::labelled(app_deployment("api", 1), "dev"),
    )
    .await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_dev(json!([])))).await;
    let night = scaled_object_where(&client, n, "paused by the group, and by KEDA", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("0")
            && annotation(o, PAUSED) == Some("true")
            && paused(o) == Some(true)
    })
    .await;
    assert_eq!(annotation(&night, "schedule.rs/held-by"), Some("sched"));
    assert_eq!(
        annotation(&night, "schedule.rs/own-min-replicas"),
        Some("2")
    );
    assert_eq!(
        spec_count(&night, "minReplicaCount"),
        Some(2),
        "the floor is left while paused"
    );
    deployment_at(&client, n, "web", 0).await;
    deployment_at(&client, n, "api", 0).await;
    keda_hpa_gone(&client, n).await;
    let web = deploys.get("web").await.unwrap();
    let record = |d: &Deployment, key: &str| {
        (d.metadata.annotations.as_ref())
            .and_then(|a| a.get(&format!("schedule.rs/{key}")))
            .cloned()
    };
    assert_eq!(
        (record(&web, "held-by"), record(&web, "own-replicas")),
        (Some("sched".into()), Some("2".into())),
        "the count before the night, on record"
    );
    // Both at the level, nothing held elsewhere, nothing Degraded. (Not waited for Settled:
    // a group is not woken by its workloads' status, and web's pods end at their own pace.)
    let t = group_at(&client, n, "2/2").await;
    let status = t.status.as_ref().and_then(|s| s.group.clone()).unwrap();
    assert_eq!(status.conflicting, 0, "{status:?}");
    // A Helm upgrade sets the count while paused (KEDA does not watch the workload): the group
    // reads the ScaledObject back and has KEDA put it right, as the form does.
    helm_sets_web_while_paused(&client, n, "sched").await;

    // The day: the pause off, the floor 3; KEDA's HPA back at it, the workload up.
    set_spec(
        &client,
        n,
        over_dev(json!([{"name": "office", "startTime": 9, "endTime": 17, "replica": 3}])),
    )
    .await;
    let day = scaled_object_where(&client, n, "unpaused with the day's floor", |o| {
        annotation(o, PAUSED_REPLICAS).is_none()
            && annotation(o, PAUSED).is_none()
            && paused(o) == Some(false)
            && spec_count(o, "minReplicaCount") == Some(3)
    })
    .await;
    assert_eq!(annotation(&day, "schedule.rs/own-min-replicas"), Some("2"));
    keda_hpa(&client, n, "KEDA's HPA back at the floor", |h| {
        h.spec.as_ref().and_then(|s| s.min_replicas) == Some(3)
    })
    .await;
    deployment_at(&client, n, "web", 3).await;
    deployment_at(&client, n, "api", 3).await;
    // Its record goes once KEDA runs it again (a reconcile after KEDA's scale-up).
    object_where(&client, n, "web", "no record by day", |d: &Deployment| {
        record(d, "held-by").is_none()
    })
    .await;

    // Let go: the own floor back, nothing of the operator's left on the ScaledObject.
    delete_tdset_and_wait(&client, n, "sched").await;
    let after = scaled_object_where(&client, n, "its own floor back", |o| {
        spec_count(o, "minReplicaCount") == Some(2)
    })
    .await;
    let ours: Vec<&String> = (after.pointer("/metadata/annotations"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|a| a.keys())
        .chain(
            (after.pointer("/metadata/labels"))
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|l| l.keys()),
        )
        .filter(|k| k.starts_with("schedule.rs/") || k.starts_with("autoscaling.keda.sh/"))
        .collect();
    assert!(ours.is_empty(), "{after:#}");
    keda_hpa(&client, n, "KEDA's HPA at the own floor", |h| {
        h.spec.as_ref().and_then(|s| s.min_replicas) == Some(2)
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// The ScaledObject a group put to sleep is deleted at night: KEDA leaves its workload at 0,
/// and nothing of KEDA's would take it off. The group holds it asleep from the record on the
/// workload, and wakes it in the morning to its count before the night.
#[tokio::test]
async fn a_scaled_object_deleted_while_a_group_holds_it_asleep_leaves_its_workload_to_the_group() {
    let (client, ns) = setup("keda-group-gone").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    let deploys = dev_web_under_keda(&client, n).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_dev(json!([])))).await;
    scaled_object_where(&client, n, "paused by the group, and by KEDA", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("0") && paused(o) == Some(true)
    })
    .await;
    deployment_at(&client, n, "web", 0).await;

    scaled_objects(&client, n)
        .delete("web", &Default::default())
        .await
        .expect("deleting the ScaledObject");
    eventually(GUARD, "the ScaledObject gone", || async {
        matches!(scaled_objects(&client, n).get_opt("web").await, Ok(None)).then_some(())
    })
    .await;
    // Still the night: held at 0 by the group itself, nothing Degraded.
    group_at(&client, n, "1/1").await;
    assert_eq!(replicas(&deploys.get("web").await.unwrap()), Some(0));

    set_spec(
        &client,
        n,
        over_dev(json!([{"name": "office", "startTime": 9, "endTime": 17, "replica": 3}])),
    )
    .await;
    deployment_at(&client, n, "web", 3).await;
    // Its own count is the one before the night: given back at the level `own`.
    let mut own = over_dev(json!([]));
    own["defaultReplica"] = Value::Null;
    set_spec(&client, n, own).await;
    deployment_at(&client, n, "web", 2).await;
    op.stop().await;
    ns.cleanup().await;
}

/// Nothing of the operator's on a workload: no annotation or label under `schedule.rs/`.
fn unmarked(d: &Deployment) -> bool {
    let keys = (d.metadata.annotations.iter().flat_map(|a| a.keys()))
        .chain(d.metadata.labels.iter().flat_map(|l| l.keys()));
    !keys.into_iter().any(|k| k.starts_with("schedule.rs/"))
}

/// Deployment web (2, `env: dev`) under ScaledObject web (floor 2) put to sleep by group
/// sched through KEDA's pause, KEDA's HPA gone.
async fn group_asleep_through_keda(client: &Client, n: &str) -> (KedaOperator, Operator) {
    let keda = KedaOperator::start(client, n).await;
    dev_web_under_keda(client, n).await;
    let op = Operator::start(client, n, noon(), None, "test");
    create_tdset(client, n, &tdset("sched", over_dev(json!([])))).await;
    scaled_object_where(client, n, "paused by the group, and by KEDA", |o| {
        annotation(o, PAUSED_REPLICAS) == Some("0") && paused(o) == Some(true)
    })
    .await;
    deployment_at(client, n, "web", 0).await;
    keda_hpa_gone(client, n).await;
    (keda, op)
}

/// A group deleted at night gives its ScaledObject's pause back, and goes only once KEDA runs
/// the workload again: the workload's record of the night (what wakes it should KEDA not) is
/// taken off then, not left behind on a workload at 0 (keda#6982: a ScaledObject KEDA leaves
/// paused with no pause on it, and nobody left to see it).
#[tokio::test]
async fn a_group_deleted_at_night_goes_once_keda_runs_its_workload_again() {
    let (client, ns) = setup("keda-group-delete").await;
    let n = &ns.name;
    let (_keda, op) = group_asleep_through_keda(&client, n).await;

    delete_tdset_and_wait(&client, n, "sched").await;
    // Already so when the TDSet is gone: read once, not waited for.
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(
        replicas(&web),
        Some(2),
        "KEDA ran it again before the TDSet went"
    );
    assert!(unmarked(&web), "no record left behind: {:?}", web.metadata);
    let so = serde_json::to_value(scaled_objects(&client, n).get("web").await.unwrap()).unwrap();
    assert_eq!(paused(&so), Some(false), "{so:#}");
    // KEDA's doing, not the operator's: its record given back with no Warning that it was woken
    // directly (that Warning is sent before the release it belongs to).
    wait_for_event(&client, n, "sched", |(_, reason, note)| {
        reason == "Released" && note.contains("Deployment web")
    })
    .await;
    let events = events_for(&client, n, "sched").await;
    assert!(
        !events
            .iter()
            .any(|(_, reason, _)| reason == "KedaNotResumed"),
        "{events:?}"
    );
    op.stop().await;
    ns.cleanup().await;
}

/// The same with KEDA's operator down: the pause is given back, the TDSet kept while KEDA is
/// waited for (bounded), then the operator gives the workload its own count itself, says so in
/// a Warning, and the TDSet goes.
#[tokio::test]
async fn a_group_deleted_at_night_while_keda_is_down_wakes_its_workload_itself_then_goes() {
    let (client, ns) = setup("keda-group-down").await;
    let n = &ns.name;
    let (keda, op) = group_asleep_through_keda(&client, n).await;
    drop(keda);

    let tdsets = deleted_while_keda_is_down(&client, n, "the pause given back", |o| {
        annotation(o, PAUSED_REPLICAS).is_none() && annotation(o, PAUSED).is_none()
    })
    .await;
    // KEDA is given 60 s from then: 20 s on, still waited for.
    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
    assert!(
        tdsets.get_opt("sched").await.unwrap().is_some(),
        "still kept"
    );
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(replicas(&web), Some(0), "still asleep");
    // KEDA is waited for twice its grace (60 s) before the operator wakes the workload itself.
    eventually(GUARD * 2, "TDSet sched gone, KEDA waited for", || async {
        matches!(tdsets.get_opt("sched").await, Ok(None)).then_some(())
    })
    .await;
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(
        replicas(&web),
        Some(2),
        "woken to its own count before the TDSet went"
    );
    assert!(unmarked(&web), "no record left behind: {:?}", web.metadata);
    wait_for_event(&client, n, "sched", |(_, reason, note)| {
        reason == "KedaNotResumed" && note.contains("Deployment web (2 replicas)")
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// (In this suite, which waits for KEDA's build: it needs KEDA's CRDs.) An HPA that a KEDA
/// ScaledObject owns: KEDA sets its `minReplicas` from the ScaledObject
/// and would revert the schedule's floor at once, again and again. The TDSet refuses it with
/// a reason of its own and a Warning naming the ScaledObject, and never writes the HPA.
#[tokio::test]
async fn an_hpa_a_keda_scaled_object_owns_is_refused_and_never_written() {
    let (client, ns) = setup("wl-hpa-keda").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("web", 2)).await;
    let owner = scaled_object(&client, n, "web", "web").await;
    let mut made = hpa("keda-hpa-web", "web", 2, 10);
    made["metadata"]["ownerReferences"] = json!([owner]);
    let _: HorizontalPodAutoscaler = create_object(&client, n, made).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &crate::workloads::floor_of("keda-hpa-web", 1)).await;

    let message = degraded_for(&client, n, "sched", "ManagedByKeda").await;
    assert!(message.contains("ScaledObject web"), "{message}");
    wait_for_event(&client, n, "sched", |(ty, r, m)| {
        ty == "Warning" && r == "ManagedByKeda" && m.contains("ScaledObject web")
    })
    .await;
    // Deleted, it lets go of nothing it never held: neither the HPA nor its workload was
    // ever written by the operator.
    delete_tdset_and_wait(&client, n, "sched").await;
    let h: HorizontalPodAutoscaler = Api::namespaced(client.clone(), n)
        .get("keda-hpa-web")
        .await
        .unwrap();
    assert_eq!(h.spec.as_ref().and_then(|s| s.min_replicas), Some(2));
    let d: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    for managed in [&h.metadata.managed_fields, &d.metadata.managed_fields] {
        let managers: Vec<String> = (managed.iter().flatten())
            .filter_map(|m| m.manager.clone())
            .collect();
        assert!(
            !managers.contains(&"tdset-operator".to_string()),
            "{managers:?}"
        );
    }
    op.stop().await;
    ns.cleanup().await;
}

/// By day KEDA scales the workload through its HPA. Deleted while KEDA's operator is down,
/// nothing scales the workload, though KEDA's status still says it runs: the TDSet says so
/// (`KedaHpaMissing`, naming the HPA) once it has been missing for the grace, and the
/// condition clears when KEDA runs again and makes its HPA.
#[tokio::test]
async fn keda_s_hpa_missing_by_day_is_said_until_keda_makes_it_again() {
    let (client, ns) = setup("keda-hpa").await;
    let n = &ns.name;
    let keda = KedaOperator::start(&client, n).await;
    scaled_web(&client, n, 2, 2, json!({})).await;
    keda_hpa(&client, n, "KEDA's HPA", |_| true).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_web(9, 3, None))).await;
    keda_hpa(&client, n, "the schedule's floor on KEDA's HPA", |h| {
        h.spec.as_ref().and_then(|s| s.min_replicas) == Some(3)
    })
    .await;
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let degraded =
        |t: &TDSet| condition(t, "Degraded").map(|c| (c.status.clone(), c.reason.clone()));
    let awake = "awake with KEDA's HPA: not Degraded";
    eventually(GUARD, awake, || async {
        let t = tdsets.get("sched").await.ok()?;
        (degraded(&t)?.0 == "False").then_some(())
    })
    .await;

    drop(keda);
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), n)
        .delete("keda-hpa-web", &Default::default())
        .await
        .expect("deleting KEDA's HPA");
    // Read every 15 s, said after 30 s missing.
    let message = eventually(
        std::time::Duration::from_secs(180),
        "KedaHpaMissing",
        || async {
            let t = tdsets.get("sched").await.ok()?;
            let c = condition(&t, "Degraded")?;
            (c.status == "True" && c.reason == "KedaHpaMissing").then(|| c.message.clone())
        },
    )
    .await;
    assert!(message.contains("keda-hpa-web"), "{message}");

    let _keda = KedaOperator::start(&client, n).await;
    keda_hpa(&client, n, "KEDA's HPA made again", |_| true).await;
    eventually(
        std::time::Duration::from_secs(180),
        "no longer Degraded",
        || async {
            let t = tdsets.get("sched").await.ok()?;
            (degraded(&t)?.0 == "False").then_some(())
        },
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// Argo CD's self-heal setting `maxReplicaCount` back (a manifest that carries it) while the
/// schedule's ceiling is in force: the ceiling, contested apart from the floor, is held back
/// after a few reverts and the TDSet names the Application with the rule for that field alone;
/// the floor is not held back for it.
#[tokio::test]
async fn argo_cd_setting_the_ceiling_back_is_named_for_the_ceiling_alone() {
    let (client, ns) = setup("keda-argo").await;
    let n = &ns.name;
    let _keda = KedaOperator::start(&client, n).await;
    let tracking = format!("shop:keda.sh/ScaledObject:{n}/web");
    scaled_web(
        &client,
        n,
        2,
        2,
        json!({"argocd.argoproj.io/tracking-id": tracking}),
    )
    .await;
    keda_hpa(&client, n, "KEDA's HPA", |_| true).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(&client, n, &tdset("sched", over_web(9, 3, Some(50)))).await;
    scaled_object_where(&client, n, "the schedule's floor and ceiling", |o| {
        spec_count(o, "minReplicaCount") == Some(3) && spec_count(o, "maxReplicaCount") == Some(50)
    })
    .await;

    // Argo CD's drift correction: the manifest's maxReplicaCount 10, applied whenever it is not.
    let api = scaled_objects(&client, n);
    let argo = tokio::spawn(async move {
        let body = json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                          "metadata": {"name": "web"}, "spec": {"maxReplicaCount": 10}});
        let params = PatchParams::apply("argocd-controller").force();
        loop {
            if let Ok(o) = api.get("web").await
                && o.data.pointer("/spec/maxReplicaCount") != Some(&json!(10))
            {
                let _ = api.patch("web", &params, &Patch::Apply(&body)).await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    });
    // The ScaledObject is read every 15 s (KEDA's objects are not watched): a few reverts take
    // about a minute.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let message = eventually(GUARD * 3, "Degraded: GitOpsConflict", || async {
        let t = tdsets.get("sched").await.ok()?;
        let c = condition(&t, "Degraded")?;
        (c.status == "True" && c.reason == "GitOpsConflict").then(|| c.message.clone())
    })
    .await;
    for part in [
        "Argo CD (Application shop)",
        "spec.maxReplicaCount of ScaledObject web",
        "managedFieldsManagers: [tdset-operator]",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert!(!message.contains("minReplicaCount"), "{message}");
    argo.abort();
    let so = serde_json::to_value(scaled_objects(&client, n).get("web").await.unwrap()).unwrap();
    assert_eq!(
        spec_count(&so, "minReplicaCount"),
        Some(3),
        "the floor stays"
    );
    op.stop().await;
    ns.cleanup().await;
}
