//! Which GitOps tool keeps setting a field back, and exactly what it must be told. The writer
//! is named by `managedFields` (the field manager of the last write of the field); the
//! Application, Kustomization or HelmRelease that carries the object, by the labels and
//! annotations each tool puts on what it applies. Nothing here reads or writes a tool's
//! objects: the fix is printed for a person (or a pull request) to make.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

/// Argo CD's application controller (server-side and client-side apply).
pub const ARGOCD_MANAGERS: &[&str] = &["argocd-controller", "argocd-application-controller"];
/// Flux's controllers.
pub const KUSTOMIZE_CONTROLLER: &str = "kustomize-controller";
pub const HELM_CONTROLLER: &str = "helm-controller";

pub const ARGOCD_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
const KUSTOMIZATION_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
const KUSTOMIZATION_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
const HELMRELEASE_NAME: &str = "helm.toolkit.fluxcd.io/name";
const HELMRELEASE_NAMESPACE: &str = "helm.toolkit.fluxcd.io/namespace";

/// The tool, and the object of it that applies the workload (when the workload names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tool {
    /// An Argo CD Application (`namespace` only when the tracking id carries one: apps in
    /// any namespace).
    ArgoCd {
        application: Option<String>,
        namespace: Option<String>,
    },
    /// A Flux Kustomization.
    Kustomization {
        name: Option<String>,
        namespace: Option<String>,
    },
    /// A Flux HelmRelease.
    HelmRelease {
        name: Option<String>,
        namespace: Option<String>,
    },
}

/// A GitOps tool that wrote a field, through field manager `manager`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub manager: String,
    pub tool: Tool,
}

/// The object whose fields are fought over, as a tool's rules name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The API group ("" for the core group).
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The GitOps tool behind field manager `manager`, and which of its objects applies `object`
/// (from its own labels and annotations; a value that is no object name is left out, so a
/// tenant's text never reaches a message). None: not a GitOps tool this knows.
pub fn writer(
    manager: &str,
    object: &Object,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<Writer> {
    let label = |key: &str| labels.get(key).filter(|v| is_name(v)).cloned();
    let tool = if ARGOCD_MANAGERS.contains(&manager) {
        let (application, namespace) = match annotations.get(ARGOCD_TRACKING_ID) {
            Some(id) => application_of(id, object),
            None => (label(INSTANCE_LABEL), None),
        };
        Tool::ArgoCd {
            application,
            namespace,
        }
    } else if manager == KUSTOMIZE_CONTROLLER {
        Tool::Kustomization {
            name: label(KUSTOMIZATION_NAME),
            namespace: label(KUSTOMIZATION_NAMESPACE),
        }
    } else if manager == HELM_CONTROLLER {
        Tool::HelmRelease {
            name: label(HELMRELEASE_NAME),
            namespace: label(HELMRELEASE_NAMESPACE),
        }
    } else {
        return None;
    };
    Some(Writer {
        manager: manager.to_string(),
        tool,
    })
}

/// Who else set a field: its field manager, and the GitOps tool that is (with the object as
/// the tool's rules name it), if it is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setter {
    pub manager: String,
    pub tool: Option<(Writer, Object)>,
}

/// Who, other than `ours`, last set the field at `pointer` (a JSON pointer, e.g.
/// `/spec/maxReplicas`) of `object`, from the object's metadata as read: its `managedFields`,
/// labels and annotations. None: nobody else set it.
pub fn setter(meta: &ObjectMeta, object: Object, pointer: &str, ours: &str) -> Option<Setter> {
    let managed = meta.managed_fields.as_deref()?;
    let manager = manager_of(managed, ours, &managed_pointer(pointer))?;
    let none = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&none);
    let annotations = meta.annotations.as_ref().unwrap_or(&none);
    let tool = writer(&manager, &object, labels, annotations).map(|w| (w, object));
    Some(Setter { manager, tool })
}

/// The manager, other than `ours`, that last set the field at `managed_pointer` (in
/// managedFields' own terms, e.g. `/f:spec/f:maxReplicas`), on the main resource or a
/// subresource (`/scale`).
pub fn manager_of(
    managed: &[ManagedFieldsEntry],
    ours: &str,
    managed_pointer: &str,
) -> Option<String> {
    managed
        .iter()
        .filter(|m| m.manager.as_deref().is_some_and(|n| n != ours))
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(managed_pointer).is_some())
        })
        .max_by_key(|m| m.time.as_ref().and_then(|t| serde_json::to_string(t).ok()))
        .and_then(|m| m.manager.clone())
}

/// A JSON pointer (`/spec/replicas`) in `managedFields`' own terms (`/f:spec/f:replicas`).
pub fn managed_pointer(pointer: &str) -> String {
    pointer.replace('/', "/f:")
}

/// The Application of an Argo CD tracking id, `<app>:<group>/<kind>:<namespace>/<name>`,
/// where `<app>` is `<namespace>_<name>` for applications outside Argo CD's own namespace.
/// An id that names another object (copied from elsewhere: Argo CD itself would not take it)
/// or whose application is no name gives none.
fn application_of(id: &str, object: &Object) -> (Option<String>, Option<String>) {
    let Some((app, rest)) = id.split_once(':') else {
        return (None, None);
    };
    let expected = format!(
        "{}/{}:{}/{}",
        object.group, object.kind, object.namespace, object.name
    );
    if rest != expected {
        return (None, None);
    }
    match app.split_once('_') {
        Some((ns, name)) if is_name(ns) && is_name(name) => {
            (Some(name.to_string()), Some(ns.to_string()))
        }
        _ => (is_name(app).then(|| app.to_string()), None),
    }
}

/// A Kubernetes object name (a DNS-1123 subdomain): all of a tenant's label or annotation
/// value a message may carry.
fn is_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl fmt::Display for Tool {
    /// "Argo CD (Application argocd/shop)", "Flux (Kustomization flux-system/apps)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tool, kind, name, namespace) = self.parts();
        match name {
            Some(name) => write!(f, "{tool} ({kind} {})", qualified(namespace, name)),
            None => write!(f, "{tool} (its {kind} is not named on the workload)"),
        }
    }
}

impl Tool {
    fn parts(&self) -> (&'static str, &'static str, Option<&str>, Option<&str>) {
        match self {
            Tool::ArgoCd {
                application,
                namespace,
            } => (
                "Argo CD",
                "Application",
                application.as_deref(),
                namespace.as_deref(),
            ),
            Tool::Kustomization { name, namespace } => (
                "Flux",
                "Kustomization",
                name.as_deref(),
                namespace.as_deref(),
            ),
            Tool::HelmRelease { name, namespace } => {
                ("Flux", "HelmRelease", name.as_deref(), namespace.as_deref())
            }
        }
    }

    /// "Application argocd/shop" (or "the Application that applies it" when the workload does
    /// not name it).
    pub fn object(&self) -> String {
        let (_, kind, name, namespace) = self.parts();
        match name {
            Some(name) => format!("{kind} {}", qualified(namespace, name)),
            None => format!("the {kind} that applies it"),
        }
    }
}

fn qualified(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The change that makes `writer`'s tool leave `paths` (JSON pointers, e.g. `/spec/replicas`)
/// of `object` to field manager `ours`: entries added to lists of the tool's object, as YAML
/// (`flow`: in words on one line, for a condition's message and an Event).
pub fn fix(writer: &Writer, object: &Object, paths: &[&str], ours: &str, flow: bool) -> String {
    // Flux's targets are anchored regular expressions: a name's dots are escaped, or `web.v2`
    // would also name `web-v2`.
    let target = |with_namespace: bool, regex: bool| {
        let name = |n: &str| {
            if regex {
                n.replace('.', "\\.")
            } else {
                n.to_string()
            }
        };
        let mut t = Vec::new();
        if !object.group.is_empty() {
            t.push(format!("group: {}", name(&object.group)));
        }
        t.push(format!("kind: {}", object.kind));
        t.push(format!("name: {}", name(&object.name)));
        if with_namespace {
            t.push(format!("namespace: {}", name(&object.namespace)));
        }
        t
    };
    let paths = paths
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let added = "# added to the list";
    match &writer.tool {
        Tool::ArgoCd { .. } => {
            let mut rule = target(true, false);
            rule.push(format!("managedFieldsManagers: [{ours}]"));
            if flow {
                format!(
                    "add {{{}}} to spec.ignoreDifferences and RespectIgnoreDifferences=true to spec.syncPolicy.syncOptions",
                    rule.join(", ")
                )
            } else {
                format!(
                    "spec:\n  ignoreDifferences:   {added}\n  - {}\n  syncPolicy:\n    syncOptions:       {added}\n    - RespectIgnoreDifferences=true\n",
                    rule.join("\n    ")
                )
            }
        }
        Tool::Kustomization { .. } => {
            let t = target(true, true);
            if flow {
                format!(
                    "add {{paths: [{paths}], target: {{{}}}}} to spec.ignore",
                    t.join(", ")
                )
            } else {
                format!(
                    "spec:\n  ignore:              {added}\n  - paths: [{paths}]\n    target:\n      {}\n",
                    t.join("\n      ")
                )
            }
        }
        // Only a release whose drift detection corrects (`mode: enabled`) sets a field back.
        Tool::HelmRelease { .. } => {
            let t = target(false, true);
            if flow {
                format!(
                    "add {{paths: [{paths}], target: {{{}}}}} to spec.driftDetection.ignore",
                    t.join(", ")
                )
            } else {
                format!(
                    "spec:\n  driftDetection:\n    ignore:            {added}\n    - paths: [{paths}]\n      target:\n        {}\n",
                    t.join("\n        ")
                )
            }
        }
    }
}

/// The one-line account of the conflict, with its fix: what a condition and an Event say.
/// `fields` names them for a person ("spec.replicas").
pub fn conflict_message(
    writer: &Writer,
    object: &Object,
    fields: &str,
    paths: &[&str],
    ours: &str,
) -> String {
    format!(
        "{fields} of {} {} keeps being set back by {} (field manager {}): its drift correction \
         undoes the schedule, and the operator now puts it back less and less often. Tell it to \
         leave what field manager {ours} sets: in {}, {} (`kubectl tdset doctor` prints it as YAML)",
        object.kind,
        object.name,
        writer.tool,
        writer.manager,
        writer.tool.object(),
        fix(writer, object, paths, ours, true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web() -> Object {
        Object {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn argo_cd_is_named_with_its_application_from_the_tracking_id_or_the_instance_label() {
        let none = BTreeMap::new();
        let tracked = map(&[(ARGOCD_TRACKING_ID, "shop:apps/Deployment:shop/web")]);
        let w = writer("argocd-controller", &web(), &none, &tracked).unwrap();
        assert_eq!(
            w.tool,
            Tool::ArgoCd {
                application: Some("shop".into()),
                namespace: None
            }
        );
        // Apps in any namespace: `<namespace>_<name>`.
        let anywhere = map(&[(ARGOCD_TRACKING_ID, "team-a_shop:apps/Deployment:shop/web")]);
        let w = writer("argocd-application-controller", &web(), &none, &anywhere).unwrap();
        assert_eq!(w.tool.to_string(), "Argo CD (Application team-a/shop)");
        let labelled = map(&[(INSTANCE_LABEL, "shop")]);
        let w = writer("argocd-controller", &web(), &labelled, &none).unwrap();
        assert_eq!(w.tool.object(), "Application shop");
        let w = writer("argocd-controller", &web(), &none, &none).unwrap();
        assert_eq!(w.tool.object(), "the Application that applies it");
        // Anyone else is not a GitOps tool, whatever the labels say.
        assert_eq!(writer("kubectl-edit", &web(), &labelled, &tracked), None);
    }

    /// What a tenant writes into an annotation reaches a message only as an object's name, and
    /// a tracking id copied from another object names no Application.
    #[test]
    fn a_tracking_id_that_is_not_this_objects_or_not_a_name_names_nothing() {
        let none = BTreeMap::new();
        let unnamed = Tool::ArgoCd {
            application: None,
            namespace: None,
        };
        for id in [
            "shop:apps/Deployment:shop/api",
            "shop:apps/StatefulSet:shop/web",
            "shop",
            &format!("{}:apps/Deployment:shop/web", "x".repeat(300)),
            "Run kubectl delete ns prod:apps/Deployment:shop/web",
        ] {
            let tracked = map(&[(ARGOCD_TRACKING_ID, id)]);
            let w = writer("argocd-controller", &web(), &none, &tracked).unwrap();
            assert_eq!(w.tool, unnamed, "{id}");
        }
        let labelled = map(&[(KUSTOMIZATION_NAME, "Not A Name!")]);
        let w = writer("kustomize-controller", &web(), &labelled, &none).unwrap();
        assert_eq!(w.tool.object(), "the Kustomization that applies it");
    }

    #[test]
    fn flux_is_named_with_its_kustomization_or_helm_release_from_its_labels() {
        let none = BTreeMap::new();
        let ks = map(&[
            (KUSTOMIZATION_NAME, "apps"),
            (KUSTOMIZATION_NAMESPACE, "flux-system"),
        ]);
        let w = writer("kustomize-controller", &web(), &ks, &none).unwrap();
        assert_eq!(w.tool.to_string(), "Flux (Kustomization flux-system/apps)");
        let hr = map(&[(HELMRELEASE_NAME, "web"), (HELMRELEASE_NAMESPACE, "shop")]);
        let w = writer("helm-controller", &web(), &hr, &none).unwrap();
        assert_eq!(w.tool.object(), "HelmRelease shop/web");
    }

    #[test]
    fn each_tool_gets_the_rule_it_reads() {
        let none = BTreeMap::new();
        let argo = writer("argocd-controller", &web(), &none, &none).unwrap();
        assert_eq!(
            fix(&argo, &web(), &["/spec/replicas"], "tdset-operator", false),
            "spec:\n  ignoreDifferences:   # added to the list\n  - group: apps\n    kind: \
             Deployment\n    name: web\n    namespace: shop\n    managedFieldsManagers: \
             [tdset-operator]\n  syncPolicy:\n    syncOptions:       # added to the list\n    \
             - RespectIgnoreDifferences=true\n"
        );
        // Flux's targets are anchored regular expressions: `web.v2` must not name `web-v2`.
        let flux = writer("kustomize-controller", &web(), &none, &none).unwrap();
        let dotted = Object {
            name: "web.v2".into(),
            ..web()
        };
        assert_eq!(
            fix(&flux, &dotted, &["/spec/replicas"], "tdset-operator", true),
            "add {paths: [\"/spec/replicas\"], target: {group: apps, kind: Deployment, \
             name: web\\.v2, namespace: shop}} to spec.ignore"
        );
        let helm = writer("helm-controller", &web(), &none, &none).unwrap();
        let hpa = Object {
            group: "autoscaling".into(),
            kind: "HorizontalPodAutoscaler".into(),
            namespace: "shop".into(),
            name: "web".into(),
        };
        assert_eq!(
            fix(
                &helm,
                &hpa,
                &["/spec/minReplicas", "/spec/maxReplicas"],
                "tdset-operator",
                false
            ),
            "spec:\n  driftDetection:\n    ignore:            # added to the list\n    - paths: \
             [\"/spec/minReplicas\", \"/spec/maxReplicas\"]\n      target:\n        group: \
             autoscaling\n        kind: HorizontalPodAutoscaler\n        name: web\n"
        );
    }

    #[test]
    fn the_writer_of_a_field_is_read_from_the_objects_metadata() {
        let meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "labels": {KUSTOMIZATION_NAME: "apps", KUSTOMIZATION_NAMESPACE: "flux-system"},
            "managedFields": [
                {"manager": "tdset-operator", "operation": "Apply", "time": "2026-11-29T10:00:02Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:maxReplicas": {}}}},
                {"manager": "kustomize-controller", "operation": "Apply", "time": "2026-11-29T10:00:01Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:maxReplicas": {}, "f:minReplicas": {}}}}
            ]
        }))
        .unwrap();
        let s = setter(&meta, web(), "/spec/maxReplicas", "tdset-operator").unwrap();
        assert_eq!(s.manager, "kustomize-controller");
        let (w, o) = s.tool.unwrap();
        assert_eq!(w.tool.object(), "Kustomization flux-system/apps");
        assert_eq!(o, web());
        // Nobody else set it: no writer.
        assert_eq!(
            setter(&meta, web(), "/spec/replicas", "tdset-operator"),
            None
        );
        assert_eq!(managed_pointer("/spec/replicas"), "/f:spec/f:replicas");
    }

    #[test]
    fn the_other_writer_is_named_from_managed_fields() {
        let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(serde_json::json!([
            {"manager": "tdset-operator", "operation": "Apply", "subresource": "scale", "time": "2026-11-24T10:00:02Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "helm", "operation": "Update", "time": "2026-11-24T09:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
            {"manager": "argocd-controller", "operation": "Update", "time": "2026-11-24T10:00:01Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-11-24T10:00:03Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
        ]))
        .unwrap();
        let replicas = "/f:spec/f:replicas";
        assert_eq!(
            manager_of(&entries, "tdset-operator", replicas).as_deref(),
            Some("argocd-controller")
        );
        assert_eq!(manager_of(&entries[..1], "tdset-operator", replicas), None);
    }

    /// The message is a condition's and an Event's note (cut at 1000 bytes): with names of 63
    /// characters the fix is whole.
    #[test]
    fn the_message_names_the_tool_the_object_and_the_fix_within_an_events_note() {
        let long = Object {
            name: "w".repeat(63),
            namespace: "n".repeat(63),
            ..web()
        };
        let id = format!(
            "{}:apps/Deployment:{}/{}",
            "a".repeat(63),
            long.namespace,
            long.name
        );
        let tracked = map(&[(ARGOCD_TRACKING_ID, &id)]);
        let w = writer("argocd-controller", &long, &BTreeMap::new(), &tracked).unwrap();
        let m = conflict_message(
            &w,
            &long,
            "spec.replicas",
            &["/spec/replicas"],
            "tdset-operator",
        );
        assert!(
            m.contains(&format!("Argo CD (Application {})", "a".repeat(63))),
            "{m}"
        );
        assert!(m.contains("managedFieldsManagers: [tdset-operator]"), "{m}");
        assert!(m.contains("RespectIgnoreDifferences=true"), "{m}");
        assert!(m.len() <= 1000, "{} bytes: {m}", m.len());
    }
}
