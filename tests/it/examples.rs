//! Every manifest under examples/ applied to the real API server; the operator, run at two
//! instants, sets exactly the replicas `preview` computes for them.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

#[tokio::test]
async fn examples_apply_and_converge_to_preview() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "examples").await;
    let _ = kubectl(&["create", "namespace", "temp"]);
    let mut examples: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 8, "{examples:?}");

    // The shared calendars first (cluster-scoped); each TDSet's schedule is compiled with them,
    // as `preview --calendar` does.
    let calendar_dir = repo_root().join("examples/calendars");
    let out = kubectl(&["apply", "-f", calendar_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calendars: Vec<_> = std::fs::read_dir(&calendar_dir)
        .unwrap()
        .map(|e| {
            tdset_operator::preview::load_calendar(e.unwrap().path().to_str().unwrap()).unwrap()
        })
        .collect();

    // (path, namespace, name, schedule)
    let mut applied = Vec::new();
    for path in &examples {
        let (tdset, _) = tdset_operator::preview::load_manifest(path.to_str().unwrap()).unwrap();
        let (schedule, missing) = tdset_operator::preview::compile(
            path.to_str().unwrap(),
            &tdset,
            &calendars,
            &Default::default(),
        )
        .unwrap();
        assert!(
            missing.is_empty(),
            "{}: no calendar {missing:?} in examples/calendars",
            path.display()
        );
        // The seed names its namespace; the others go where they are applied.
        let target = tdset
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| ns.name.clone());
        let out = kubectl(&["apply", "-n", &target, "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        applied.push((
            path.clone(),
            target,
            tdset.metadata.name.clone().unwrap(),
            schedule,
        ));
    }

    // Referenced targets exist before the operator looks: a Deployment "deployed by Helm" for
    // each scaleTargetRef, and behind an HPA its Deployment too; for a group, one Deployment
    // its selector matches (named after the TDSet, 2 replicas of its own).
    for (path, target_ns, _, _) in &applied {
        let (tdset, _) = tdset_operator::preview::load_manifest(path.to_str().unwrap()).unwrap();
        if let Some(sel) = &tdset.spec.scale_target_selector {
            let mut d = app_deployment(
                &format!("{}-member", tdset.metadata.name.clone().unwrap()),
                2,
            );
            for (k, v) in sel.selector.match_labels.clone().unwrap_or_default() {
                d["metadata"]["labels"][k] = json!(v);
            }
            let _: Deployment = create_object(&client, target_ns, d).await;
        }
        let Some(r) = tdset.spec.scale_target_ref else {
            continue;
        };
        let workload = if r.is_hpa() {
            format!("{}-workload", r.name)
        } else {
            r.name.clone()
        };
        let _: Deployment = create_object(
            &client,
            target_ns,
            json!({
                "metadata": {"name": workload},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": workload}},
                         "template": {"metadata": {"labels": {"app": workload}},
                                      "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
            }),
        )
        .await;
        if r.is_hpa() {
            let _: HorizontalPodAutoscaler = create_object(&client, target_ns, json!({
                "metadata": {"name": r.name},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload},
                         "minReplicas": 1, "maxReplicas": 20}
            }))
            .await;
        }
    }

    // A weekday morning in Europe, then a night in New York.
    for at in [utc("2026-05-06T10:00:00Z"), utc("2026-05-07T03:00:00Z")] {
        let mut operators = Vec::new();
        for target in [ns.name.as_str(), "temp"] {
            operators.push(Operator::start(
                &client,
                target,
                SystemClock::starting_at(at),
                None,
                "examples",
            ));
        }
        for (path, target, name, schedule) in &applied {
            let (tdset, _) =
                tdset_operator::preview::load_manifest(path.to_str().unwrap()).unwrap();
            // A group's member runs its own 2 at the level own.
            let want = (schedule
                .evaluate_led(at, tdset_operator::schedule::lead_of(&tdset.spec, &[]))
                .count())
            .replicas()
            .unwrap_or(2);
            let what = format!("{} at {at}: {want} replicas", path.display());
            if tdset.spec.scale_target_selector.is_some() {
                let member = format!("{name}-member");
                object_where(&client, target, &member, &what, |d: &Deployment| {
                    replicas(d) == Some(want)
                })
                .await;
                continue;
            }
            match tdset.spec.scale_target_ref {
                // The floor of an HPA (a floor of 0 would be its workload at 0).
                Some(r) if r.is_hpa() && want > 0 => {
                    object_where(
                        &client,
                        target,
                        &r.name,
                        &what,
                        |h: &HorizontalPodAutoscaler| {
                            h.spec.as_ref().and_then(|s| s.min_replicas) == Some(want)
                        },
                    )
                    .await;
                }
                Some(r) if r.is_hpa() => {
                    let workload = format!("{}-workload", r.name);
                    object_where(&client, target, &workload, &what, |d: &Deployment| {
                        replicas(d) == Some(0)
                    })
                    .await;
                }
                Some(r) => {
                    object_where(&client, target, &r.name, &what, |d: &Deployment| {
                        replicas(d) == Some(want)
                    })
                    .await;
                }
                None => {
                    object_where(&client, target, name, &what, |d: &Deployment| {
                        replicas(d) == Some(want)
                    })
                    .await;
                }
            }
        }
        if at == utc("2026-05-07T03:00:00Z") {
            // While an operator runs: onDelete: Restore gives the Deployment its 2 back.
            let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
            tdsets
                .delete("shop-frontend-hours", &DeleteParams::default())
                .await
                .unwrap();
            // Restored to 2.
            deployment_at(&client, &ns.name, "shop-frontend", 2).await;
            tdset_gone(&client, &ns.name, "shop-frontend-hours").await;
        }
        for op in operators {
            op.stop().await;
        }
    }
    let svc = Api::<Service>::namespaced(client.clone(), &ns.name)
        .get("hello-with-service")
        .await
        .unwrap();
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 80);
    let seed = repo_root().join("examples/tdset_helloworld.yaml");
    let _ = kubectl(&["delete", "-f", seed.to_str().unwrap(), "--wait=false"]);
    ns.cleanup().await;
}
