//! The group form over kinds beyond Deployments: autoscaled workloads (the HPA's floor), and
//! custom kinds with and without a `/scale` subresource.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::Clock;

use crate::group::hpa;
use crate::group::*;

#[tokio::test]
async fn an_autoscaled_workloads_count_is_its_hpas_floor_and_the_floor_is_given_back() {
    let (client, ns) = setup("group-hpa").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("auto", 2), "dev")).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("auto", "auto")).await;
    // An HPA another controller makes and keeps (as KEDA's ScaledObject does): its floor is
    // that controller's, never the group's.
    let owner: k8s_openapi::api::core::v1::ConfigMap =
        create_object(&client, n, json!({"metadata": {"name": "scaledobject"}})).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("keda", 2), "dev")).await;
    let mut owned = hpa("keda", "keda");
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "scaledobject",
        "uid": owner.metadata.uid, "controller": true
    }]);
    let _: HorizontalPodAutoscaler = create_object(&client, n, owned).await;
    let keda_hpa = json_of::<HorizontalPodAutoscaler>(&client, n, "keda").await;
    // (Until the test moves its end.)
    let mut spec = sleep_group(json!(["Deployment"]), json!([]), 3, 3600);
    spec["overrides"][0]["replica"] = json!(4);
    create_tdset(&client, n, &tdset("busy", spec)).await;
    let clock = clock();
    let op = Operator::start(&client, n, clock, None, "test");

    let floor = |want: i32| {
        move |h: &HorizontalPodAutoscaler| {
            h.spec.as_ref().and_then(|s| s.min_replicas) == Some(want)
        }
    };
    let h = object_where(&client, n, "auto", "the HPA's floor at 4", floor(4)).await;
    let recorded = annotations(&h);
    assert_eq!(
        recorded
            .get("schedule.rs/own-min-replicas")
            .map(String::as_str),
        Some("2")
    );
    // The workload of a controller-owned HPA is that controller's: never written, and the
    // status names who holds it.
    let t: TDSet = object_where(
        &client,
        n,
        "busy",
        "keda counted as held elsewhere",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.conflicting == 1)
        },
    )
    .await;
    let status = t.status.unwrap();
    let g = status.group.unwrap();
    assert_eq!((g.matched, g.targets.as_str()), (2, "1/1"), "{g:?}");
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        degraded
            .contains("ConfigMap scaledobject, the controller of its HorizontalPodAutoscaler keda"),
        "{degraded}"
    );
    // The HPA, not the operator, scales the workload up to its new floor.
    let d = deployment_at(&client, n, "auto", 4).await;
    let managers: Vec<String> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.contains(&"tdset-operator".to_string()),
        "{managers:?}"
    );

    // own again, 3 s from now: the floor given back, nothing of the TDSet's left on the HPA.
    move_night(&client, n, "busy", clock.now(), None, Some(3)).await;
    let h = object_where(&client, n, "auto", "the HPA's floor back at 2", floor(2)).await;
    assert!(annotations(&h).is_empty(), "{:?}", annotations(&h));
    assert_eq!(
        untouchable(json_of::<HorizontalPodAutoscaler>(&client, n, "keda").await),
        untouchable(keda_hpa)
    );
    let managers = |d: Deployment| -> Vec<String> {
        d.metadata
            .managed_fields
            .into_iter()
            .flatten()
            .filter_map(|m| m.manager)
            .collect()
    };
    let keda = managers(deployment_at(&client, n, "keda", 2).await);
    assert!(!keda.contains(&"tdset-operator".to_string()), "{keda:?}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_scale_target_ref_on_an_hpa_a_group_holds_records_its_own_floor() {
    let (client, ns) = setup("group-hpa-ref").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("auto", 2), "dev")).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("auto", "auto")).await;
    let mut spec = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    spec["overrides"][0]["replica"] = json!(4);
    create_tdset(&client, n, &tdset("busy", spec)).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    let floor = |want: i32| {
        move |h: &HorizontalPodAutoscaler| {
            h.spec.as_ref().and_then(|s| s.min_replicas) == Some(want)
        }
    };
    object_where(&client, n, "auto", "the group's floor of 4", floor(4)).await;

    // A TDSet that schedules the HPA itself holds it; the floor it records as the HPA's own is
    // 2, from the group's record, not the group's 4.
    let single = json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "auto"},
        "schedulingConfig": [], "defaultReplica": 3, "intervalMint": 60, "onDelete": "Restore"
    });
    create_tdset(&client, n, &tdset("single", single)).await;
    object_where(&client, n, "auto", "the TDSet's floor of 3", floor(3)).await;
    assert_eq!(original_recorded(&client, n, "single", "auto").await, 2);
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_custom_kind_with_scale_sleeps_through_its_scale_subresource_and_keeps_its_record() {
    let (client, ns) = setup("group-custom").await;
    let n = &ns.name;
    let api = dev_widget(&client, n).await;
    let kinds = json!(["Widget.test.schedule.rs"]);
    create_tdset(
        &client,
        n,
        // (No morning: w is given back by the change of kinds.)
        &tdset("night", sleep_group(kinds, json!([]), 3, 3600)),
    )
    .await;
    let op = Operator::start(&client, n, clock(), None, "test");
    let replicas_and_record = |want: i64| {
        let api = api.clone();
        async move {
            let w = api.get("w").await.ok()?;
            (w.data.pointer("/spec/replicas") == Some(&json!(want))).then_some(annotations(&w))
        }
    };
    // The record first, the count through /scale next (the record says, until the count is
    // there, what a crash between the two would leave); then the record as for any workload.
    eventually(GUARD, "Widget w asleep, its own 3 recorded", || async {
        replicas_and_record(0)
            .await
            .filter(|r| *r == record("night", 3, 0))
    })
    .await;
    // The kind leaves `kinds` during the night: the TDSet remembered that it holds Widgets
    // (status.group.heldKinds) and gives w its own count back, without waiting for morning.
    let t: TDSet = Api::namespaced(client.clone(), n)
        .get("night")
        .await
        .unwrap();
    let held = t.status.and_then(|s| s.group).map(|g| g.held_kinds);
    assert_eq!(held, Some(vec!["Widget.test.schedule.rs".to_string()]));
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetSelector": {"kinds": ["Deployment"]}}})),
        )
        .await
        .unwrap();
    // Given back in two requests (the count, then the record's removal): both land.
    eventually(GUARD, "Widget w back at 3, no record on it", || async {
        replicas_and_record(3).await.filter(|r| r.is_empty())
    })
    .await;
    let t: TDSet = object_where(
        &client,
        n,
        "night",
        "Widgets no longer remembered",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.held_kinds.is_empty())
        },
    )
    .await;
    assert_eq!(t.status.and_then(|s| s.group).map(|g| g.matched), Some(0));
    op.stop().await;
    ns.cleanup().await;
}

/// A custom kind whose `spec.replicas` is not set reads as 0 through `/scale`, while its
/// controller runs its own default. The group leaves it alone and says why, rather than
/// counting it asleep (and "waking" it to 0).
#[tokio::test]
async fn a_custom_workload_without_a_count_is_left_alone_and_said_so() {
    let (client, ns) = setup("group-unset").await;
    let n = &ns.name;
    let api = dev_widget(&client, n).await;
    let unset: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.schedule.rs/v1", "kind": "Widget",
        "metadata": {"name": "defaulted", "labels": {"env": "dev"}}, "spec": {}
    }))
    .unwrap();
    api.create(&Default::default(), &unset).await.unwrap();
    let kinds = json!(["Widget.test.schedule.rs"]);
    create_tdset(
        &client,
        n,
        &tdset("night", sleep_group(kinds, json!([]), -60, 3600)),
    )
    .await;
    let _op = Operator::start(&client, n, clock(), None, "test");
    let t = object_where(
        &client,
        n,
        "night",
        "w asleep, the other left alone",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.at_schedule == 1 && g.conflicting == 1)
        },
    )
    .await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.message.contains("defaulted")
            && degraded.message.contains("spec.replicas is not set"),
        "{degraded:?}"
    );
    let left = api.get("defaulted").await.unwrap();
    assert!(annotations(&left).is_empty(), "{:?}", annotations(&left));
    assert_eq!(left.data.pointer("/spec/replicas"), None);
    ns.cleanup().await;
}
