//! The one TDSet builder, and the objects tests create, read and refuse.

use super::*;

/// Changes a TDSet's `spec.container` (a merge patch, as `kubectl patch` would).
pub async fn set_container(
    tdsets: &Api<tdset_operator::api::TDSet>,
    name: &str,
    image: &str,
    port: i32,
) {
    tdsets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"container": {"image": image, "port": port}}}),
            ),
        )
        .await
        .expect("patching spec.container");
}

pub fn utc(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .expect("an RFC 3339 time")
        .with_timezone(&chrono::Utc)
}

/// The one TDSet builder: a TDSet named `name` with the given spec (as JSON).
pub fn tdset(name: &str, spec: serde_json::Value) -> tdset_operator::api::TDSet {
    serde_json::from_value(serde_json::json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": name}, "spec": spec}))
        .expect("test TDSet")
}

pub async fn create_tdset(
    client: &Client,
    ns: &str,
    t: &tdset_operator::api::TDSet,
) -> tdset_operator::api::TDSet {
    Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), t)
        .await
        .expect("creating TDSet")
}

/// Any namespaced object, created as is (the way Helm or GitOps would have created it).
pub async fn create_object<K>(client: &Client, ns: &str, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("test object");
    Api::<K>::namespaced(client.clone(), ns)
        .create(
            &PostParams {
                field_manager: Some("helm".into()),
                ..PostParams::default()
            },
            &object,
        )
        .await
        .expect("creating test object")
}

/// A Deployment of someone else's (as Helm or GitOps would have created it), as JSON.
pub fn app_deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name, "team": "payments"}, "annotations": {"owner": "gitops"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}]}}}
    })
}

/// HPA `name` over Deployment `target`, `min..max` replicas on CPU.
pub fn hpa(name: &str, target: &str, min: i32, max: i32) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "minReplicas": min, "maxReplicas": max,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}
    })
}

/// Deletes TDSet `name` and waits until it is gone (its finalizer done).
pub async fn delete_tdset_and_wait(client: &Client, ns: &str, name: &str) {
    Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting the TDSet");
    tdset_gone(client, ns, name).await;
}

/// The condition of `type_` on a TDSet, if its status has one.
pub fn condition<'a>(
    t: &'a tdset_operator::api::TDSet,
    type_: &str,
) -> Option<&'a tdset_operator::api::Condition> {
    t.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// A Deployment's `spec.replicas`.
pub fn replicas(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

/// A small CRD with a scale subresource, like an Argo Rollout.
pub async fn install_widget_crd(client: &Client) -> kube::api::ApiResource {
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.schedule.rs"},
        "spec": {"group": "test.schedule.rs", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                         "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}}]}
    }))
    .unwrap();
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        "widgets.test.schedule.rs",
        &kube::api::PatchParams::apply("tdset-tests").force(),
        &kube::api::Patch::Apply(&crd),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        GUARD,
        kube::runtime::wait::await_condition(
            api,
            "widgets.test.schedule.rs",
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("test.schedule.rs", "v1", "Widget"),
        "widgets",
    )
}

/// KEDA's ScaledObject kind (`keda.sh/v1alpha1`), as KEDA's own CRDs define it.
pub async fn install_scaled_object_crd(client: &Client) {
    install_keda_crds(client).await;
}

/// A KEDA ScaledObject `name` over Deployment `target` (nothing acts on it: KEDA does not
/// run), and the ownerReference KEDA puts on the HPA it makes for it.
pub async fn scaled_object(
    client: &Client,
    ns: &str,
    name: &str,
    target: &str,
) -> serde_json::Value {
    install_scaled_object_crd(client).await;
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    );
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"name": target}, "minReplicaCount": 2, "maxReplicaCount": 10,
                 "triggers": [never_active_cron()]}
    }))
    .expect("a ScaledObject");
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .expect("creating the ScaledObject");
    serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": name,
        "uid": created.metadata.uid, "controller": true, "blockOwnerDeletion": true
    })
}

/// A KEDA trigger that needs no external system and is never active (the first minutes of a
/// year): KEDA holds its workload at its `minReplicaCount`.
pub fn never_active_cron() -> serde_json::Value {
    serde_json::json!({"type": "cron", "metadata": {
        "timezone": "UTC", "start": "0 3 1 1 *", "end": "5 3 1 1 *", "desiredReplicas": "5"}})
}

/// Refuses a scale of Deployments in `ns` to `replicas`, as an admission policy would.
pub struct RefuseScale {
    client: kube::Client,
    name: String,
    ns: String,
    replicas: i32,
}

impl RefuseScale {
    pub async fn new(client: &kube::Client, ns: &str, replicas: i32) -> RefuseScale {
        let name = format!("refuse-scale-{}", unique_suffix());
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["deployments", "deployments/scale"]
                }]},
                "validations": [{
                    "expression": format!("!has(object.spec.replicas) || object.spec.replicas != {replicas}"),
                    "message": format!("the test refuses {replicas} replicas")
                }]
            }
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
            }
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("creating the policy");
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("creating the binding");
        // The API server takes policies up asynchronously: a dry-run scale of a Deployment of
        // no replicas (no pods, selected by no test's TDSet) says when this one is in force.
        let probe = format!("{name}-probe");
        let _: k8s_openapi::api::apps::v1::Deployment =
            create_object(client, ns, app_deployment(&probe, 0)).await;
        let refuse = RefuseScale {
            client: client.clone(),
            name,
            ns: ns.to_string(),
            replicas,
        };
        eventually(GUARD, "the admission policy in force", || async {
            refuse.probe().await.is_err().then_some(())
        })
        .await;
        refuse
    }

    /// A dry-run scale of the probe (a Deployment of no replicas no test selects) to the
    /// refused count: refused while the policy is in force.
    async fn probe(&self) -> kube::Result<k8s_openapi::api::apps::v1::Deployment> {
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.client.clone(), &self.ns);
        let dry_run = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let patch = serde_json::json!({"spec": {"replicas": self.replicas}});
        let probe = format!("{}-probe", self.name);
        deployments
            .patch(&probe, &dry_run, &Patch::Merge(&patch))
            .await
    }

    pub async fn lift(&self) {
        let _ = Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        // Taken down as asynchronously as it was taken up: a test that goes on at once would
        // see refusals a while longer, each one more failure to back off from.
        eventually(GUARD, "the admission policy lifted", || async {
            self.probe().await.is_ok().then_some(())
        })
        .await;
    }
}

/// Whether the operator's slices for a Service put nothing in its path: none left, or each
/// retired (emptied, and kept a while so that its proxy ports are not handed out again while
/// the proxy may still route them).
pub fn out_of_the_path(slices: &[k8s_openapi::api::discovery::v1::EndpointSlice]) -> bool {
    slices.iter().all(|s| {
        s.endpoints.is_empty()
            && s.metadata.annotations.as_ref().is_some_and(|a| {
                a.contains_key(tdset_operator::workload::intercept::RETIRED_ANNOTATION)
            })
    })
}

/// The CRDs of `file` (cached by `scripts/control-plane.sh install`), applied server-side under
/// one field manager (every test that needs them applies the same, so none takes another's
/// schema away), once `crd` is established and its kind served in `group_version`.
pub async fn install_crds_from(client: &Client, file: &Path, crd: &str, group_version: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    assert!(
        file.exists(),
        "no CRDs at {}; run: scripts/control-plane.sh install",
        file.display()
    );
    let path = file.to_string_lossy().to_string();
    succeeded(
        "applying CRDs",
        kubectl_at(
            &control_plane().kubeconfig,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=tdset-tests",
                "-f",
                &path,
            ],
        ),
    );
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    tokio::time::timeout(
        GUARD,
        kube::runtime::wait::await_condition(
            api,
            crd,
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the CRD established")
    .expect("watching the CRD");
    // Established is not yet served: the API server's discovery follows a moment later, and a
    // client started before it does fails ("no matches for kind": KEDA's webhooks, on a cold
    // run's first KEDA test on a busy machine).
    let (plural, group) = crd.split_once('.').expect("a CRD's name: plural.group");
    let version = group_version.rsplit('/').next().unwrap_or_default();
    eventually(GUARD, "the CRD's kind served in discovery", || async {
        let groups = client.list_api_groups().await.ok()?;
        let listed = (groups.groups.iter())
            .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version));
        let resources = client.list_api_group_resources(group_version).await.ok()?;
        (listed && resources.resources.iter().any(|r| r.name == plural)).then_some(())
    })
    .await;
}

/// Istio's CRDs (from the istio.io/api module's manifest, `scripts/control-plane.sh install`):
/// its PeerAuthentication served, nothing of Istio running.
pub async fn install_istio_crds(client: &Client) {
    let out = Command::new(script())
        .arg("istio-crds-dir")
        .output()
        .expect("running scripts/control-plane.sh istio-crds-dir");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let file = dir.join("istio-crds.yaml");
    install_crds_from(
        client,
        &file,
        "peerauthentications.security.istio.io",
        "security.istio.io/v1",
    )
    .await;
}
