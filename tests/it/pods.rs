//! Pods that run, as far as the API is concerned: kube-scheduler binds them to kwok's fake
//! nodes and kwok makes them Running and Ready, so Deployments report available replicas
//! and a TDSet can be `Available` for real.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

async fn ready_pods(client: &Client, ns: &str, selector: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_deployments_pods_become_ready_on_the_fake_nodes() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "pods-ready").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 2)).await;
    let d = object_where(
        &client,
        &ns.name,
        "web",
        "2 ready replicas",
        |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2),
    )
    .await;
    assert_eq!(d.status.unwrap().available_replicas, Some(2));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    for p in &pods.items {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(node.starts_with("kwok-node-"), "pod bound to {node:?}");
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }
    ns.cleanup().await;
}

#[tokio::test]
async fn a_tdset_is_available_when_its_replicas_are_ready_and_scaling_down_removes_pods() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "pods-tdset").await;
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"name": "office", "startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 20, "endTime": 22, "replica": 0}],
        "defaultReplica": 1,
        "intervalMint": 60
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    // Two seconds before 17:00: 3 ready now, then down to 1 at the boundary.
    let clock = SystemClock::starting_at(utc("2026-05-01T16:59:56Z"));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    let t = object_where(
        &client,
        &ns.name,
        "web",
        "Available with 3 ready",
        |t: &TDSet| {
            condition(t, "Available")
                .is_some_and(|c| c.status == "True" && c.reason == "ReplicasReady")
                && t.status
                    .as_ref()
                    .is_some_and(|s| s.ready_replicas == Some(3))
        },
    )
    .await;
    let s = t.status.unwrap();
    assert_eq!(s.ready_replicas, s.desired_replicas, "READY equals DESIRED");
    assert_eq!(
        ready_pods(&client, &ns.name, "schedule.rs/tdset=web").await,
        3
    );

    // After 17:00 the Deployment goes to 1 and its extra pods go away.
    deployment_at(&client, &ns.name, "web", 1).await;
    eventually(GUARD, "pods scaled down to 1", || async {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default().labels("schedule.rs/tdset=web"))
            .await
            .ok()?;
        (pods.items.len() == 1).then_some(())
    })
    .await;
    object_where(
        &client,
        &ns.name,
        "web",
        "Available again with 1 ready",
        |t: &TDSet| {
            condition(t, "Available").is_some_and(|c| c.status == "True")
                && t.status
                    .as_ref()
                    .is_some_and(|s| s.ready_replicas == Some(1) && s.desired_replicas == Some(1))
        },
    )
    .await;
    op.stop().await;

    // A window of 0: ScaledToZero, and no pods.
    let op = Operator::start(
        &client,
        &ns.name,
        SystemClock::starting_at(utc("2026-05-01T21:00:00Z")),
        None,
        "test",
    );
    tdset_with_reason(&client, &ns.name, "web", "Available", "ScaledToZero").await;
    eventually(GUARD, "no pods at 0", || async {
        (ready_pods(&client, &ns.name, "schedule.rs/tdset=web").await == 0).then_some(())
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}
