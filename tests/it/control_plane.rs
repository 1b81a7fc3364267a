//! The control plane the tests run on is a real one: kube-controller-manager reconciles
//! Deployments, the garbage collector follows ownerReferences, CRDs become Established.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const LIMIT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn controller_manager_creates_replicasets_for_deployments() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-deploy").await;
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns.name);
    let rs = eventually(LIMIT, "a ReplicaSet for Deployment web", || async {
        rss.list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
    assert_eq!(rs.spec.unwrap().replicas, Some(2));
    ns.cleanup().await;
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_of_a_deleted_owner() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cp-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owner: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
    let dependent: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {
        "name": "dependent",
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.unwrap(), "controller": true, "blockOwnerDeletion": true
        }]
    }}))
    .unwrap();
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        LIMIT,
        "the garbage collector to delete the dependent",
        || async {
            match cms.get_opt("dependent").await {
                Ok(None) => Some(()),
                _ => None,
            }
        },
    )
    .await;
    ns.cleanup().await;
}

#[tokio::test]
async fn crds_become_established_and_serve_tdsets_and_tdcalendars() {
    let client = client().await;
    install_crd(&client).await;
    let out = kubectl(&["api-resources", "--api-group=schedule.rs", "-o", "name"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tdcalendars.schedule.rs\ntdsets.schedule.rs"
    );
    let version = kubectl(&["version", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&version.stdout).unwrap();
    assert_eq!(
        v["serverVersion"]["gitVersion"], "v1.36.3",
        "the API server reports its real version"
    );
}
