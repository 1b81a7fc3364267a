//! The group form meeting other holders: one holder per workload, whichever TDSet or group
//! holds it first; yielding, taking over and handing over, with each own count kept.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tdset_operator::api::TDSet;

use crate::group::*;

#[tokio::test]
async fn overlapping_groups_have_one_holder_and_deleting_it_hands_the_workload_over() {
    let (client, ns) = setup("group-overlap").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    let mut older = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    older["overrides"][0]["replica"] = json!(0);
    create_tdset(&client, n, &tdset("a-older", older)).await;
    // Created a second later, so its claim is younger whatever the names.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut younger = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    younger["overrides"][0]["replica"] = json!(1);
    create_tdset(&client, n, &tdset("b-younger", younger)).await;
    let op = Operator::start(&client, n, clock(), None, "test");

    let api = deployment_at(&client, n, "api", 0).await;
    assert_eq!(annotations(&api), record("a-older", 3, 0));
    let b = tdset_with_reason(&client, n, "b-younger", "Degraded", "ConflictingTDSet").await;
    let message = &condition(&b, "Degraded").unwrap().message;
    assert!(
        message.contains("api") && message.contains("a-older"),
        "{message}"
    );
    assert_eq!(
        b.status
            .as_ref()
            .unwrap()
            .group
            .as_ref()
            .unwrap()
            .conflicting,
        1
    );

    // The holder goes: the other takes the workload over, keeping its true own count.
    Api::<TDSet>::namespaced(client.clone(), n)
        .delete("a-older", &DeleteParams::default())
        .await
        .expect("deleting the holder");
    let api = object_where(
        &client,
        n,
        "api",
        "api held by b-younger at 1",
        |d: &Deployment| replicas(d) == Some(1) && annotations(d) == record("b-younger", 3, 1),
    )
    .await;
    assert_eq!(replicas(&api), Some(1));
    delete_tdset_and_wait(&client, n, "b-younger").await;
    deployment_at(&client, n, "api", 3).await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_scale_target_ref_yields_to_an_older_group_and_takes_over_when_it_goes() {
    let (client, ns) = setup("group-ref").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    create_deployment_group(&client, n, "group", 2, 3600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
        "schedulingConfig": [], "defaultReplica": 2, "intervalMint": 60
    });
    create_tdset(&client, n, &tdset("single", single)).await;
    let op = Operator::start(&client, n, clock(), None, "test");

    deployment_at(&client, n, "api", 0).await;
    let t = tdset_with_reason(&client, n, "single", "Degraded", "ConflictingTDSet").await;
    let message = &condition(&t, "Degraded").unwrap().message;
    assert!(message.contains("group"), "{message}");
    // Held by the group all along: never written by the other.
    assert_eq!(
        annotations(&deployment_at(&client, n, "api", 0).await),
        record("group", 3, 0)
    );

    delete_tdset_and_wait(&client, n, "group").await;
    let api = deployment_at(&client, n, "api", 2).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

/// api (own 3) asleep in a group, then taken over by an older `scaleTargetRef` TDSet
/// "single" (at `level`) that pointed elsewhere until now; returns once "single" recorded
/// api's own count and the group yields.
async fn older_ref_takes_a_sleeping_workload(client: &Client, n: &str, level: i32) -> Operator {
    let _: Deployment = create_object(client, n, labelled(app_deployment("api", 3), "dev")).await;
    let _: Deployment = create_object(client, n, app_deployment("other", 1)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
        "schedulingConfig": [], "defaultReplica": level, "intervalMint": 60, "onDelete": "Restore"
    });
    // The older claim, pointing elsewhere at first.
    create_tdset(client, n, &tdset("single", single)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    create_deployment_group(client, n, "group", 2, 3600).await;
    let op = Operator::start(client, n, clock(), None, "test");
    let api = deployment_at(client, n, "api", 0).await;
    assert_eq!(annotations(&api), record("group", 3, 0));

    // The older TDSet now points at the sleeping workload: it holds it, and what it will give
    // back is the workload's own 3, not the 0 the group put it to sleep at.
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "single",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "api"}}})),
        )
        .await
        .expect("pointing the older TDSet at the sleeping workload");
    deployment_at(client, n, "api", level).await;
    assert_eq!(original_recorded(client, n, "single", "api").await, 3);
    tdset_with_reason(client, n, "group", "Degraded", "ConflictingTDSet").await;
    op
}

#[tokio::test]
async fn an_older_scale_target_ref_taking_a_sleeping_workload_over_records_its_own_count() {
    let (client, ns) = setup("group-takeover").await;
    let n = &ns.name;
    let op = older_ref_takes_a_sleeping_workload(&client, n, 2).await;
    // Both go, the group first: the workload ends at its own count, not asleep.
    for name in ["group", "single"] {
        delete_tdset_and_wait(&client, n, name).await;
    }
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_group_letting_go_of_a_workload_another_tdset_holds_only_takes_its_record_off() {
    let (client, ns) = setup("group-handed").await;
    let n = &ns.name;
    // The older claim sleeps api too (0).
    let op = older_ref_takes_a_sleeping_workload(&client, n, 0).await;
    // The group goes while the other TDSet holds api at 0, the value the group's record says
    // it set: the group takes its record off and never gives api its 3 over the holder.
    let counts = replicas_over(&client, n, "api", std::time::Duration::from_secs(10));
    delete_tdset_and_wait(&client, n, "group").await;
    let counts = counts.await.expect("watching api");
    assert!(counts.iter().all(|c| *c == 0), "api asked for {counts:?}");
    let api = deployment_at(&client, n, "api", 0).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    // Its holder gives it its own count back.
    delete_tdset_and_wait(&client, n, "single").await;
    deployment_at(&client, n, "api", 3).await;
    op.stop().await;
    ns.cleanup().await;
}

/// api (own 3) held at `level` by a younger `scaleTargetRef` TDSet "single", then labelled
/// into an older group "group" (asleep): the group holds it, and the own count it records is
/// api's 3 (what "single" recorded), not the count "single" set.
async fn older_group_takes_from_younger_ref(client: &Client, n: &str, level: i32) -> Operator {
    let _: Deployment = create_object(client, n, app_deployment("api", 3)).await;
    // The older claim, a group that does not select api yet.
    create_deployment_group(client, n, "group", 2, 3600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
        "schedulingConfig": [], "defaultReplica": level, "intervalMint": 60, "onDelete": "Restore"
    });
    create_tdset(client, n, &tdset("single", single)).await;
    let op = Operator::start(client, n, clock(), None, "test");
    deployment_at(client, n, "api", level).await;
    assert_eq!(original_recorded(client, n, "single", "api").await, 3);
    Api::<Deployment>::namespaced(client.clone(), n)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
        )
        .await
        .expect("labelling api into the group");
    let held = |d: &Deployment| annotations(d).contains_key("schedule.rs/held-by");
    let api: Deployment = object_where(client, n, "api", "api held by the group", held).await;
    assert_eq!(annotations(&api), record("group", 3, 0));
    assert_eq!(replicas(&api), Some(0));
    tdset_with_reason(client, n, "single", "Degraded", "ConflictingTDSet").await;
    op
}

#[tokio::test]
async fn an_older_group_taking_a_workload_from_a_younger_scale_target_ref_records_its_own_count() {
    let (client, ns) = setup("group-takes").await;
    let n = &ns.name;
    let op = older_group_takes_from_younger_ref(&client, n, 2).await;
    // The group goes: the younger TDSet takes api over again.
    delete_tdset_and_wait(&client, n, "group").await;
    let api = deployment_at(&client, n, "api", 2).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_group_and_the_tdset_it_took_a_workload_from_deleted_together_give_its_own_count_back() {
    let (client, ns) = setup("group-both-go").await;
    let n = &ns.name;
    // Both sleep api (0): neither may leave it to the other as they both go.
    let op = older_group_takes_from_younger_ref(&client, n, 0).await;
    let tdsets = Api::<TDSet>::namespaced(client.clone(), n);
    for name in ["single", "group"] {
        tdsets
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleting a TDSet");
    }
    for name in ["single", "group"] {
        tdset_gone(&client, n, name).await;
    }
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

/// The counts Deployment `name` asks for over `window`, from a watch started now.
fn replicas_over(
    client: &Client,
    ns: &str,
    name: &str,
    window: std::time::Duration,
) -> tokio::task::JoinHandle<Vec<i32>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut changes = watcher(api, config).applied_objects().boxed();
        let _ = tokio::time::timeout(window, async {
            while let Some(Ok(d)) = changes.next().await {
                seen.extend(d.spec.and_then(|s| s.replicas));
            }
        })
        .await;
        seen
    })
}

/// `web` (its own count 5) put to sleep by `scaleTargetRef` TDSet `night` (onDelete: Keep),
/// whose night ends at `T0+40`; its original recorded in status.
async fn web_asleep_under_a_scale_target_ref(client: &Client, n: &str) -> Operator {
    let _: Deployment = create_object(client, n, labelled(app_deployment("web", 5), "dev")).await;
    let night = json!([{"start": at(-60), "end": at(40), "replica": 0, "reason": "night"}]);
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "schedulingConfig": [],
        "defaultReplica": 5,
        "overrides": night,
        "intervalMint": 60
    });
    create_tdset(client, n, &tdset("night", spec)).await;
    let op = Operator::start(client, n, clock(), None, "test");
    deployment_at(client, n, "web", 0).await;
    assert_eq!(original_recorded(client, n, "night", "web").await, 5);
    op
}

/// `night` switched to the group form over `env: dev`, still at night (scaleTargetRef and
/// defaultReplica gone: own by day), until the group's record is on `web`, carrying the own
/// count 5.
async fn switched_to_the_group_form(client: &Client, n: &str) {
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "scaleTargetRef": null,
                "defaultReplica": null,
                "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
            }})),
        )
        .await
        .unwrap();
    let web: Deployment = object_where(client, n, "web", "the group's record on web", |d| {
        annotations(d).contains_key("schedule.rs/own-replicas")
    })
    .await;
    let own = annotations(&web).get("schedule.rs/own-replicas").cloned();
    assert_eq!(own.as_deref(), Some("5"), "{:?}", annotations(&web));
}

/// A `scaleTargetRef` TDSet (onDelete: Keep) has put `web` (its own count 5) to sleep; at
/// night it is switched to the group form, selecting `web`. The own count goes with it: the
/// group records 5 on `web`, and when the night ends `web` runs 5 again.
#[tokio::test]
async fn a_switch_from_scale_target_ref_to_the_group_form_at_night_keeps_the_own_count() {
    let (client, ns) = setup("group-switch").await;
    let n = &ns.name;
    let _op = web_asleep_under_a_scale_target_ref(&client, n).await;
    switched_to_the_group_form(&client, n).await;
    // The night ends: its own count again.
    deployment_at(&client, n, "web", 5).await;
    ns.cleanup().await;
}

/// A selected workload that its own controller holds (an operator's Deployment) is left alone
/// and counted as conflicting; the rest of the group is written, so the TDSet says it is
/// progressing (not "on hold"), and a real failure beside it is what Degraded names.
#[tokio::test]
async fn a_workload_held_by_its_own_controller_does_not_put_the_group_on_hold() {
    let (client, ns) = setup("group-partly").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    let owner: k8s_openapi::api::core::v1::ConfigMap =
        create_object(&client, n, json!({"metadata": {"name": "some-operator"}})).await;
    let mut db = labelled(app_deployment("db", 1), "dev");
    db["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "some-operator",
        "uid": owner.metadata.uid, "controller": true,
    }]);
    let _: Deployment = create_object(&client, n, db).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let _op = Operator::start(&client, n, clock(), None, "test");

    deployment_at(&client, n, "web", 0).await;
    let t = object_where(&client, n, "night", "the group's status", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.group.as_ref())
            .is_some_and(|g| g.conflicting == 1 && g.at_schedule == 1)
    })
    .await;
    let progressing = condition(&t, "Progressing").unwrap();
    assert_ne!(progressing.reason, "Blocked", "{progressing:?}");
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.reason == "ConflictingTDSet" && degraded.message.contains("db"),
        "{degraded:?}"
    );
    let db: Deployment = Api::namespaced(client.clone(), n).get("db").await.unwrap();
    assert_eq!(replicas(&db), Some(1));
    assert!(annotations(&db).is_empty(), "{:?}", annotations(&db));
    ns.cleanup().await;
}

/// A younger group counts what an older one holds (`conflicting`) without being woken by its
/// changes: it is woken a moment later when what it counts may have changed (a workload
/// appears or is relabelled), so its status follows without waiting for its interval.
#[tokio::test]
async fn a_younger_groups_counts_follow_workloads_it_does_not_hold() {
    let (client, ns) = setup("group-counts").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 1), "dev")).await;
    create_tdset(&client, n, &tdset("older", idle_group())).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &tdset("younger", idle_group())).await;
    let _op = Operator::start(&client, n, clock(), None, "test");
    let counts = |matched, conflicting| {
        move |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.matched == matched && g.conflicting == conflicting)
        }
    };
    object_where(&client, n, "younger", "web counted", counts(1, 1)).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    let env = |env: &str| Patch::Merge(json!({"metadata": {"labels": {"env": env}}}));
    api.patch("web", &PatchParams::default(), &env("qa"))
        .await
        .unwrap();
    object_where(&client, n, "younger", "web labelled out", counts(0, 0)).await;
    object_where(&client, n, "older", "web labelled out", counts(0, 0)).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 1), "dev")).await;
    object_where(&client, n, "younger", "api counted", counts(1, 1)).await;
    ns.cleanup().await;
}

/// `night` put `web` to sleep, and the Deployment controller copied its record to web's
/// ReplicaSet. Labelled out of the group, `web` gets its count back and its record off; the
/// ReplicaSet keeps the copy for good. Its changes wake no one.
#[tokio::test]
async fn a_replica_sets_copy_of_a_record_wakes_no_former_holder() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let (client, ns) = setup("group-rs-copy").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "web", 0).await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), n);
    let copied = || async {
        let list = sets
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        list.items
            .iter()
            .any(|rs| annotations(rs).contains_key("schedule.rs/held-by"))
    };
    eventually(GUARD, "the record copied to the ReplicaSet", || async {
        copied().await.then_some(())
    })
    .await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    let qa = json!({"metadata": {"labels": {"env": "qa"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(qa))
        .await
        .unwrap();
    let web = object_where(
        &client,
        n,
        "web",
        "web given back, its record off",
        |d: &Deployment| {
            replicas(d) == Some(3) && !annotations(d).contains_key("schedule.rs/held-by")
        },
    )
    .await;
    drop(web);
    assert!(copied().await, "the ReplicaSet keeps the copy");
    let before = op.reconciles_when_quiet().await;
    let counts = [4, 5, 2, 6];
    for count in counts {
        let scale = json!({"spec": {"replicas": count}});
        api.patch("web", &PatchParams::default(), &Patch::Merge(scale))
            .await
            .unwrap();
        eventually(
            Duration::from_secs(600),
            "the ReplicaSet scaled",
            || async {
                let list = sets
                    .list(&ListParams::default().labels("app=web"))
                    .await
                    .unwrap();
                list.items
                    .iter()
                    .any(|rs| rs.spec.as_ref().and_then(|s| s.replicas) == Some(count))
                    .then_some(())
            },
        )
        .await;
    }
    // Woken by the ReplicaSet, `night` reconciles about once per scaling (with the copy mapped
    // to it: 3 for 3 scalings and 3 for 4, the queue merging some). One reconcile of its own may
    // fall in the window: a requeue it had scheduled, which a loaded machine (3 suites at once)
    // once put there.
    let woken = op.reconciles_when_quiet().await - before;
    assert!(
        woken <= 1.0,
        "the ReplicaSet's {} scalings woke {woken} reconciles",
        counts.len()
    );
    ns.cleanup().await;
}

/// An older group past its cap comes to select a workload a younger group holds asleep: it
/// takes it over (what other groups hold is read before the rest of what it selects), so the
/// workload is not left at the younger group's count with nobody to wake it.
#[tokio::test]
async fn an_older_group_past_its_cap_takes_over_what_a_younger_group_yields_to_it() {
    let (client, ns) = setup("group-cap-handover").await;
    let n = &ns.name;
    for name in ["a", "b", "c"] {
        let _: Deployment =
            create_object(&client, n, labelled(app_deployment(name, 2), "dev")).await;
    }
    // Sorts after a, b and c: past the older group's first two.
    let _: Deployment = create_object(&client, n, app_deployment("z", 5)).await;
    create_deployment_group(&client, n, "older", -60, 3600).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut younger = sleep_group(json!(["Deployment"]), json!([]), -60, 3600);
    younger["scaleTargetSelector"]["selector"] = json!({"matchLabels": {"app": "z"}});
    younger["overrides"][0]["replica"] = json!(1);
    create_tdset(&client, n, &tdset("younger", younger)).await;
    let _op = Operator::start_configured(&client, n, clock(), |o| o.group_max_workloads = 2);
    deployment_at(&client, n, "a", 0).await;
    deployment_at(&client, n, "b", 0).await;
    tdset_with_reason(&client, n, "older", "Degraded", "TooManyWorkloads").await;
    let z = deployment_at(&client, n, "z", 1).await;
    assert_eq!(annotations(&z), record("younger", 5, 1));

    // Now the older group selects it too: it holds it, its own count carried over.
    Api::<Deployment>::namespaced(client.clone(), n)
        .patch(
            "z",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
        )
        .await
        .expect("labelling z");
    object_where(
        &client,
        n,
        "z",
        "z held by the older group at 0",
        |d: &Deployment| replicas(d) == Some(0) && annotations(d) == record("older", 5, 0),
    )
    .await;
    ns.cleanup().await;
}

/// The switch above with the operator killed at the worst instant: the group's record (own
/// count 5) is on `web`, and the status that would drop `status.target` (the original 5) was
/// never written (a policy refuses every status write that drops it, until the kill). The operator
/// that comes next finds both, keeps the count, and wakes `web` at 5.
#[tokio::test]
async fn a_switch_to_the_group_form_killed_before_its_status_keeps_the_own_count() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let (client, ns) = setup("group-switch-kill").await;
    let n = &ns.name;
    let op = web_asleep_under_a_scale_target_ref(&client, n).await;

    // From here the TDSet's status cannot drop its target.
    let name = format!("refuse-status-{n}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["schedule.rs"], "apiVersions": ["*"],
                     "operations": ["UPDATE"], "resources": ["tdsets/status"]}]},
                 "validations": [{
                     "expression": "!(has(oldObject.status) && has(oldObject.status.target)) || (has(object.status) && has(object.status.target))",
                     "message": "the test refuses to drop status.target"}]}
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}}
    }))
    .unwrap();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies.create(&Default::default(), &policy).await.unwrap();
    bindings
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let touch = json!({"status": {"target": null}});
    eventually(GUARD, "the status policy in force", || async {
        (tdsets
            .patch_status("night", &dry_run, &Patch::Merge(&touch))
            .await)
            .is_err()
            .then_some(())
    })
    .await;

    switched_to_the_group_form(&client, n).await;
    op.kill();
    // The crash left both: the record on web, and status.target with the original.
    assert_eq!(original_recorded(&client, n, "night", "web").await, 5);
    bindings.delete(&name, &Default::default()).await.unwrap();
    policies.delete(&name, &Default::default()).await.unwrap();
    eventually(GUARD, "the status policy lifted", || async {
        (tdsets
            .patch_status("night", &dry_run, &Patch::Merge(&touch))
            .await)
            .is_ok()
            .then_some(())
    })
    .await;

    // The next operator: asleep until the night ends, then its own count again.
    let _op = Operator::start(&client, n, clock(), None, "test");
    let t = object_where(&client, n, "night", "status.target dropped", |t: &TDSet| {
        t.status
            .as_ref()
            .is_some_and(|s| s.group.is_some() && s.target.is_none())
    })
    .await;
    drop(t);
    assert_eq!(
        replicas(
            &Api::<Deployment>::namespaced(client.clone(), n)
                .get("web")
                .await
                .unwrap()
        ),
        Some(0)
    );
    let web = deployment_at(&client, n, "web", 5).await;
    assert!(annotations(&web).is_empty(), "{:?}", annotations(&web));
    ns.cleanup().await;
}
