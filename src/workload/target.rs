//! A referenced object scaled through its `/scale` subresource: the only field the operator
//! writes is `spec.replicas`, under its own field manager, and only when it differs.

use serde_json::{Value, json};

use crate::api::ScaleTargetRef;
use crate::workload::hpa::HpaView;

/// What `/scale` (and, where the kind has one, the object's status) says about the target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScaleView {
    /// `spec.replicas`: what the target is asked to run.
    pub spec_replicas: i32,
    /// `status.replicas`: what it runs.
    pub status_replicas: i32,
    /// Ready replicas, when the kind reports them (`status.readyReplicas`).
    pub ready_replicas: Option<i32>,
    /// The object's uid (`/scale` carries its object's).
    pub uid: Option<String>,
    /// The revision it was read at (`/scale` carries its object's): a write that must not
    /// land over someone else's newer one is guarded by it.
    pub resource_version: Option<String>,
    /// Who else last set `spec.replicas` (from managedFields, where the object was read), and
    /// the GitOps tool that is, if it is one.
    pub replicas_setter: Option<crate::workload::gitops::Setter>,
    /// What one replica's pod requests, where the object was read (its `spec.template`).
    pub requests: crate::workload::savings::Requests,
    /// The object's labels, where it was read (for the groups that may select it).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its own count: `spec.replicas`, unless a group's record on it (where the object was
    /// read) says the group set that, then the own count the group recorded.
    pub own_replicas: i32,
}

/// The replica count to write, if it differs from what the target is asked to run.
pub fn scale_write(scheduled: i32, observed: &ScaleView) -> Option<i32> {
    (observed.spec_replicas != scheduled).then_some(scheduled)
}

/// The server-side apply body for `/scale`: the replica count and nothing else, so the
/// operator's field manager owns `spec.replicas` alone.
pub fn scale_body(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    })
}

/// The first HPA (by name) that also scales `target`: writing replicas under it would fight
/// the HPA, so the operator refuses and says which HPA to target instead.
pub fn conflicting_hpa<'a>(
    target: &ScaleTargetRef,
    hpas: impl IntoIterator<Item = &'a HpaView>,
) -> Option<&'a HpaView> {
    let mut found: Vec<&HpaView> = hpas
        .into_iter()
        .filter(|h| {
            h.target.kind == target.kind
                && h.target.name == target.name
                && h.target.group() == target.group()
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(api_version: &str, kind: &str, name: &str) -> ScaleTargetRef {
        ScaleTargetRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn hpa(name: &str, target: ScaleTargetRef) -> HpaView {
        HpaView {
            name: name.into(),
            min_replicas: Some(1),
            max_replicas: 10,
            target,
            current_replicas: None,
            own_min: 1,
            max_by_operator: false,
            scaled_object: None,
        }
    }

    #[test]
    fn writes_only_a_different_count() {
        let seen = ScaleView {
            spec_replicas: 3,
            status_replicas: 3,
            ready_replicas: Some(3),
            uid: None,
            replicas_setter: None,
            requests: Default::default(),
            labels: Default::default(),
            own_replicas: 3,
            resource_version: None,
        };
        assert_eq!(scale_write(3, &seen), None);
        assert_eq!(scale_write(0, &seen), Some(0));
        assert_eq!(
            scale_body("web", 4),
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"}, "spec": {"replicas": 4}})
        );
    }

    #[test]
    fn an_hpa_on_the_same_object_conflicts_whatever_its_version() {
        let web = r("apps/v1", "Deployment", "web");
        let hpas = [
            hpa("other", r("apps/v1", "Deployment", "api")),
            hpa("z-web", r("apps/v1beta2", "Deployment", "web")),
            hpa("a-web", r("apps/v1", "Deployment", "web")),
            hpa("sts", r("apps/v1", "StatefulSet", "web")),
        ];
        assert_eq!(
            conflicting_hpa(&web, &hpas).map(|h| h.name.as_str()),
            Some("a-web")
        );
        assert_eq!(
            conflicting_hpa(&r("apps/v1", "Deployment", "api"), &hpas[2..]),
            None
        );
        let rollout = r("argoproj.io/v1alpha1", "Rollout", "web");
        assert_eq!(conflicting_hpa(&rollout, &hpas), None);
    }
}
