//! The three workload sources on the real API server (kube-controller-manager runs the
//! Deployment, StatefulSet and HPA controllers): a full pod `template`, a `scaleTargetRef` to
//! objects someone else deployed (through `/scale`), and an HPA whose floor is the schedule.
//! The operator runs in-process with an injected clock.

use crate::support::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

/// Noon on a Friday, inside 09:00-17:00.
fn noon() -> SystemClock {
    SystemClock::starting_at(utc("2026-05-01T12:00:00Z"))
}

/// 4 replicas 09:00-17:00 UTC, `default` otherwise, for whatever `source` names.
fn office_hours(source: Value, default: i32) -> Value {
    let mut spec = json!({
        "schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": 4}],
        "defaultReplica": default,
        "intervalMint": 60
    });
    spec.as_object_mut()
        .unwrap()
        .extend(source.as_object().unwrap().clone());
    spec
}

fn target(api_version: &str, kind: &str, name: &str) -> Value {
    json!({"scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": name}})
}

/// Deployment web (2 replicas) and HPA `hpa_name` (2..10) that scales it.
async fn web_with_hpa(client: &Client, ns: &str, hpa_name: &str) {
    let _: Deployment = create_object(client, ns, app_deployment("web", 2)).await;
    let _: HorizontalPodAutoscaler = create_object(client, ns, hpa(hpa_name, "web", 2, 10)).await;
}

/// TDSet "sched" whose office hours are the floor of HPA `name`.
pub(crate) fn floor_of(name: &str, default: i32) -> TDSet {
    tdset(
        "sched",
        office_hours(
            target("autoscaling/v2", "HorizontalPodAutoscaler", name),
            default,
        ),
    )
}

/// The object without what the API server and controllers keep changing, and without the
/// replica count: what the operator must never touch.
fn untouchable(mut v: Value) -> Value {
    for path in [
        "/metadata/resourceVersion",
        "/metadata/generation",
        "/metadata/managedFields",
        "/status",
        "/spec/replicas",
    ] {
        if let Some((parent, key)) = path.rsplit_once('/')
            && let Some(Value::Object(m)) =
                v.pointer_mut(if parent.is_empty() { "" } else { parent })
        {
            m.remove(key);
        }
    }
    if let Some(Value::Object(a)) = v.pointer_mut("/metadata/annotations") {
        a.remove("deployment.kubernetes.io/revision");
    }
    v
}

#[tokio::test]
async fn template_fields_reach_the_deployment_and_removed_fields_go() {
    let (client, ns) = setup("wl-template").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let template = json!({
        "metadata": {"labels": {"team": "payments"}},
        "spec": {
            "serviceAccountName": "default",
            "containers": [{
                "name": "app", "image": "nginx:1.27",
                "env": [{"name": "MODE", "value": "day"}],
                "resources": {"requests": {"cpu": "0.25", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                "ports": [{"name": "http", "containerPort": 8080}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}]
        }
    });
    let mut spec = office_hours(json!({"template": template}), 1);
    spec["service"] = json!({"port": 80});
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;

    let d = deployment_at(&client, &ns.name, "web", 4).await;
    let pod = d.spec.as_ref().unwrap().template.clone();
    let labels = pod.metadata.as_ref().unwrap().labels.clone().unwrap();
    assert_eq!(labels.get("team").map(String::as_str), Some("payments"));
    assert_eq!(
        labels.get("schedule.rs/tdset").map(String::as_str),
        Some("web")
    );
    let podspec = pod.spec.unwrap();
    let c = &podspec.containers[0];
    assert_eq!(c.env.as_ref().unwrap()[0].value.as_deref(), Some("day"));
    let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["cpu"].0, "250m", "the API server's canonical form");
    assert!(c.readiness_probe.is_some());
    assert_eq!(podspec.volumes.as_ref().unwrap()[0].name, "scratch");
    assert_eq!(podspec.service_account_name.as_deref(), Some("default"));
    let svc: Service =
        object_where(&client, &ns.name, "web", "Service web", |_: &Service| true).await;
    let port = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into()))
    );

    // Settled: "0.25" came back as "250m", which must not read as drift.
    tdset_with_reason(&client, &ns.name, "web", "Progressing", "Settled").await;
    op.writes_when_idle().await;
    // The Deployment's and the Service's writes: its status may still change after Settled
    // (readyReplicas follows the pods' readiness), the template must not.
    let template_writes = || {
        op.counter(r#"tdset_api_writes_total{resource="deployments""#)
            + op.counter(r#"tdset_api_writes_total{resource="services""#)
    };
    let writes = template_writes();
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    // One reconcile per poke (two pokes in quick succession may be coalesced into one).
    for i in 0..2 {
        let reconciles = op.counter("tdset_reconciles_total");
        let poke = json!({"metadata": {"annotations": {"poke": i.to_string()}}});
        tdsets
            .patch("web", &PatchParams::default(), &Patch::Merge(poke))
            .await
            .unwrap();
        eventually(GUARD, "a reconcile after the poke", || async {
            (op.counter("tdset_reconciles_total") > reconciles).then_some(())
        })
        .await;
    }
    assert_eq!(
        template_writes(),
        writes,
        "a settled template was written again: {}",
        op.metrics.render()
    );

    // Change a field and remove others (a merge patch, as `kubectl patch` would send): the
    // volume and its mount go from the Deployment.
    let mut container = template["spec"]["containers"][0].clone();
    container["env"][0]["value"] = json!("night");
    container.as_object_mut().unwrap().remove("volumeMounts");
    tdsets
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"volumes": null, "containers": [container]}}}})),
        )
        .await
        .unwrap();
    let d = object_where(
        &client,
        &ns.name,
        "web",
        "env changed and volume gone",
        |d: &Deployment| {
            let p = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
            p.containers[0].env.as_ref().unwrap()[0].value.as_deref() == Some("night")
                && p.volumes.is_none()
        },
    )
    .await;
    let p = d.spec.unwrap().template.spec.unwrap();
    assert!(p.containers[0].volume_mounts.is_none());
    assert!(
        p.containers[0].readiness_probe.is_some(),
        "kept what was not removed"
    );
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_template_the_api_server_rejects_is_reported_once_not_retried() {
    let (client, ns) = setup("wl-badtemplate").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    // Passes the CRD's schema, fails the Deployment's validation: a container name with "_".
    let template = json!({"spec": {"containers": [{"name": "App_1", "image": "nginx"}]}});
    create_tdset(
        &client,
        &ns.name,
        &tdset("web", office_hours(json!({"template": template}), 1)),
    )
    .await;
    let t = tdset_with_reason(&client, &ns.name, "web", "Degraded", "InvalidTemplate").await;
    let c = condition(&t, "Degraded").unwrap();
    assert_eq!(c.status, "True");
    assert!(
        c.message.contains("spec.template.spec.containers[0].name"),
        "{}",
        c.message
    );
    wait_for_event(&client, &ns.name, "web", |(ty, r, _)| {
        ty == "Warning" && r == "InvalidTemplate"
    })
    .await;
    // No retry storm: the next attempt waits for a spec change or intervalMint (an hour).
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let creates = op.counter("tdset_api_writes_total{resource=\"deployments\",verb=\"create\"}");
    assert!(
        creates <= 3.0,
        "{creates} Deployment creates for one invalid template"
    );
    assert_eq!(op.counter("tdset_reconcile_errors_total"), 0.0);
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_referenced_deployment_gets_its_replicas_and_nothing_else() {
    let (client, ns) = setup("wl-target").await;
    let before: Deployment = create_object(&client, &ns.name, app_deployment("web", 2)).await;
    // Two seconds before 09:00: the default (1) now, the window (4) at the boundary.
    let boundary = utc("2026-05-01T09:00:00Z");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "sched",
            office_hours(target("apps/v1", "Deployment", "web"), 1),
        ),
    )
    .await;
    let clock = SystemClock::starting_at(boundary - chrono::Duration::seconds(3));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 1).await;
    let after = deployment_at(&client, &ns.name, "web", 4).await;
    use tdset_operator::clock::Clock;
    assert!(clock.now() >= boundary);

    // Nothing but replicas changed: no ownerReference, label, annotation or template change.
    let (b, a) = (
        serde_json::to_value(&before).unwrap(),
        serde_json::to_value(&after).unwrap(),
    );
    assert_eq!(
        untouchable(a.clone()),
        untouchable(b),
        "the operator changed more than spec.replicas"
    );
    let ours: Vec<_> = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("tdset-operator"))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].subresource.as_deref(), Some("scale"));
    assert_eq!(
        ours[0].fields_v1.as_ref().unwrap().0,
        json!({"f:spec": {"f:replicas": {}}})
    );

    let t = object_where(
        &client,
        &ns.name,
        "sched",
        "status for the target",
        |t: &TDSet| {
            t.status
                .as_ref()
                .is_some_and(|s| s.desired_replicas == Some(4) && s.target.is_some())
        },
    )
    .await;
    let target_status = t.status.unwrap().target.unwrap();
    assert_eq!(
        (target_status.kind.as_str(), target_status.field.as_str()),
        ("Deployment", "spec.replicas")
    );
    assert_eq!(target_status.original_replicas, Some(2));
    wait_for_event(&client, &ns.name, "sched", |(_, r, note)| {
        r == "ScaledUp" && note.contains("from 1 to 4")
    })
    .await;

    // Drift is reverted, within seconds (a watch, not intervalMint's hour).
    let out = kubectl(&["-n", &ns.name, "scale", "deployment/web", "--replicas=7"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    deployment_at(&client, &ns.name, "web", 4).await;

    // Deleting the TDSet (onDelete: Keep) leaves the Deployment as it is.
    Api::<TDSet>::namespaced(client.clone(), &ns.name)
        .delete("sched", &DeleteParams::default())
        .await
        .unwrap();
    tdset_gone(&client, &ns.name, "sched").await;
    let kept: Deployment = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(replicas(&kept), Some(4));
    assert!(kept.metadata.owner_references.is_none());
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn restore_on_delete_puts_the_original_count_back() {
    let (client, ns) = setup("wl-restore").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 3)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let mut spec = office_hours(target("apps/v1", "Deployment", "web"), 1);
    spec["onDelete"] = json!("Restore");
    create_tdset(&client, &ns.name, &tdset("sched", spec)).await;
    deployment_at(&client, &ns.name, "web", 4).await;
    object_where(
        &client,
        &ns.name,
        "sched",
        "finalizer and original recorded",
        |t: &TDSet| {
            t.finalizers()
                .iter()
                .any(|f| f == "schedule.rs/restore-target")
                && t.status
                    .as_ref()
                    .and_then(|s| s.target.as_ref())
                    .and_then(|t| t.original_replicas)
                    == Some(3)
        },
    )
    .await;
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    tdsets
        .delete("sched", &DeleteParams::default())
        .await
        .unwrap();
    deployment_at(&client, &ns.name, "web", 3).await;
    tdset_gone(&client, &ns.name, "sched").await;
    wait_for_event(&client, &ns.name, "sched", |(_, r, note)| {
        r == "Restored" && note.contains("to 3 replicas")
    })
    .await;

    // A target that is gone never blocks the deletion.
    let mut spec = office_hours(target("apps/v1", "Deployment", "gone"), 1);
    spec["onDelete"] = json!("Restore");
    let _: Deployment = create_object(&client, &ns.name, app_deployment("gone", 2)).await;
    create_tdset(&client, &ns.name, &tdset("orphan", spec)).await;
    deployment_at(&client, &ns.name, "gone", 4).await;
    Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    tdsets
        .delete("orphan", &DeleteParams::default())
        .await
        .unwrap();
    // Deleted although its target is gone.
    tdset_gone(&client, &ns.name, "orphan").await;
    wait_for_event(&client, &ns.name, "orphan", |(ty, r, _)| {
        ty == "Warning" && r == "RestoreFailed"
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_statefulset_and_a_custom_resource_with_scale_are_scaled() {
    let (client, ns) = setup("wl-kinds").await;
    let _: StatefulSet = create_object(&client, &ns.name, json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres"}]}}}
    }))
    .await;
    let widget_api = widget(&client, &ns.name).await;

    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "db",
            office_hours(target("apps/v1", "StatefulSet", "db"), 1),
        ),
    )
    .await;
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "w",
            office_hours(target("test.schedule.rs/v1", "Widget", "w"), 1),
        ),
    )
    .await;
    object_where(
        &client,
        &ns.name,
        "db",
        "StatefulSet at 4",
        |s: &StatefulSet| s.spec.as_ref().and_then(|s| s.replicas) == Some(4),
    )
    .await;
    widget_at(&widget_api, 4).await;
    op.stop().await;
    ns.cleanup().await;
}

/// A custom object whose `spec.replicas` is not set runs its controller's default; its
/// `/scale` cannot be read (the API server answers 500). The TDSet says what to do, writes
/// nothing, and schedules it once the count is set.
#[tokio::test]
async fn a_custom_target_without_a_count_is_reported_and_scheduled_once_it_has_one() {
    let (client, ns) = setup("wl-unset").await;
    let n = &ns.name;
    let api = widget(&client, n).await;
    let unset: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.schedule.rs/v1", "kind": "Widget", "metadata": {"name": "u"}, "spec": {}
    }))
    .unwrap();
    api.create(&Default::default(), &unset).await.unwrap();
    let op = Operator::start(&client, n, noon(), None, "test");
    let target = target("test.schedule.rs/v1", "Widget", "u");
    create_tdset(&client, n, &tdset("u", office_hours(target, 1))).await;
    let t = tdset_with_reason(&client, n, "u", "Degraded", "ScaleNotSupported").await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.message.contains("spec.replicas is not set"),
        "{degraded:?}"
    );
    assert_eq!(
        api.get("u").await.unwrap().data.pointer("/spec/replicas"),
        None
    );
    api.patch(
        "u",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    eventually(GUARD, "Widget u at 4", || async {
        let w = api.get("u").await.ok()?;
        (w.data.pointer("/spec/replicas") == Some(&json!(4))).then_some(())
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// Widget `w` (replicas 1) in `ns`, of the test CRD.
async fn widget(client: &Client, ns: &str) -> Api<DynamicObject> {
    let widgets = install_widget_crd(client).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &widgets);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.schedule.rs/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 1}
    }))
    .unwrap();
    api.create(&Default::default(), &widget).await.unwrap();
    api
}

async fn widget_at(api: &Api<DynamicObject>, replicas: i32) {
    eventually(GUARD, &format!("Widget w at {replicas}"), || async {
        let w = api.get("w").await.ok()?;
        (w.data.pointer("/spec/replicas") == Some(&json!(replicas))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_hpa_floor_follows_the_schedule_and_the_hpa_scales_the_deployment() {
    let (client, ns) = setup("wl-hpa").await;
    web_with_hpa(&client, &ns.name, "web").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(&client, &ns.name, &floor_of("web", 1)).await;
    let h: HorizontalPodAutoscaler = object_where(
        &client,
        &ns.name,
        "web",
        "HPA floor 4",
        |h: &HorizontalPodAutoscaler| h.spec.as_ref().and_then(|s| s.min_replicas) == Some(4),
    )
    .await;
    assert_eq!(
        h.spec.as_ref().unwrap().max_replicas,
        10,
        "maxReplicas is left alone"
    );
    assert!(
        h.spec.as_ref().unwrap().metrics.is_some(),
        "metrics are left alone"
    );
    // The HPA controller (not the operator) raises the Deployment to the floor.
    deployment_at(&client, &ns.name, "web", 4).await;
    let d: Deployment = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert!(
        !d.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("tdset-operator")),
        "the operator wrote the Deployment itself"
    );
    let t = object_where(
        &client,
        &ns.name,
        "sched",
        "status of the floor",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.target.as_ref())
                .is_some_and(|t| t.field == "spec.minReplicas")
        },
    )
    .await;
    assert_eq!(t.status.unwrap().target.unwrap().original_replicas, Some(2));

    // Drift of the floor is reverted.
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns.name)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minReplicas": 1}})),
        )
        .await
        .unwrap();
    object_where(
        &client,
        &ns.name,
        "web",
        "floor back at 4",
        |h: &HorizontalPodAutoscaler| h.spec.as_ref().and_then(|s| s.min_replicas) == Some(4),
    )
    .await;

    // Above maxReplicas: clamped and reported.
    Api::<TDSet>::namespaced(client.clone(), &ns.name)
        .patch("sched", &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": 12}]}})))
        .await
        .unwrap();
    object_where(
        &client,
        &ns.name,
        "web",
        "floor clamped to 10",
        |h: &HorizontalPodAutoscaler| h.spec.as_ref().and_then(|s| s.min_replicas) == Some(10),
    )
    .await;
    let t = tdset_with_reason(
        &client,
        &ns.name,
        "sched",
        "Degraded",
        "ClampedToMaxReplicas",
    )
    .await;
    assert!(
        condition(&t, "Degraded")
            .unwrap()
            .message
            .contains("at most 10")
    );
    wait_for_event(&client, &ns.name, "sched", |(ty, r, _)| {
        ty == "Warning" && r == "ClampedToMaxReplicas"
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_scheduled_zero_puts_the_hpa_target_to_sleep_and_the_next_window_wakes_it() {
    let (client, ns) = setup("wl-hpa0").await;
    web_with_hpa(&client, &ns.name, "web").await;
    let boundary = utc("2026-05-01T09:00:00Z");
    create_tdset(&client, &ns.name, &floor_of("web", 0)).await;
    let clock = SystemClock::starting_at(boundary - chrono::Duration::seconds(4));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    // Before 09:00 the schedule says 0: the Deployment goes to 0, the HPA keeps its minimum.
    deployment_at(&client, &ns.name, "web", 0).await;
    let h: HorizontalPodAutoscaler = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(h.spec.unwrap().min_replicas, Some(2));
    // At 09:00 the floor is 4 and the Deployment is woken to it.
    deployment_at(&client, &ns.name, "web", 4).await;
    object_where(
        &client,
        &ns.name,
        "web",
        "HPA floor 4",
        |h: &HorizontalPodAutoscaler| h.spec.as_ref().and_then(|s| s.min_replicas) == Some(4),
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// An HPA's target the schedule put to sleep is never left at 0 because the HPA went: deleted
/// first, then the TDSet, the target gets the HPA's own floor back.
#[tokio::test]
async fn a_sleeping_hpa_target_is_woken_when_its_hpa_is_deleted_before_the_tdset() {
    let (client, ns) = setup("wl-hpa-gone").await;
    web_with_hpa(&client, &ns.name, "web").await;
    create_tdset(&client, &ns.name, &floor_of("web", 0)).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T20:00:00Z"));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 0).await;

    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns.name)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    delete_tdset_and_wait(&client, &ns.name, "sched").await;
    // The HPA's own floor (2), on the very Deployment it scaled.
    deployment_at(&client, &ns.name, "web", 2).await;
    op.stop().await;
    ns.cleanup().await;
}

/// An HPA pointed at another workload while its target sleeps: the one it left is woken to the
/// HPA's own floor, never left at 0 by nobody; the schedule then applies to the new one.
#[tokio::test]
async fn a_sleeping_hpa_target_is_woken_when_the_hpa_is_pointed_elsewhere() {
    let (client, ns) = setup("wl-hpa-moved").await;
    web_with_hpa(&client, &ns.name, "web").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("api", 3)).await;
    create_tdset(&client, &ns.name, &floor_of("web", 0)).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T20:00:00Z"));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 0).await;

    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns.name)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "api"}}})),
        )
        .await
        .unwrap();
    deployment_at(&client, &ns.name, "web", 2).await;
    // The HPA's new target follows the schedule (0 at night).
    deployment_at(&client, &ns.name, "api", 0).await;
    // Deleted, the TDSet wakes the one asleep now (to the HPA's floor), and only that one.
    delete_tdset_and_wait(&client, &ns.name, "sched").await;
    deployment_at(&client, &ns.name, "api", 2).await;
    deployment_at(&client, &ns.name, "web", 2).await;
    op.stop().await;
    ns.cleanup().await;
}

/// An HPA deleted while its target sleeps and created again under its name for another
/// workload: the new object (another uid) is not the one the record was made of, but the
/// workload put to sleep through the old one is still asleep, and is woken to the floor the
/// old HPA had; the schedule goes on with the new HPA's target.
#[tokio::test]
async fn a_sleeping_hpa_target_is_woken_when_its_hpa_is_created_again_for_another_workload() {
    let (client, ns) = setup("wl-hpa-again").await;
    let n = &ns.name;
    web_with_hpa(&client, n, "web-hpa").await;
    let _: Deployment = create_object(&client, n, app_deployment("web-v2", 3)).await;
    create_tdset(&client, n, &floor_of("web-hpa", 0)).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T20:00:00Z"));
    let op = Operator::start(&client, n, clock, None, "test");
    deployment_at(&client, n, "web", 0).await;

    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), n);
    hpas.delete("web-hpa", &DeleteParams::default())
        .await
        .unwrap();
    eventually(GUARD, "HPA web-hpa gone", || async {
        matches!(hpas.get_opt("web-hpa").await, Ok(None)).then_some(())
    })
    .await;
    let _: HorizontalPodAutoscaler =
        create_object(&client, n, hpa("web-hpa", "web-v2", 3, 10)).await;
    // The new HPA's target follows the schedule (0 at night)...
    deployment_at(&client, n, "web-v2", 0).await;
    // ...and the one the old HPA scaled is not left at 0: woken to that HPA's own floor (2).
    deployment_at(&client, n, "web", 2).await;
    // Deleted, the TDSet wakes the one asleep now (to the new HPA's floor), web stays awake.
    delete_tdset_and_wait(&client, n, "sched").await;
    deployment_at(&client, n, "web-v2", 3).await;
    deployment_at(&client, n, "web", 2).await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_deployment_an_hpa_scales_is_not_fought_over() {
    let (client, ns) = setup("wl-conflict").await;
    web_with_hpa(&client, &ns.name, "web-hpa").await;
    let before: Deployment = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "sched",
            office_hours(target("apps/v1", "Deployment", "web"), 1),
        ),
    )
    .await;
    let t = tdset_with_reason(
        &client,
        &ns.name,
        "sched",
        "Degraded",
        "ConflictingAutoscaler",
    )
    .await;
    let message = &condition(&t, "Degraded").unwrap().message;
    assert!(
        message.contains("web-hpa") && message.contains("HorizontalPodAutoscaler"),
        "{message}"
    );
    let d: Deployment = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(replicas(&d), Some(2));
    assert!(
        !d.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("tdset-operator"))
    );
    assert_eq!(d.metadata.generation, before.metadata.generation);
    let scale_writes: f64 = op
        .metrics
        .render()
        .lines()
        .filter(|l| l.contains("/scale"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(scale_writes, 0.0);
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_missing_target_is_reported_and_picked_up_when_it_appears() {
    let (client, ns) = setup("wl-missing").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "sched",
            office_hours(target("apps/v1", "Deployment", "later"), 1),
        ),
    )
    .await;
    let t = tdset_with_reason(&client, &ns.name, "sched", "Degraded", "TargetNotFound").await;
    assert!(
        condition(&t, "Degraded")
            .unwrap()
            .message
            .contains("Deployment later")
    );
    let _: Deployment = create_object(&client, &ns.name, app_deployment("later", 1)).await;
    deployment_at(&client, &ns.name, "later", 4).await;
    object_where(
        &client,
        &ns.name,
        "sched",
        "Degraded cleared",
        |t: &TDSet| condition(t, "Degraded").is_some_and(|c| c.status == "False"),
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_kind_the_operator_may_not_scale_is_reported_and_granted_by_aggregation() {
    let client = client().await;
    install_crd(&client).await;
    let out = kubectl(&["apply", "-k", repo_root().join("deploy").to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = TestNamespace::new(&client, "wl-rbac").await;
    let widget_api = widget(&client, &ns.name).await;
    // The deployed ClusterRole is aggregated by kube-controller-manager: wait until it holds
    // the core rules and (after an earlier run) no grant for widgets.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let _ = roles
        .delete("tdset-operator-widgets", &DeleteParams::default())
        .await;
    eventually(GUARD, "aggregated operator ClusterRole", || async {
        let rules = roles.get("tdset-operator").await.ok()?.rules?;
        let widgets = rules.iter().any(|r| {
            r.resources
                .iter()
                .flatten()
                .any(|x| x.starts_with("widgets"))
        });
        (!rules.is_empty() && !widgets).then_some(())
    })
    .await;
    let (sa_client, path) = service_account_client("tdset-system", "tdset-operator").await;
    let op = Operator::start(&sa_client, &ns.name, noon(), None, "rbac-test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "w",
            office_hours(target("test.schedule.rs/v1", "Widget", "w"), 1),
        ),
    )
    .await;
    let t = tdset_with_reason(&client, &ns.name, "w", "Degraded", "Forbidden").await;
    let message = &condition(&t, "Degraded").unwrap().message;
    assert!(
        message.contains("widgets/scale")
            && message.contains("schedule.rs/aggregate-to-tdset-operator"),
        "{message}"
    );

    // docs/trust-and-rbac.md's grant: a small ClusterRole with the aggregation label.
    let grant: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "tdset-operator-widgets", "labels": {"schedule.rs/aggregate-to-tdset-operator": "true"}},
        "rules": [{"apiGroups": ["test.schedule.rs"], "resources": ["widgets/scale"], "verbs": ["get", "patch"]}]
    }))
    .unwrap();
    roles
        .patch(
            "tdset-operator-widgets",
            &PatchParams::apply("tdset-tests").force(),
            &Patch::Apply(&grant),
        )
        .await
        .unwrap();
    widget_at(&widget_api, 4).await;
    let _ = roles
        .delete("tdset-operator-widgets", &DeleteParams::default())
        .await;
    op.stop().await;
    let _ = std::fs::remove_file(path);
    ns.cleanup().await;
}
