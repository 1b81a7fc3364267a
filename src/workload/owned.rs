//! The objects a TDSet owns (with `container` or `template`), as pure functions of the TDSet
//! and the replica count: a Deployment, and a ClusterIP Service when `spec.service` is set.
//! Names are deterministic, so a restarted operator finds what it created before instead of
//! creating it again.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, LabelSelector, ManagedFieldsEntry, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::api::TDSet;
use crate::error::SpecError;
use crate::error::{Error, Result};
use crate::workload::quantity;

/// The server-side-apply field manager: every write the operator makes uses it.
pub const FIELD_MANAGER: &str = "tdset-operator";
/// Selector label linking the owned Deployment's pods (and the Service) to the TDSet.
pub const INSTANCE_LABEL: &str = "schedule.rs/tdset";
/// Set on every owned object; the operator's watches select on it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Set on a Deployment built from `spec.template`: its cache keeps the whole pod template
/// (a `container` Deployment's cache keeps only the container's image and ports).
pub const TEMPLATE_LABEL: &str = "schedule.rs/pod-template";
/// The container port name of the `container` form, and the port a Service looks for first.
pub const PORT_NAME: &str = "http";

/// 64-bit FNV-1a: tiny, and stable across Rust versions (std's hasher is not guaranteed to be).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Fits `name` into `max` characters of `[a-z0-9-]` (plus `.` when `allow_dot`), starting and
/// ending alphanumeric. Names that already fit are kept as they are; others are cut and given
/// a hash suffix of the full name, so two long names never collide on their common prefix.
fn sanitise(name: &str, max: usize, allow_dot: bool) -> String {
    let clean: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || (allow_dot && c == '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trim = |s: &str| {
        s.trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string()
    };
    let trimmed = trim(&clean);
    if trimmed == name && !trimmed.is_empty() && trimmed.len() <= max {
        return trimmed;
    }
    let suffix = format!("{:08x}", fnv1a(name) as u32);
    let head = trim(
        &trimmed
            .chars()
            .take(max - suffix.len() - 1)
            .collect::<String>(),
    );
    if head.is_empty() {
        format!("x-{suffix}")
    } else {
        format!("{head}-{suffix}")
    }
}

/// The TDSet's name as a label value (at most 63 characters).
pub fn instance_label_value(tdset_name: &str) -> String {
    sanitise(tdset_name, 63, true)
}

/// The container name: a DNS-1123 label (no dots, at most 63 characters).
pub fn container_name(tdset_name: &str) -> String {
    sanitise(tdset_name, 63, false)
}

fn labels(tdset_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (INSTANCE_LABEL.to_string(), instance_label_value(tdset_name)),
        (MANAGED_BY_LABEL.to_string(), FIELD_MANAGER.to_string()),
    ])
}

fn selector(tdset_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(INSTANCE_LABEL.to_string(), instance_label_value(tdset_name))])
}

/// The controller ownerReference to the TDSet; `None` until the TDSet has a uid.
/// blockOwnerDeletion: a foreground delete of the TDSet waits for its Deployment.
pub fn owner_reference(tdset: &TDSet) -> Option<OwnerReference> {
    tdset.controller_owner_ref(&()).map(|r| OwnerReference {
        block_owner_deletion: Some(true),
        ..r
    })
}

fn owned_meta(tdset: &TDSet) -> Result<ObjectMeta> {
    Ok(ObjectMeta {
        name: Some(tdset.name_any()),
        namespace: Some(
            tdset
                .namespace()
                .ok_or(Error::MissingField("metadata.namespace"))?,
        ),
        labels: Some(labels(&tdset.name_any())),
        owner_references: Some(vec![
            owner_reference(tdset).ok_or(Error::MissingField("metadata.uid"))?,
        ]),
        ..ObjectMeta::default()
    })
}

/// The Deployment the TDSet wants, with `replicas` from the schedule; `Ok(None)` when the
/// TDSet does not own a Deployment (it references a target instead).
pub fn desired_deployment(tdset: &TDSet, replicas: i32) -> Result<Option<Deployment>> {
    let name = tdset.name_any();
    let mut meta = owned_meta(tdset)?;
    let template = match (&tdset.spec.container, &tdset.spec.template) {
        (Some(c), _) => PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(&name)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: container_name(&name),
                    image: Some(c.image.clone()),
                    ports: Some(vec![ContainerPort {
                        name: Some(PORT_NAME.into()),
                        container_port: c.port,
                        protocol: Some("TCP".into()),
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        },
        (None, Some(t)) => {
            let mut t = PodTemplateSpec::clone(t);
            let m = t.metadata.get_or_insert_with(ObjectMeta::default);
            m.labels
                .get_or_insert_with(BTreeMap::new)
                .extend(labels(&name));
            if let Some(l) = meta.labels.as_mut() {
                l.insert(TEMPLATE_LABEL.into(), "full".into());
            }
            t
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Deployment {
        metadata: meta,
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector(&name)),
                ..LabelSelector::default()
            },
            template,
            ..DeploymentSpec::default()
        }),
        status: None,
    }))
}

/// The Service's target port: the `container` form's port; for a `template`, a container port
/// named `http` (by name, so it follows the pod), else the first container's first port.
pub fn service_target_port(tdset: &TDSet) -> Option<IntOrString> {
    if let Some(c) = &tdset.spec.container {
        return Some(IntOrString::Int(c.port));
    }
    let containers = &tdset.spec.template.as_ref()?.spec.as_ref()?.containers;
    let ports = |c: &Container| c.ports.clone().unwrap_or_default();
    if containers
        .iter()
        .flat_map(ports)
        .any(|p| p.name.as_deref() == Some(PORT_NAME))
    {
        return Some(IntOrString::String(PORT_NAME.into()));
    }
    let first = containers.first().map(ports)?.into_iter().next()?;
    Some(IntOrString::Int(first.container_port))
}

/// The Service the TDSet wants, if `spec.service` is set.
pub fn desired_service(tdset: &TDSet) -> Result<Option<Service>> {
    let Some(svc) = &tdset.spec.service else {
        return Ok(None);
    };
    let Some(target_port) = service_target_port(tdset) else {
        return Err(Error::InvalidSpec(vec![SpecError {
            field: "spec.service".into(),
            message: "the pod template has no container port to forward to; add a port (one named \"http\" is preferred) or remove spec.service".into(),
        }]));
    };
    Ok(Some(Service {
        metadata: owned_meta(tdset)?,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector(&tdset.name_any())),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: svc.port,
                target_port: Some(target_port),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }))
}

/// Whether the object is controlled by this TDSet (same uid), per its ownerReferences.
pub fn is_owned_by<K: Resource>(obj: &K, tdset: &TDSet) -> bool {
    let Some(uid) = tdset.meta().uid.as_deref() else {
        return false;
    };
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// True when every field the operator sets in `desired` already has that value in `observed`.
/// Fields only the server or other managers set (defaults, status, extra labels) are ignored,
/// so a steady state produces no write.
pub fn is_satisfied_by<K: serde::Serialize>(desired: &K, observed: &K) -> bool {
    match (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) {
        (Ok(d), Ok(o)) => subset(&d, &o),
        _ => false,
    }
}

/// The write that makes an owned object say what the TDSet wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnedWrite {
    /// It already does.
    None,
    /// Only `spec.replicas` differs: a server-side apply to `/scale`, which carries one field
    /// and costs the API server a fraction of an apply of the whole object (BENCHMARKS.md,
    /// "scale by write kind"): this is the write users wait for at a boundary.
    Scale(i32),
    /// Anything else: a server-side apply of the whole object.
    Apply,
}

/// Which write turns `observed` into `desired` (see [`OwnedWrite`]). Each object is
/// serialised once; this runs on every reconcile of an owned object.
pub fn owned_write<K: serde::Serialize>(desired: &K, observed: &K) -> OwnedWrite {
    let (Ok(d), Ok(o)) = (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) else {
        return OwnedWrite::Apply;
    };
    if subset(&d, &o) {
        return OwnedWrite::None;
    }
    let replicas = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .and_then(|r| i32::try_from(r).ok());
    match replicas {
        Some(r) if subset_but_replicas(d, &o) => OwnedWrite::Scale(r),
        _ => OwnedWrite::Apply,
    }
}

/// True when `observed` differs from `desired` at most in `spec.replicas`: a scale, which an
/// apply can make without removing anything.
pub fn only_replicas_differ<K: serde::Serialize>(desired: &K, observed: &K) -> bool {
    match (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) {
        (Ok(d), Ok(o)) => subset_but_replicas(d, &o),
        _ => false,
    }
}

/// `subset` with `spec.replicas` taken from `o`.
fn subset_but_replicas(mut d: Value, o: &Value) -> bool {
    if let Some(spec) = d.get_mut("spec").and_then(Value::as_object_mut) {
        match o.pointer("/spec/replicas") {
            Some(r) => spec.insert("replicas".into(), r.clone()),
            None => spec.remove("replicas"),
        };
    }
    subset(&d, o)
}

/// The managedFields of an object after handing our manager's *Update* entry over to its
/// *Apply* entry, or `None` when there is no such Update entry.
///
/// A create (POST) records the fields it set under an Update entry. Server-side apply removes
/// a field the applier stopped setting only if no other entry owns it, so while that entry
/// exists, an apply that changes a keyed list item (a port) leaves the old item behind. Merging
/// the entry's fields into our Apply entry makes the object look as if apply had set them all.
pub fn handed_over(fields: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
    let ours = |e: &ManagedFieldsEntry, op: &str| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some(op)
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    let update = fields.iter().position(|e| ours(e, "Update"))?;
    let mut out = fields.to_vec();
    let update = out.remove(update);
    match out
        .iter_mut()
        .find(|e| ours(e, "Apply") && e.api_version == update.api_version)
    {
        Some(apply) => {
            let mut merged = apply.fields_v1.take().map_or(Value::Null, |f| f.0);
            union(&mut merged, update.fields_v1.map_or(Value::Null, |f| f.0));
            apply.fields_v1 = Some(FieldsV1(merged));
        }
        None => out.push(ManagedFieldsEntry {
            operation: Some("Apply".into()),
            ..update
        }),
    }
    Some(out)
}

/// Merges the field set `more` into `into` (fieldsV1 is a trie of JSON objects).
fn union(into: &mut Value, more: Value) {
    match (into, more) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                union(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a @ Value::Null, b) => *a = b,
        _ => {}
    }
}

/// Whether every field set in `desired` has that value in `observed`. The API server omits
/// empty lists and maps and writes quantities in canonical form ("0.5" comes back as "500m"),
/// so an empty desired field is satisfied by its absence and equal quantities are equal.
fn subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d.iter().all(|(k, dv)| match o.get(k) {
            Some(ov) => subset(dv, ov),
            None => is_empty(dv),
        }),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(dv, ov)| subset(dv, ov))
        }
        (Value::String(d), Value::String(o)) if d != o => {
            matches!((quantity::parse(d), quantity::parse(o)), (Some(a), Some(b)) if a == b)
        }
        (d, o) => d == o,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_empty),
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{ContainerSpec, ServiceSpec as TdsService, TDSetSpec};

    /// The first container of a Deployment's pod template.
    pub(crate) fn container_mut(d: &mut Deployment) -> &mut Container {
        &mut d
            .spec
            .as_mut()
            .expect("spec")
            .template
            .spec
            .as_mut()
            .expect("pod spec")
            .containers[0]
    }

    pub(crate) fn tdset(name: &str) -> TDSet {
        let mut t = TDSet::new(
            name,
            TDSetSpec {
                container: Some(ContainerSpec {
                    image: "nginx:1.27".into(),
                    port: 8080,
                }),
                template: None,
                scale_target_ref: None,
                on_delete: None,
                service: Some(TdsService { port: 80 }),
                scheduling_config: vec![],
                default_replica: Some(2),
                interval_mint: None,
                time_zone: None,
                ..TDSetSpec::default()
            },
        );
        t.metadata.namespace = Some("ns".into());
        t.metadata.uid = Some("uid-1".into());
        t
    }

    #[test]
    fn names_are_kept_when_valid_and_sanitised_deterministically_when_not() {
        assert_eq!(container_name("web"), "web");
        assert_eq!(container_name("web.v2"), container_name("web.v2"));
        let c = container_name("web.v2");
        assert!(c.starts_with("web-v2-") && !c.contains('.'), "{c}");
        let long = "a".repeat(100) + ".example.com";
        let v = instance_label_value(&long);
        assert!(
            v.len() <= 63 && v.chars().last().unwrap().is_ascii_alphanumeric(),
            "{v}"
        );
        assert_ne!(
            instance_label_value(&("a".repeat(70) + "x")),
            instance_label_value(&("a".repeat(70) + "y"))
        );
        assert_eq!(
            instance_label_value("tdset-hello-world"),
            "tdset-hello-world"
        );
    }

    #[test]
    fn deployment_carries_owner_replicas_image_and_port() {
        let d = desired_deployment(&tdset("web"), 5).unwrap().unwrap();
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TDSet", "uid-1")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(5));
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8080);
    }

    #[test]
    fn satisfied_ignores_server_defaults_but_not_our_fields() {
        let t = tdset("web");
        let desired = desired_deployment(&t, 3).unwrap().unwrap();
        let mut observed = desired.clone();
        observed.metadata.resource_version = Some("42".into());
        observed.spec.as_mut().unwrap().revision_history_limit = Some(10);
        assert!(is_satisfied_by(&desired, &observed));
        observed.spec.as_mut().unwrap().replicas = Some(7);
        assert!(!is_satisfied_by(&desired, &observed));
        let mut observed = desired.clone();
        container_mut(&mut observed).image = Some("evil".into());
        assert!(!is_satisfied_by(&desired, &observed));
    }

    #[test]
    fn a_scale_is_told_apart_from_other_drift() {
        let t = tdset("web");
        let desired = desired_deployment(&t, 3).unwrap().unwrap();
        let mut observed = desired.clone();
        observed.spec.as_mut().unwrap().replicas = Some(7);
        assert!(only_replicas_differ(&desired, &observed));
        observed.spec.as_mut().unwrap().replicas = None;
        assert!(only_replicas_differ(&desired, &observed));
        container_mut(&mut observed).ports.as_mut().unwrap()[0].container_port = 9090;
        assert!(!only_replicas_differ(&desired, &observed));
        let svc = desired_service(&t).unwrap().unwrap();
        let mut other = svc.clone();
        other.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert!(!only_replicas_differ(&svc, &other));
    }

    #[test]
    fn a_scale_goes_to_the_scale_subresource_and_anything_else_is_a_whole_apply() {
        let t = tdset("web");
        let desired = desired_deployment(&t, 3).unwrap().unwrap();
        let mut observed = desired.clone();
        observed.status = Some(Default::default());
        assert_eq!(owned_write(&desired, &observed), OwnedWrite::None);
        observed.spec.as_mut().unwrap().replicas = Some(7);
        assert_eq!(owned_write(&desired, &observed), OwnedWrite::Scale(3));
        // Scaled by someone else *and* a changed image: the scale alone would leave the image.
        container_mut(&mut observed).image = Some("nginx:1.26".into());
        assert_eq!(owned_write(&desired, &observed), OwnedWrite::Apply);
        let mut observed = desired.clone();
        container_mut(&mut observed).image = Some("nginx:1.26".into());
        assert_eq!(owned_write(&desired, &observed), OwnedWrite::Apply);
        // A Service has no replicas: any drift is a whole apply.
        let svc = desired_service(&t).unwrap().unwrap();
        let mut other = svc.clone();
        other.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert_eq!(owned_write(&svc, &other), OwnedWrite::Apply);
        assert_eq!(owned_write(&svc, &svc), OwnedWrite::None);
    }

    fn entry(manager: &str, op: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(op.into()),
            api_version: Some("apps/v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    #[test]
    fn hand_over_renames_or_merges_our_update_entry_and_leaves_others_alone() {
        let kcm = ManagedFieldsEntry {
            subresource: Some("status".into()),
            ..entry("kube-controller-manager", "Update", json!({"f:status": {}}))
        };
        let created = entry(
            FIELD_MANAGER,
            "Update",
            json!({"f:spec": {"f:replicas": {}, "f:ports": {"k:8080": {}}}}),
        );
        assert_eq!(handed_over(std::slice::from_ref(&kcm)), None);

        // Only created: the entry becomes our Apply entry.
        let out = handed_over(&[created.clone(), kcm.clone()]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], kcm);
        assert_eq!(out[1].operation.as_deref(), Some("Apply"));
        assert_eq!(out[1].fields_v1, created.fields_v1);

        // Created, then applied (a scale): the fields are merged into the Apply entry.
        let applied = entry(
            FIELD_MANAGER,
            "Apply",
            json!({"f:spec": {"f:replicas": {}, "f:image": {}}}),
        );
        let out = handed_over(&[created, kcm.clone(), applied]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], kcm);
        assert_eq!(
            out[1].fields_v1.as_ref().unwrap().0,
            json!({"f:spec": {"f:replicas": {}, "f:image": {}, "f:ports": {"k:8080": {}}}})
        );
    }

    #[test]
    fn service_only_with_spec_service() {
        let mut t = tdset("web");
        let s = desired_service(&t).unwrap().unwrap();
        let port = &s.spec.unwrap().ports.unwrap()[0];
        assert_eq!(
            (port.port, port.target_port.clone()),
            (80, Some(IntOrString::Int(8080)))
        );
        t.spec.service = None;
        assert!(desired_service(&t).unwrap().is_none());
    }

    fn with_template(template: serde_json::Value) -> TDSet {
        let mut t = tdset("web");
        t.spec.container = None;
        t.spec.template = Some(serde_json::from_value(template).unwrap());
        t
    }

    #[test]
    fn a_template_keeps_its_fields_and_gains_the_selector_label() {
        let t = with_template(json!({
            "metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}},
            "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}]}]}
        }));
        let d = desired_deployment(&t, 3).unwrap().unwrap();
        assert_eq!(d.metadata.labels.as_ref().unwrap()[TEMPLATE_LABEL], "full");
        let spec = d.spec.unwrap();
        let meta = spec.template.metadata.unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[INSTANCE_LABEL], "web");
        assert_eq!(meta.annotations.unwrap()["x"], "y");
        assert_eq!(spec.selector.match_labels.unwrap()[INSTANCE_LABEL], "web");
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!(c.env.as_ref().unwrap()[0].name, "A");
        // A referenced target owns no Deployment.
        let mut r = t.clone();
        r.spec.template = None;
        assert!(desired_deployment(&r, 3).unwrap().is_none());
    }

    #[test]
    fn the_service_forwards_to_the_http_port_or_else_the_first_port() {
        let named = with_template(json!({"spec": {"containers": [
            {"name": "side", "image": "x", "ports": [{"containerPort": 9000}]},
            {"name": "app", "image": "y", "ports": [{"name": "http", "containerPort": 8080}]}
        ]}}));
        assert_eq!(
            service_target_port(&named),
            Some(IntOrString::String("http".into()))
        );
        let first = with_template(json!({"spec": {"containers": [
            {"name": "app", "image": "y", "ports": [{"containerPort": 7000}, {"containerPort": 7001}]}
        ]}}));
        assert_eq!(service_target_port(&first), Some(IntOrString::Int(7000)));
        let none = with_template(json!({"spec": {"containers": [{"name": "app", "image": "y"}]}}));
        let err = desired_service(&none).unwrap_err().to_string();
        assert!(err.contains("spec.service"), "{err}");
    }

    #[test]
    fn what_the_api_server_normalises_is_not_drift() {
        let desired = json!({"spec": {"resources": {"cpu": "0.5", "memory": "1Gi"}, "env": [], "labels": {}}});
        let observed = json!({"spec": {"resources": {"cpu": "500m", "memory": "1Gi"}, "extra": 1}});
        assert!(subset(&desired, &observed));
        let drifted = json!({"spec": {"resources": {"cpu": "600m", "memory": "1Gi"}}});
        assert!(!subset(&desired, &drifted));
        // A non-empty desired field that is missing is drift.
        assert!(!subset(&json!({"env": [{"name": "A"}]}), &json!({})));
    }
}
