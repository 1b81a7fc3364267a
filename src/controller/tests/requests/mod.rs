//! What one reconcile sends, request by request, for each form.

use std::time::Duration;

use serde_json::{Value, json};

use super::{ApiServer, Operator, Sent, api_groups, echo, patched, status};
use crate::api::TDSet;

mod group;
mod keda;
mod owned;
mod target;
mod wake;

const NOW: &str = "2026-11-26T10:00:00Z";
const TDSETS: &str = "/apis/schedule.rs/v1/namespaces/ns/tdsets";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/ns/deployments";
const HPAS: &str = "/apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers";

/// TDSet `t` in namespace `ns` with `spec` (no windows unless it says: `defaultReplica`
/// all day), as the cache holds it, no status yet.
fn tdset(mut spec: Value) -> TDSet {
    if spec.get("schedulingConfig").is_none() {
        spec["schedulingConfig"] = json!([]);
    }
    serde_json::from_value(json!({
        "apiVersion": "schedule.rs/v1",
        "kind": "TDSet",
        "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "resourceVersion": "1",
                     "generation": 1, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": spec,
    }))
    .unwrap()
}

/// Deployment `web` of another owner, running `replicas`.
fn web(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web", "resourceVersion": "10",
                     "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        "status": {"replicas": replicas, "readyReplicas": replicas},
    })
}

/// What discovery reads of `apps/v1`: Deployments, with `/scale`.
fn apps_v1() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
        "resources": [
            {"name": "deployments", "singularName": "deployment", "namespaced": true,
             "kind": "Deployment", "verbs": ["get", "list", "watch", "patch"]},
            {"name": "deployments/scale", "singularName": "", "namespaced": true,
             "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch"]},
        ],
    })
}

/// The `/scale` of Deployment `web` after a write of `replicas`.
fn scale(replicas: i64, resource_version: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web",
                     "resourceVersion": resource_version},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    })
}

/// A Deployment as the API server creates it from `body`.
fn created(body: &Value) -> Value {
    let mut created = body.clone();
    created["metadata"]["uid"] = json!("uid-d");
    created["metadata"]["resourceVersion"] = json!("2");
    created
}

/// The write to Deployment `web`'s `/scale` among `sent` (`what`: the failure's words).
fn web_scale_write<'a>(sent: &'a [super::Sent], what: &str) -> &'a super::Sent {
    (sent.iter())
        .find(|s| s.path.ends_with("/deployments/web/scale"))
        .expect(what)
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// A list of `items` of `kind`, as the API server answers a list.
fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "30"},
           "items": items})
}

/// The namespace has no StatefulSets, CronJobs or HPAs, as a group lists them.
fn no_other_workloads(server: &ApiServer) {
    for kind in ["statefulsets", "cronjobs"] {
        let group = if kind == "cronjobs" { "batch" } else { "apps" };
        let path = format!("/apis/{group}/v1/namespaces/ns/{kind}");
        server.lists(&path, "", list("List", vec![]));
    }
    server.lists(HPAS, "", list("HorizontalPodAutoscaler", vec![]));
}

/// Deployment `name` of the dev environment, running `replicas`.
fn dev(name: &str, replicas: i32, resource_version: &str) -> Value {
    let mut d = web(replicas);
    d["metadata"]["name"] = json!(name);
    d["metadata"]["uid"] = json!(format!("uid-{name}"));
    d["metadata"]["resourceVersion"] = json!(resource_version);
    d["metadata"]["labels"] = json!({"env": "dev"});
    d
}

fn tdset_created(at: &str) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    serde_json::from_value(json!(at)).unwrap()
}
