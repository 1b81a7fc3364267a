//! Safe under abuse and failure, on the real API server (kube-controller-manager runs the
//! Deployment and HPA controllers): one writer per workload, originals that are durable
//! before the change that needs them, retargets and form switches that let go cleanly, and
//! nothing left asleep by accident. The operator runs in-process with an injected clock.

use std::time::Duration;

use crate::support::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

/// Noon on a Friday, inside 09:00-17:00.
pub(crate) fn noon() -> SystemClock {
    SystemClock::starting_at(utc("2026-05-01T12:00:00Z"))
}

/// `replicas` from 09:00 to 17:00 UTC (so at noon), `default` otherwise, for `source`.
pub(crate) fn at_noon(source: Value, replicas: i32, default: i32) -> Value {
    let mut spec = json!({
        "schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": replicas}],
        "defaultReplica": default,
        "intervalMint": 60
    });
    for (k, v) in source.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

pub(crate) fn deployment_ref(name: &str) -> Value {
    json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}})
}

fn hpa_ref(name: &str) -> Value {
    json!({"scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": name}})
}

/// A TDSet that runs its own Deployment: `replicas` at noon, 1 otherwise.
fn runs_nginx(replicas: i32) -> Value {
    at_noon(
        json!({"container": {"image": "nginx:1.27", "port": 8080}}),
        replicas,
        1,
    )
}

/// Someone's Deployment "web" at 1, the operator, and TDSet `name` that scales it to 4 at
/// noon; returns once it is at 4.
async fn web_at_4_held_by(client: &Client, ns: &str, name: &str) -> Operator {
    let _: Deployment = create_object(client, ns, app_deployment("web", 1)).await;
    let op = Operator::start(client, ns, noon(), None, "test");
    create_tdset(
        client,
        ns,
        &tdset(name, at_noon(deployment_ref("web"), 4, 1)),
    )
    .await;
    deployment_at(client, ns, "web", 4).await;
    op
}

fn deployments(client: &Client, ns: &str) -> Api<Deployment> {
    Api::namespaced(client.clone(), ns)
}

fn tdsets(client: &Client, ns: &str) -> Api<TDSet> {
    Api::namespaced(client.clone(), ns)
}

async fn delete_tdset(client: &Client, ns: &str, name: &str) {
    tdsets(client, ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting the TDSet");
}

/// How many times the Deployment's spec changed (its generation) over `window`: the writes
/// that reached it, whoever made them.
async fn spec_changes_over(client: &Client, ns: &str, name: &str, window: Duration) -> i64 {
    let generation = |d: Deployment| d.metadata.generation.unwrap_or(0);
    let before = generation(deployments(client, ns).get(name).await.unwrap());
    tokio::time::sleep(window).await;
    generation(deployments(client, ns).get(name).await.unwrap()) - before
}

#[tokio::test]
async fn the_original_count_is_in_the_api_before_the_first_scale() {
    let (client, ns) = setup("hard-order").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 3)).await;
    // Both watches start before the TDSet exists: every revision of either is seen. etcd
    // revisions are one sequence for all objects, so they order the two writes.
    let first_revision =
        |stream: std::pin::Pin<Box<dyn futures::Stream<Item = (u64, bool)> + Send>>| {
            tokio::spawn(async move {
                let mut stream = stream;
                while let Some((rv, hit)) = stream.next().await {
                    if hit {
                        return rv;
                    }
                }
                u64::MAX
            })
        };
    let rv = |m: &kube::api::ObjectMeta| {
        m.resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let original_recorded = first_revision(Box::pin(
        watcher(tdsets(&client, &ns.name), watcher::Config::default())
            .applied_objects()
            .filter_map(|t| async move { t.ok() })
            .map(move |t: TDSet| {
                let recorded = t
                    .status
                    .as_ref()
                    .and_then(|s| s.target.as_ref())
                    .and_then(|t| t.original_replicas)
                    == Some(3);
                (rv(&t.metadata), recorded)
            }),
    ));
    let scaled = first_revision(Box::pin(
        watcher(deployments(&client, &ns.name), watcher::Config::default())
            .applied_objects()
            .filter_map(|d| async move { d.ok() })
            .map(move |d: Deployment| (rv(&d.metadata), replicas(&d) != Some(3))),
    ));
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let mut spec = at_noon(deployment_ref("web"), 5, 1);
    spec["onDelete"] = json!("Restore");
    create_tdset(&client, &ns.name, &tdset("sched", spec)).await;
    deployment_at(&client, &ns.name, "web", 5).await;
    let (recorded_at, scaled_at) = (
        tokio::time::timeout(GUARD, original_recorded)
            .await
            .unwrap()
            .unwrap(),
        tokio::time::timeout(GUARD, scaled).await.unwrap().unwrap(),
    );
    assert!(
        recorded_at < scaled_at,
        "the original (3) was recorded at revision {recorded_at}, after the Deployment was scaled at {scaled_at}"
    );
    delete_tdset(&client, &ns.name, "sched").await;
    deployment_at(&client, &ns.name, "web", 3).await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn two_tdsets_on_one_deployment_the_older_holds_it_and_hands_it_over_when_it_goes() {
    let (client, ns) = setup("hard-two").await;
    let op = web_at_4_held_by(&client, &ns.name, "older").await;
    // creationTimestamp has whole seconds: the younger is younger by at least one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(
        &client,
        &ns.name,
        &tdset("younger", at_noon(deployment_ref("web"), 2, 2)),
    )
    .await;
    let message = degraded_for(&client, &ns.name, "younger", "ConflictingTDSet").await;
    assert!(
        message.contains("older") && message.contains("Deployment web"),
        "{message}"
    );
    wait_for_event(&client, &ns.name, "younger", |(ty, r, _)| {
        ty == "Warning" && r == "ConflictingTDSet"
    })
    .await;
    // Not "missing": the Deployment is there, held by the other TDSet.
    let t = tdset_with_reason(
        &client,
        &ns.name,
        "younger",
        "Available",
        "TargetHeldElsewhere",
    )
    .await;
    let available = condition(&t, "Available").unwrap();
    assert!(available.message.contains("older"), "{available:?}");
    // No flip-flop: over 30 s the Deployment's spec is not written at all.
    let changes = spec_changes_over(&client, &ns.name, "web", Duration::from_secs(30)).await;
    assert_eq!(
        changes, 0,
        "the Deployment was written {changes} times while both TDSets exist"
    );
    assert_eq!(
        replicas(&deployments(&client, &ns.name).get("web").await.unwrap()),
        Some(4)
    );
    // The holder goes: the younger takes the Deployment over at once.
    delete_tdset(&client, &ns.name, "older").await;
    deployment_at(&client, &ns.name, "web", 2).await;
    tdset_with_reason(&client, &ns.name, "younger", "Degraded", "AsExpected").await;
    op.stop().await;
    ns.cleanup().await;
}

/// A target two TDSets name that is not there is missing for both: the younger one does not
/// say another TDSet holds it. Once it appears, the older holds it and the younger says so.
#[tokio::test]
async fn a_missing_target_two_tdsets_name_is_missing_for_both() {
    let (client, ns) = setup("hard-two-missing").await;
    let n = &ns.name;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(
        &client,
        n,
        &tdset("older", at_noon(deployment_ref("web"), 4, 1)),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(
        &client,
        n,
        &tdset("younger", at_noon(deployment_ref("web"), 2, 2)),
    )
    .await;
    for name in ["older", "younger"] {
        let t = tdset_with_reason(&client, n, name, "Available", "TargetMissing").await;
        let available = condition(&t, "Available").unwrap();
        assert!(available.message.contains("web"), "{name}: {available:?}");
    }
    let _: Deployment = create_object(&client, n, app_deployment("web", 1)).await;
    deployment_at(&client, n, "web", 4).await;
    tdset_with_reason(&client, n, "younger", "Available", "TargetHeldElsewhere").await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_younger_claim_takes_a_retargeted_workload_over_only_once_it_has_its_own_count_back() {
    let (client, ns) = setup("hard-handover").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("other", 1)).await;
    let _: Deployment = create_object(&client, n, app_deployment("web", 1)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    let restoring = |replicas, default| {
        let mut spec = at_noon(deployment_ref("web"), replicas, default);
        spec["onDelete"] = json!("Restore");
        spec
    };
    create_tdset(&client, n, &tdset("older", restoring(4, 1))).await;
    deployment_at(&client, n, "web", 4).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &tdset("younger", restoring(2, 2))).await;
    degraded_for(&client, n, "younger", "ConflictingTDSet").await;
    // The older one is pointed elsewhere, and cannot give web its 1 back for now.
    let refuse = RefuseScale::new(&client, n, 1).await;
    let errors = || op.counter("tdset_reconcile_errors_total");
    let before = errors();
    tdsets(&client, n)
        .patch(
            "older",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "other"}}})),
        )
        .await
        .unwrap();
    eventually(GUARD, "the older one's restore refused", || async {
        (errors() > before).then_some(())
    })
    .await;
    // Until it is given back, web is still the older one's: the younger records nothing of
    // it (it would take the 4 the older one set for web's own count) and writes nothing.
    let changes = spec_changes_over(&client, n, "web", Duration::from_secs(5)).await;
    assert_eq!(
        changes, 0,
        "web was written while its holder had not let go"
    );
    let younger = tdsets(&client, n).get("younger").await.unwrap();
    let recorded = younger.status.and_then(|s| s.target);
    assert!(
        recorded
            .as_ref()
            .is_none_or(|t| t.original_replicas.is_none()),
        "the younger recorded {recorded:?} before web had its count back"
    );
    refuse.lift().await;
    deployment_at(&client, n, "other", 4).await;
    deployment_at(&client, n, "web", 2).await;
    // web's own count, 1, is what the younger gives back.
    delete_tdset(&client, n, "younger").await;
    tdset_gone(&client, n, "younger").await;
    deployment_at(&client, n, "web", 1).await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tdset_retargeted_onto_a_held_workload_lets_its_old_one_go_for_good() {
    let (client, ns) = setup("hard-letgo").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("other", 1)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(
        &client,
        n,
        &tdset("first", at_noon(deployment_ref("other"), 3, 1)),
    )
    .await;
    deployment_at(&client, n, "other", 3).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let _: Deployment = create_object(&client, n, app_deployment("web", 1)).await;
    let mut second = at_noon(deployment_ref("web"), 4, 1);
    second["onDelete"] = json!("Restore");
    create_tdset(&client, n, &tdset("second", second)).await;
    deployment_at(&client, n, "web", 4).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(
        &client,
        n,
        &tdset("third", at_noon(deployment_ref("web"), 2, 2)),
    )
    .await;
    degraded_for(&client, n, "third", "ConflictingTDSet").await;
    // "second" moves onto what "first" holds: it gives web its 1 back, and "third" takes web
    // over.
    tdsets(&client, n)
        .patch(
            "second",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "other"}}})),
        )
        .await
        .unwrap();
    degraded_for(&client, n, "second", "ConflictingTDSet").await;
    deployment_at(&client, n, "web", 2).await;
    let third = tdsets(&client, n).get("third").await.unwrap();
    let original = third.status.and_then(|s| s.target?.original_replicas);
    assert_eq!(original, Some(1), "third recorded web's own count");
    // Whatever wakes "second" now (a change of the workload it names), web is not its any more:
    // it is never given back again over its new holder.
    deployments(&client, n)
        .patch(
            "other",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    let changes = spec_changes_over(&client, n, "web", Duration::from_secs(10)).await;
    assert_eq!(
        changes, 0,
        "web was written {changes} times after the hand-over"
    );
    assert_eq!(
        replicas(&deployments(&client, n).get("web").await.unwrap()),
        Some(2)
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn an_older_claim_taking_a_target_over_keeps_its_own_count_and_the_younger_never_restores_it()
{
    let (client, ns) = setup("hard-takeover").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("other", 1)).await;
    let _: Deployment = create_object(&client, n, app_deployment("web", 1)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    let restoring = |target: &str, replicas| {
        let mut spec = at_noon(deployment_ref(target), replicas, replicas);
        spec["onDelete"] = json!("Restore");
        spec
    };
    // The older claim points elsewhere; the younger holds web at 2.
    create_tdset(&client, n, &tdset("older", restoring("other", 3))).await;
    deployment_at(&client, n, "other", 3).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &tdset("younger", restoring("web", 2))).await;
    deployment_at(&client, n, "web", 2).await;
    // The older one is pointed at web: it takes it over, and what it records as web's own is
    // the 1 the younger recorded, not the 2 the younger set.
    tdsets(&client, n)
        .patch(
            "older",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "web"}}})),
        )
        .await
        .unwrap();
    deployment_at(&client, n, "web", 3).await;
    let older = tdsets(&client, n).get("older").await.unwrap();
    let original = older.status.and_then(|s| s.target?.original_replicas);
    assert_eq!(original, Some(1), "the older one recorded web's own count");
    degraded_for(&client, n, "younger", "ConflictingTDSet").await;
    // The younger goes: web is the older one's, so it is not restored under it.
    let generation = |d: Deployment| d.metadata.generation.unwrap_or(0);
    let before = generation(deployments(&client, n).get("web").await.unwrap());
    delete_tdset(&client, n, "younger").await;
    tdset_gone(&client, n, "younger").await;
    let changes = spec_changes_over(&client, n, "web", Duration::from_secs(5)).await;
    let after = generation(deployments(&client, n).get("web").await.unwrap());
    assert_eq!(
        (after - before, changes),
        (0, 0),
        "web was written after the younger went"
    );
    // The holder goes: web gets its own 1 back.
    delete_tdset(&client, n, "older").await;
    deployment_at(&client, n, "web", 1).await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_target_another_tdset_runs_is_left_to_it() {
    let (client, ns) = setup("hard-owned").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(&client, &ns.name, &tdset("runs-web", runs_nginx(3))).await;
    deployment_at(&client, &ns.name, "runs-web", 3).await;
    create_tdset(
        &client,
        &ns.name,
        &tdset("grabs-web", at_noon(deployment_ref("runs-web"), 6, 6)),
    )
    .await;
    let message = degraded_for(&client, &ns.name, "grabs-web", "ConflictingTDSet").await;
    assert!(message.contains("runs-web"), "{message}");
    let changes = spec_changes_over(&client, &ns.name, "runs-web", Duration::from_secs(20)).await;
    assert_eq!(
        changes, 0,
        "the owned Deployment was written {changes} times"
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn an_hpa_on_an_owned_deployment_is_reported_and_not_fought() {
    let (client, ns) = setup("hard-ownhpa").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(&client, &ns.name, &tdset("web", runs_nginx(5))).await;
    deployment_at(&client, &ns.name, "web", 5).await;
    // The HPA's maximum is below the schedule: it scales the Deployment down to 3 at every
    // sync (no metrics needed for that), which an operator that fights would revert.
    let _: HorizontalPodAutoscaler =
        create_object(&client, &ns.name, hpa("web", "web", 1, 3)).await;
    let message = degraded_for(&client, &ns.name, "web", "ConflictingAutoscaler").await;
    assert!(message.contains("HorizontalPodAutoscaler web"), "{message}");
    deployment_at(&client, &ns.name, "web", 3).await;
    let changes = spec_changes_over(&client, &ns.name, "web", Duration::from_secs(35)).await;
    assert_eq!(
        changes, 0,
        "the Deployment was written {changes} times: the HPA was fought"
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn retargeting_gives_the_old_target_back_and_deletion_restores_only_the_new_one() {
    let (client, ns) = setup("hard-retarget").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("a", 3)).await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("b", 2)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let mut spec = at_noon(deployment_ref("a"), 5, 1);
    spec["onDelete"] = json!("Restore");
    create_tdset(&client, &ns.name, &tdset("sched", spec)).await;
    deployment_at(&client, &ns.name, "a", 5).await;
    tdsets(&client, &ns.name)
        .patch(
            "sched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "b"}}})),
        )
        .await
        .unwrap();
    // The old target gets its own count back, the new one the schedule's.
    deployment_at(&client, &ns.name, "a", 3).await;
    deployment_at(&client, &ns.name, "b", 5).await;
    object_where(
        &client,
        &ns.name,
        "sched",
        "b's original recorded",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.target.as_ref())
                .is_some_and(|t| t.name == "b" && t.original_replicas == Some(2))
        },
    )
    .await;
    // Someone changes a meanwhile: the TDSet no longer holds it and never writes it again.
    deployments(&client, &ns.name)
        .patch_scale(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}})),
        )
        .await
        .unwrap();
    delete_tdset(&client, &ns.name, "sched").await;
    deployment_at(&client, &ns.name, "b", 2).await;
    tdset_gone(&client, &ns.name, "sched").await;
    assert_eq!(
        replicas(&deployments(&client, &ns.name).get("a").await.unwrap()),
        Some(7)
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn deleting_before_the_retarget_is_seen_restores_the_recorded_target_only() {
    let (client, ns) = setup("hard-race").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("a", 3)).await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("b", 2)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let mut spec = at_noon(deployment_ref("a"), 5, 1);
    spec["onDelete"] = json!("Restore");
    create_tdset(&client, &ns.name, &tdset("sched", spec)).await;
    deployment_at(&client, &ns.name, "a", 5).await;
    op.kill();
    // Retarget and delete while no operator runs: the next one sees only the deletion.
    tdsets(&client, &ns.name)
        .patch(
            "sched",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "b"}}})),
        )
        .await
        .unwrap();
    delete_tdset(&client, &ns.name, "sched").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    tdset_gone(&client, &ns.name, "sched").await;
    deployment_at(&client, &ns.name, "a", 3).await;
    assert_eq!(
        replicas(&deployments(&client, &ns.name).get("b").await.unwrap()),
        Some(2),
        "a's original was put onto b"
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn switching_from_a_template_to_a_target_deletes_what_the_tdset_ran() {
    let (client, ns) = setup("hard-switch").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("other", 2)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "web",
            at_noon(
                json!({"container": {"image": "nginx:1.27", "port": 8080}, "service": {"port": 80}}),
                3,
                1,
            ),
        ),
    )
    .await;
    deployment_at(&client, &ns.name, "web", 3).await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    eventually(GUARD, "the owned Service", || async {
        services.get_opt("web").await.ok().flatten()
    })
    .await;
    tdsets(&client, &ns.name)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"container": null, "service": null,
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"}}})),
        )
        .await
        .unwrap();
    deployment_at(&client, &ns.name, "other", 3).await;
    eventually(
        GUARD,
        "the owned Deployment and Service deleted",
        || async {
            let d = deployments(&client, &ns.name).get_opt("web").await.ok()?;
            let s = services.get_opt("web").await.ok()?;
            (d.is_none_or(|d| d.metadata.deletion_timestamp.is_some()) && s.is_none()).then_some(())
        },
    )
    .await;
    wait_for_event(&client, &ns.name, "web", |(_, r, _)| r == "OwnedDeleted").await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn an_hpa_target_put_to_sleep_is_woken_when_the_tdset_lets_go() {
    let (client, ns) = setup("hard-wake").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 2)).await;
    let _: HorizontalPodAutoscaler =
        create_object(&client, &ns.name, hpa("web", "web", 2, 10)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    // 0 at noon: the HPA cannot hold 0, so its target is put to sleep through /scale.
    create_tdset(
        &client,
        &ns.name,
        &tdset("sleepy", at_noon(hpa_ref("web"), 0, 2)),
    )
    .await;
    deployment_at(&client, &ns.name, "web", 0).await;
    object_where(&client, &ns.name, "sleepy", "the finalizer", |t: &TDSet| {
        !t.finalizers().is_empty()
    })
    .await;
    // Deleted with the default onDelete (Keep): the target wakes to the HPA's floor.
    delete_tdset(&client, &ns.name, "sleepy").await;
    tdset_gone(&client, &ns.name, "sleepy").await;
    deployment_at(&client, &ns.name, "web", 2).await;

    // An HPA whose target cannot be read: status says so, never "Settled".
    let _: HorizontalPodAutoscaler =
        create_object(&client, &ns.name, hpa("lost", "no-such-deployment", 1, 10)).await;
    create_tdset(
        &client,
        &ns.name,
        &tdset("blind", at_noon(hpa_ref("lost"), 0, 2)),
    )
    .await;
    let t = tdset_with_reason(&client, &ns.name, "blind", "Degraded", "TargetNotFound").await;
    let progressing = condition(&t, "Progressing").unwrap();
    assert_ne!(progressing.reason, "Settled", "{progressing:?}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_writer_that_keeps_resetting_the_count_is_reported_and_not_followed_at_watch_speed() {
    let (client, ns) = setup("hard-gitops").await;
    let op = web_at_4_held_by(&client, &ns.name, "sched").await;
    let scale_writes = || op.counter("tdset_api_writes_total{resource=\"deployments/scale\"");
    let before = scale_writes();
    // A script that puts its own count back twice a second, for 30 s (a GitOps tool is named
    // with its fix: tests/it/gitops.rs).
    let api = deployments(&client, &ns.name);
    let gitops = PatchParams {
        field_manager: Some("deploy-script".into()),
        ..PatchParams::default()
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut resets = 0;
    while tokio::time::Instant::now() < until {
        if replicas(&api.get("web").await.unwrap()) != Some(1) {
            api.patch(
                "web",
                &gitops,
                &Patch::Merge(json!({"spec": {"replicas": 1}})),
            )
            .await
            .unwrap();
            resets += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let reverts = scale_writes() - before;
    eprintln!("{resets} resets by the other writer, {reverts} reverts by the operator in 30 s");
    assert!(
        resets >= 4,
        "the other writer never had to reset ({resets})"
    );
    assert!(
        reverts <= 5.0,
        "{reverts} reverts in 30 s: the operator followed the other writer at watch speed"
    );
    let message = degraded_for(&client, &ns.name, "sched", "ConflictingWriter").await;
    assert!(message.contains("deploy-script"), "{message}");
    wait_for_event(&client, &ns.name, "sched", |(ty, r, note)| {
        ty == "Warning" && r == "ConflictingWriter" && note.contains("deploy-script")
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}
