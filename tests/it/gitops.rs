//! GitOps tools beside the operator, on the real API server: a second writer that sets the
//! count back by server-side apply under Argo CD's and Flux's field managers, with the marks
//! each puts on what it applies. The TDSet names the tool, its Application or Kustomization,
//! and the exact rule that makes it leave the field; `kubectl tdset doctor` prints it.

use std::time::Duration;

use crate::hardening::{at_noon, deployment_ref, noon};
use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;

/// Sets Deployment `name` back to 1 whenever it is not, by server-side apply under `manager`
/// (a tool's drift correction), until aborted.
fn drift_correction(
    client: &Client,
    ns: &str,
    name: &str,
    manager: &str,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let (name, manager) = (name.to_string(), manager.to_string());
    tokio::spawn(async move {
        loop {
            if let Ok(d) = api.get(&name).await
                && replicas(&d) != Some(1)
            {
                let _ = set_back(&api, &name, &manager).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// One drift correction: `spec.replicas: 1` applied under `manager`.
async fn set_back(api: &Api<Deployment>, name: &str, manager: &str) -> kube::Result<Deployment> {
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": name}, "spec": {"replicas": 1}});
    let params = PatchParams::apply(manager).force();
    api.patch(name, &params, &Patch::Apply(&body)).await
}

fn marked(name: &str, labels: Value, annotations: Value) -> Value {
    let mut d = app_deployment(name, 1);
    for (k, v) in labels.as_object().into_iter().flatten() {
        d["metadata"]["labels"][k] = v.clone();
    }
    for (k, v) in annotations.as_object().into_iter().flatten() {
        d["metadata"]["annotations"][k] = v.clone();
    }
    d
}

#[tokio::test]
async fn argo_cd_and_flux_setting_the_count_back_are_named_with_the_rule_each_needs() {
    let (client, ns) = setup("gitops").await;
    let n = &ns.name;
    let tracking = format!("shop:apps/Deployment:{n}/shop");
    let shop = marked(
        "shop",
        json!({}),
        json!({"argocd.argoproj.io/tracking-id": tracking}),
    );
    let flux_labels = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                             "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let api = marked("api", flux_labels, json!({}));
    let _: Deployment = create_object(&client, n, shop).await;
    let _: Deployment = create_object(&client, n, api).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    for name in ["shop", "api"] {
        let spec = at_noon(deployment_ref(name), 4, 1);
        create_tdset(&client, n, &tdset(name, spec)).await;
    }
    deployment_at(&client, n, "shop", 4).await;
    deployment_at(&client, n, "api", 4).await;

    // Before any fight, the doctor already sees who applies each workload.
    let dir = plugin_dir();
    let doctor = |name: &str| {
        let (ok, out, err) =
            kubectl_tdset(&dir, &["doctor", name, "-n", n, "--context", "tdset-local"]);
        assert!(ok, "{err}");
        out
    };
    let before = doctor("shop");
    assert!(
        before.contains("applied by Argo CD (Application shop)"),
        "{before}"
    );
    assert!(
        before.contains("managedFieldsManagers: [tdset-operator]"),
        "{before}"
    );

    let argo = drift_correction(&client, n, "shop", "argocd-controller");
    let flux = drift_correction(&client, n, "api", "kustomize-controller");
    let message = degraded_for(&client, n, "shop", "GitOpsConflict").await;
    for part in [
        "Argo CD (Application shop)",
        "field manager argocd-controller",
        "managedFieldsManagers: [tdset-operator]",
        "RespectIgnoreDifferences=true",
        &format!("kind: Deployment, name: shop, namespace: {n}"),
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    let message = degraded_for(&client, n, "api", "GitOpsConflict").await;
    for part in [
        "Flux (Kustomization flux-system/apps)",
        "add {paths: [\"/spec/replicas\"], target: {group: apps, kind: Deployment, name: api",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    for (name, tool) in [("shop", "Argo CD"), ("api", "Flux")] {
        wait_for_event(&client, n, name, |(ty, r, note)| {
            ty == "Warning" && r == "GitOpsConflict" && note.contains(tool)
        })
        .await;
    }
    argo.abort();
    flux.abort();
    // Each tool's correction last, so the doctor's read does not race the operator's revert
    // (held back 30 s or more once the fight is reported).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    set_back(&deployments, "shop", "argocd-controller")
        .await
        .unwrap();
    set_back(&deployments, "api", "kustomize-controller")
        .await
        .unwrap();

    // The doctor names the writer from managedFields, with the rule as YAML.
    let shop = doctor("shop");
    assert!(shop.contains("Degraded (GitOpsConflict)"), "{shop}");
    assert!(
        shop.contains("spec.replicas last set by argocd-controller"),
        "{shop}"
    );
    assert!(
        shop.contains("      - group: apps\n        kind: Deployment\n        name: shop\n"),
        "{shop}"
    );
    let api = doctor("api");
    assert!(
        api.contains("spec.replicas last set by kustomize-controller"),
        "{api}"
    );
    assert!(
        api.contains("    spec:\n      ignore:")
            && api.contains("      - paths: [\"/spec/replicas\"]"),
        "{api}"
    );
    // A read that finds the operator's own write on top (here: its field manager's, at the
    // schedule's count) still names the tool: the report does not flip to "another writer"
    // while the fight is remembered.
    let ours = PatchParams::apply("tdset-operator").force();
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "shop"}, "spec": {"replicas": 4}});
    deployments
        .patch("shop", &ours, &Patch::Apply(&body))
        .await
        .unwrap();
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let bumped = tdsets
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"intervalMint": 61}})),
        )
        .await
        .unwrap();
    let generation = bumped.metadata.generation;
    let t = eventually(
        GUARD,
        "the TDSet reconciled at its new generation",
        || async {
            let t = tdsets.get("shop").await.ok()?;
            (t.status.as_ref()?.observed_generation == generation).then_some(t)
        },
    )
    .await;
    let degraded = condition(&t, "Degraded").expect("a Degraded condition");
    assert_eq!(degraded.reason, "GitOpsConflict", "{degraded:?}");
    op.stop().await;
    ns.cleanup().await;
}
