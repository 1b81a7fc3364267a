//! deploy/ on the real API server: everything applies with `kubectl apply -k` and the operator
//! works under the ServiceAccount's own identity. (deploy/ is the Helm chart rendered: its RBAC
//! is checked for wildcards in tests/helm.rs.)

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::{Api, PostParams};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::LeaseOptions;

fn apply_deploy_dir() {
    let out = kubectl(&["apply", "-k", repo_root().join("deploy").to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn deploy_dir_applies_and_the_operator_works_as_its_service_account() {
    let client = client().await;
    install_crd(&client).await;
    apply_deploy_dir();
    // Idempotent: a second apply changes nothing. kubectl says "configured" for a
    // PodDisruptionBudget and a ValidatingAdmissionPolicy every time (it always sends fields
    // whose patch strategy is "replace"); for those the object's generation says whether the
    // apply changed its spec.
    let generations = || -> std::collections::BTreeMap<String, String> {
        let out = kubectl(&[
            "get",
            "-k",
            repo_root().join("deploy").to_str().unwrap(),
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.generation}{\"\\n\"}{end}",
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, g)| (k.to_lowercase(), g.to_string()))
            .collect()
    };
    let before = generations();
    let again = kubectl(&["apply", "-k", repo_root().join("deploy").to_str().unwrap()]);
    let after = generations();
    let text = String::from_utf8_lossy(&again.stdout);
    for line in text.lines().filter(|l| !l.ends_with("unchanged")) {
        let (object, _) = line.split_once(' ').unwrap_or((line, ""));
        let (kind, name) = object.split_once('/').unwrap_or((object, ""));
        let kind = kind.split('.').next().unwrap_or(kind);
        let key = format!("{kind}/{name}");
        assert!(
            matches!(kind, "poddisruptionbudget" | "validatingadmissionpolicy"),
            "{text}"
        );
        assert!(
            before.get(&key).is_some_and(|g| !g.is_empty()) && before.get(&key) == after.get(&key),
            "{key}: generation {:?} before the second apply, {:?} after",
            before.get(&key),
            after.get(&key)
        );
    }

    // A kubeconfig carrying the ServiceAccount's token instead of the admin certificate.
    let (sa_client, path) = service_account_client("tdset-system", "tdset-operator").await;

    let ns = TestNamespace::new(&client, "rbac").await;
    // Permissions come from the ClusterRole and the leader-election Role, as deployed. The watch
    // is limited to the test's namespace so it cannot fight the other tests' operators.
    let lease = LeaseOptions {
        name: format!("rbac-test-{}", unique_suffix()),
        namespace: "tdset-system".into(),
        duration: std::time::Duration::from_secs(10),
        shard_selector: None,
    };
    let op = Operator::start(
        &sa_client,
        &ns.name,
        SystemClock::default(),
        Some(lease),
        "rbac-test",
    );
    let t: TDSet = serde_json::from_value(json!({
        "apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": "web"},
        "spec": {"container": {"image": "nginx", "port": 80}, "service": {"port": 80},
                 "schedulingConfig": [{"startTime": 0, "endTime": 12, "replica": 2}, {"startTime": 12, "endTime": 0, "replica": 3}],
                 "defaultReplica": 1}
    }))
    .unwrap();
    Api::<TDSet>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        Duration::from_secs(60),
        "Deployment created by the ServiceAccount",
        || async { deploys.get_opt("web").await.ok().flatten() },
    )
    .await;
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        Duration::from_secs(60),
        "status written by the ServiceAccount",
        || async {
            tdsets
                .get("web")
                .await
                .ok()
                .filter(|t| t.status.as_ref().is_some_and(|s| s.replicas.is_some()))
        },
    )
    .await;
    wait_for_event(&client, &ns.name, "web", |(_, r, _)| r == "Created").await;
    // The group form, as deployed: its StatefulSet patch comes from tdset-operator-group-form.
    let _: StatefulSet = create_object(
        &client,
        &ns.name,
        json!({
            "metadata": {"name": "db", "labels": {"app": "db", "env": "dev"}},
            "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": "redis:7"}]}}}
        }),
    )
    .await;
    let night: TDSet = serde_json::from_value(json!({
        "apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": "night"},
        "spec": {"scaleTargetSelector": {"kinds": ["StatefulSet"], "selector": {"matchLabels": {"env": "dev"}}},
                 "schedulingConfig": [], "defaultReplica": 0}
    }))
    .unwrap();
    tdsets.create(&PostParams::default(), &night).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    eventually(Duration::from_secs(60), "StatefulSet db asleep", || async {
        let db = sets.get("db").await.ok()?;
        (db.spec.as_ref()?.replicas == Some(0)).then_some(())
    })
    .await;
    assert_eq!(
        op.counter("tdset_reconcile_errors_total"),
        0.0,
        "RBAC denied something: {}",
        op.metrics.render()
    );
    op.stop().await;
    let _ = std::fs::remove_file(path);
    ns.cleanup().await;
}
