//! Which GitOps tool keeps setting a field back, and exactly what it must be told. The writer
//! is named by `managedFields` (the field manager of the last write of the field); the
//! Application, Kustomization or HelmRelease that carries the object, by the labels and
//! annotations each tool puts on what it applies. Nothing here reads or writes a tool's
//! objects: the fix is printed for a person (or a pull request) to make.

use std::collections::BTreeMap;
use std::fmt;

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

/// The GitOps tool behind field manager `manager`, and which of its objects applies the
/// workload (from the workload's own labels and annotations). None: not a GitOps tool this
/// knows.
pub fn writer(
    manager: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<Writer> {
    let named =
        |name: &str, namespace: &str| (labels.get(name).cloned(), labels.get(namespace).cloned());
    let tool = if ARGOCD_MANAGERS.contains(&manager) {
        let (application, namespace) = match annotations.get(ARGOCD_TRACKING_ID) {
            Some(id) => application_of(id),
            None => (labels.get(INSTANCE_LABEL).cloned(), None),
        };
        Tool::ArgoCd {
            application,
            namespace,
        }
    } else if manager == KUSTOMIZE_CONTROLLER {
        let (name, namespace) = named(KUSTOMIZATION_NAME, KUSTOMIZATION_NAMESPACE);
        Tool::Kustomization { name, namespace }
    } else if manager == HELM_CONTROLLER {
        let (name, namespace) = named(HELMRELEASE_NAME, HELMRELEASE_NAMESPACE);
        Tool::HelmRelease { name, namespace }
    } else {
        return None;
    };
    Some(Writer {
        manager: manager.to_string(),
        tool,
    })
}

/// The Application of an Argo CD tracking id, `<app>:<group>/<kind>:<namespace>/<name>`,
/// where `<app>` is `<namespace>_<name>` for applications outside Argo CD's own namespace.
fn application_of(id: &str) -> (Option<String>, Option<String>) {
    let app = id.split(':').next().unwrap_or_default();
    match app.split_once('_') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
            (Some(name.to_string()), Some(ns.to_string()))
        }
        _ => ((!app.is_empty()).then(|| app.to_string()), None),
    }
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

    /// "Application argocd/shop" (or "the Application" when the workload does not name it).
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
/// of `object` to field manager `ours`, as a YAML fragment of the tool's object (`flow`: on
/// one line, for a condition's message and an Event).
pub fn fix(writer: &Writer, object: &Object, paths: &[&str], ours: &str, flow: bool) -> String {
    let target = |with_namespace: bool| {
        let mut t = Vec::new();
        if !object.group.is_empty() {
            t.push(format!("group: {}", object.group));
        }
        t.push(format!("kind: {}", object.kind));
        t.push(format!("name: {}", object.name));
        if with_namespace {
            t.push(format!("namespace: {}", object.namespace));
        }
        t
    };
    let paths = paths
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    match &writer.tool {
        Tool::ArgoCd { .. } => {
            let mut rule = target(true);
            rule.push(format!("managedFieldsManagers: [{ours}]"));
            if flow {
                format!(
                    "spec.ignoreDifferences: [{{{}}}] and spec.syncPolicy.syncOptions: [RespectIgnoreDifferences=true]",
                    rule.join(", ")
                )
            } else {
                format!(
                    "spec:\n  ignoreDifferences:\n  - {}\n  syncPolicy:\n    syncOptions:\n    - RespectIgnoreDifferences=true\n",
                    rule.join("\n    ")
                )
            }
        }
        Tool::Kustomization { .. } => {
            let t = target(true);
            if flow {
                format!(
                    "spec.driftIgnoreRules: [{{paths: [{paths}], target: {{{}}}}}]",
                    t.join(", ")
                )
            } else {
                format!(
                    "spec:\n  driftIgnoreRules:\n  - paths: [{paths}]\n    target:\n      {}\n",
                    t.join("\n      ")
                )
            }
        }
        Tool::HelmRelease { .. } => {
            let t = target(false);
            if flow {
                format!(
                    "spec.driftDetection: {{mode: enabled, ignore: [{{paths: [{paths}], target: {{{}}}}}]}}",
                    t.join(", ")
                )
            } else {
                format!(
                    "spec:\n  driftDetection:\n    mode: enabled\n    ignore:\n    - paths: [{paths}]\n      target:\n        {}\n",
                    t.join("\n        ")
                )
            }
        }
    }
}

/// The one-line account of the conflict, with its fix: what a condition and an Event say.
/// `fields` names them for a person ("spec.replicas"), `what` the object ("Deployment web").
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
        let w = writer("argocd-controller", &none, &tracked).unwrap();
        assert_eq!(
            w.tool,
            Tool::ArgoCd {
                application: Some("shop".into()),
                namespace: None
            }
        );
        // Apps in any namespace: `<namespace>_<name>`.
        let anywhere = map(&[(ARGOCD_TRACKING_ID, "team-a_shop:apps/Deployment:shop/web")]);
        let w = writer("argocd-application-controller", &none, &anywhere).unwrap();
        assert_eq!(w.tool.to_string(), "Argo CD (Application team-a/shop)");
        let labelled = map(&[(INSTANCE_LABEL, "shop")]);
        let w = writer("argocd-controller", &labelled, &none).unwrap();
        assert_eq!(w.tool.object(), "Application shop");
        let w = writer("argocd-controller", &none, &none).unwrap();
        assert_eq!(w.tool.object(), "the Application that applies it");
        // Anyone else is not a GitOps tool, whatever the labels say.
        assert_eq!(writer("kubectl-edit", &labelled, &tracked), None);
    }

    #[test]
    fn flux_is_named_with_its_kustomization_or_helm_release_from_its_labels() {
        let none = BTreeMap::new();
        let ks = map(&[
            (KUSTOMIZATION_NAME, "apps"),
            (KUSTOMIZATION_NAMESPACE, "flux-system"),
        ]);
        let w = writer("kustomize-controller", &ks, &none).unwrap();
        assert_eq!(w.tool.to_string(), "Flux (Kustomization flux-system/apps)");
        let hr = map(&[(HELMRELEASE_NAME, "web"), (HELMRELEASE_NAMESPACE, "shop")]);
        let w = writer("helm-controller", &hr, &none).unwrap();
        assert_eq!(w.tool.object(), "HelmRelease shop/web");
    }

    #[test]
    fn each_tool_gets_the_rule_it_reads() {
        let none = BTreeMap::new();
        let argo = writer("argocd-controller", &none, &none).unwrap();
        assert_eq!(
            fix(&argo, &web(), &["/spec/replicas"], "tdset-operator", false),
            "spec:\n  ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    name: web\n    \
             namespace: shop\n    managedFieldsManagers: [tdset-operator]\n  syncPolicy:\n    \
             syncOptions:\n    - RespectIgnoreDifferences=true\n"
        );
        let flux = writer("kustomize-controller", &none, &none).unwrap();
        assert_eq!(
            fix(&flux, &web(), &["/spec/replicas"], "tdset-operator", true),
            "spec.driftIgnoreRules: [{paths: [\"/spec/replicas\"], target: {group: apps, \
             kind: Deployment, name: web, namespace: shop}}]"
        );
        let helm = writer("helm-controller", &none, &none).unwrap();
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
            "spec:\n  driftDetection:\n    mode: enabled\n    ignore:\n    - paths: \
             [\"/spec/minReplicas\", \"/spec/maxReplicas\"]\n      target:\n        group: \
             autoscaling\n        kind: HorizontalPodAutoscaler\n        name: web\n"
        );
    }

    /// The message is a condition's and an Event's note (cut at 1000 bytes): with names of 63
    /// characters the fix is whole.
    #[test]
    fn the_message_names_the_tool_the_object_and_the_fix_within_an_events_note() {
        let tracked = map(&[(ARGOCD_TRACKING_ID, "shop:apps/Deployment:shop/web")]);
        let w = writer("argocd-controller", &BTreeMap::new(), &tracked).unwrap();
        let long = Object {
            name: "w".repeat(63),
            namespace: "n".repeat(63),
            ..web()
        };
        let m = conflict_message(
            &w,
            &long,
            "spec.replicas",
            &["/spec/replicas"],
            "tdset-operator",
        );
        assert!(m.contains("Argo CD (Application shop)"), "{m}");
        assert!(m.contains("managedFieldsManagers: [tdset-operator]"), "{m}");
        assert!(m.contains("RespectIgnoreDifferences=true"), "{m}");
        assert!(m.len() <= 1000, "{} bytes: {m}", m.len());
    }
}
