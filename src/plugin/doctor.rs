//! `kubectl tdset doctor NAME`: who else writes the fields this TDSet sets, and, where that is
//! a GitOps tool (or one applies the workload), exactly what it must be told. Read-only, with
//! the user's own credentials: the operator is not asked, and no Application, Kustomization
//! or HelmRelease is read or written.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use crate::api::{ScaleTargetRef, TDSet};
use crate::error::{Error, Result};
use crate::workload::Source;
use crate::workload::gitops::{self, Object, Tool, Writer};
use crate::workload::group::Selector;
use crate::workload::owned::FIELD_MANAGER;

/// Workloads of a group looked at (the first, by kind and name); the rest are counted.
const MAX_WORKLOADS: usize = 50;

/// A field the operator sets: how a person names it, and its JSON pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub pointer: &'static str,
}

const REPLICAS: Field = Field {
    name: "spec.replicas",
    pointer: "/spec/replicas",
};
const SUSPEND: Field = Field {
    name: "spec.suspend",
    pointer: "/spec/suspend",
};
const MIN_REPLICAS: Field = Field {
    name: "spec.minReplicas",
    pointer: "/spec/minReplicas",
};
const MAX_REPLICAS: Field = Field {
    name: "spec.maxReplicas",
    pointer: "/spec/maxReplicas",
};
const PAUSED_REPLICAS: Field = Field {
    name: "the annotation autoscaling.keda.sh/paused-replicas",
    pointer: "/metadata/annotations/autoscaling.keda.sh~1paused-replicas",
};
const PAUSED: Field = Field {
    name: "the annotation autoscaling.keda.sh/paused",
    pointer: "/metadata/annotations/autoscaling.keda.sh~1paused",
};
const MIN_REPLICA_COUNT: Field = Field {
    name: "spec.minReplicaCount",
    pointer: "/spec/minReplicaCount",
};
const MAX_REPLICA_COUNT: Field = Field {
    name: "spec.maxReplicaCount",
    pointer: "/spec/maxReplicaCount",
};
/// What the operator writes to a ScaledObject (`maxReplicaCount` where the schedule sets
/// ceilings).
const SCALED_OBJECT: [Field; 4] = [
    PAUSED_REPLICAS,
    PAUSED,
    MIN_REPLICA_COUNT,
    MAX_REPLICA_COUNT,
];

/// An object the TDSet writes, as read.
#[derive(Clone, Debug)]
pub struct Inspected {
    pub object: Object,
    pub fields: Vec<Field>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub managed: Vec<ManagedFieldsEntry>,
}

/// What the doctor found on one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Another manager last set these fields: a GitOps tool (with its fix), or someone else.
    SetBy {
        manager: String,
        fields: Vec<Field>,
        gitops: Option<Writer>,
    },
    /// A GitOps tool applies the object, though it has not set these fields since the
    /// operator did: its drift correction will, if its manifest carries them.
    AppliedBy(Writer),
}

/// The findings on one object: each other manager of its fields, else the GitOps tool that
/// applies it (from its labels and annotations), else nothing.
pub fn diagnose(i: &Inspected) -> Vec<Finding> {
    let mut by: BTreeMap<String, Vec<Field>> = BTreeMap::new();
    for f in &i.fields {
        let managed = gitops::managed_pointer(f.pointer);
        if let Some(m) = gitops::manager_of(&i.managed, FIELD_MANAGER, &managed) {
            by.entry(m).or_default().push(*f);
        }
    }
    if by.is_empty() {
        return applied_by(&i.object, &i.labels, &i.annotations)
            .map(Finding::AppliedBy)
            .into_iter()
            .collect();
    }
    by.into_iter()
        .map(|(manager, fields)| Finding::SetBy {
            gitops: gitops::writer(&manager, &i.object, &i.labels, &i.annotations),
            manager,
            fields,
        })
        .collect()
}

/// The GitOps tool whose marks the object carries (the manager it applies with). Argo CD only
/// by its tracking annotation: `app.kubernetes.io/instance` is every Helm chart's label too.
fn applied_by(
    object: &Object,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Option<Writer> {
    let candidates = [
        gitops::ARGOCD_MANAGERS[0],
        gitops::KUSTOMIZE_CONTROLLER,
        gitops::HELM_CONTROLLER,
    ];
    candidates
        .into_iter()
        .filter_map(|m| gitops::writer(m, object, labels, annotations))
        .find(|w| match &w.tool {
            // A tracking id that names this very object (one copied from elsewhere names none).
            Tool::ArgoCd { application, .. } => {
                application.is_some() && annotations.contains_key(gitops::ARGOCD_TRACKING_ID)
            }
            Tool::Kustomization { name, .. } | Tool::HelmRelease { name, .. } => name.is_some(),
        })
}

/// The report for a person: the TDSet's Degraded condition, then each object's findings.
pub fn report(tdset: &TDSet, inspected: &[Inspected], more: usize) -> String {
    let mut out = format!(
        "TDSet {}/{}\n",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    let degraded = tdset
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Degraded"));
    match degraded {
        Some(c) if c.status == "True" => {
            out.push_str(&format!("  Degraded ({}): {}\n", c.reason, c.message))
        }
        _ => out.push_str("  not Degraded\n"),
    }
    let mut quiet = 0;
    for i in inspected {
        let findings = diagnose(i);
        if findings.is_empty() {
            quiet += 1;
            continue;
        }
        let names: Vec<&str> = i.fields.iter().map(|f| f.name).collect();
        out.push_str(&format!(
            "\n{} {}/{} ({}):\n",
            i.object.kind,
            i.object.namespace,
            i.object.name,
            names.join(", ")
        ));
        for f in findings {
            out.push_str(&finding(&i.object, &f));
        }
    }
    if quiet > 0 {
        out.push_str(&format!(
            "\n{quiet} more object(s) this TDSet writes: no other writer of its fields, no GitOps tool applies it\n"
        ));
    }
    if more > 0 {
        out.push_str(&format!(
            "\n{more} more workload(s) of the group not looked at (the first {MAX_WORKLOADS} were)\n"
        ));
    }
    out
}

fn finding(object: &Object, f: &Finding) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    match f {
        Finding::SetBy {
            manager,
            fields,
            gitops: Some(w),
        } => {
            let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
            let pointers: Vec<&str> = fields.iter().map(|f| f.pointer).collect();
            format!(
                "  {} last set by {manager}: {}. If its drift correction keeps setting them \
                 back (the TDSet is then Degraded, GitOpsConflict), tell it to leave what field \
                 manager {FIELD_MANAGER} sets; in {}:\n{}",
                names.join(", "),
                w.tool,
                w.tool.object(),
                indent(&gitops::fix(w, object, &pointers, FIELD_MANAGER, false))
            )
        }
        Finding::SetBy {
            manager, fields, ..
        } => {
            let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
            format!(
                "  {} last set by {manager} (not a GitOps tool this knows): if it keeps setting \
                 them, stop it from managing them (leave them out of what it applies)\n",
                names.join(", ")
            )
        }
        Finding::AppliedBy(w) => {
            let pointers: Vec<&str> = match object.kind.as_str() {
                "HorizontalPodAutoscaler" => vec![MIN_REPLICAS.pointer, MAX_REPLICAS.pointer],
                "ScaledObject" => SCALED_OBJECT.iter().map(|f| f.pointer).collect(),
                "CronJob" => vec![SUSPEND.pointer],
                _ => vec![REPLICAS.pointer],
            };
            format!(
                "  applied by {}; it has not set these fields since the operator did. If its \
                 manifest carries them, its drift correction will; in {}:\n{}",
                w.tool,
                w.tool.object(),
                indent(&gitops::fix(w, object, &pointers, FIELD_MANAGER, false))
            )
        }
    }
}

/// Whether the schedule sets ceilings (then the autoscaler's maximum is the operator's too).
fn ceilings(tdset: &TDSet) -> bool {
    let spec = &tdset.spec;
    spec.scheduling_config
        .iter()
        .any(|w| w.max_replica.is_some())
        || spec.overrides.iter().any(|o| o.max_replica.is_some())
}

/// Reads the TDSet and the objects it writes, and reports.
pub async fn doctor(client: &Client, ns: &str, tdset: &TDSet) -> Result<String> {
    let mut inspected = Vec::new();
    let mut more = 0;
    match Source::of(&tdset.spec) {
        Ok(Source::Scale(r)) => inspected.extend(one(client, ns, r, &[REPLICAS]).await?),
        Ok(Source::HpaFloor(r)) => {
            // maxReplicas is the operator's only where the schedule sets ceilings; otherwise
            // the HPA's manifest rightly owns it.
            let fields: &[Field] = if ceilings(tdset) {
                &[MIN_REPLICAS, MAX_REPLICAS]
            } else {
                &[MIN_REPLICAS]
            };
            inspected.extend(one(client, ns, r, fields).await?)
        }
        Ok(Source::ScaledObject(r)) => {
            let fields = match ceilings(tdset) {
                true => &SCALED_OBJECT[..],
                false => &SCALED_OBJECT[..3],
            };
            inspected.extend(one(client, ns, r, fields).await?)
        }
        Ok(Source::Group(sel)) => {
            let selector = Selector::compile(&sel.selector).map_err(Error::Config)?;
            let mut all = Vec::new();
            for k in sel.kinds() {
                let Some(res) = super::group::resource(client, &k).await? else {
                    continue;
                };
                let fields = if res.kind == "CronJob" {
                    vec![SUSPEND]
                } else {
                    vec![REPLICAS]
                };
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
                let list = api
                    .list(&ListParams::default().labels(&selector.to_query()))
                    .await
                    .map_err(Error::kube(format!("listing {} in {ns}", res.plural)))?;
                let picked = list.items.into_iter().filter(|o| {
                    selector.matches(o.labels()) && !sel.exclude.contains(&o.name_any())
                });
                all.extend(picked.map(|o| inspected_of(&res, ns, o, fields.clone())));
            }
            all.sort_by(|a, b| {
                (&a.object.kind, &a.object.name).cmp(&(&b.object.kind, &b.object.name))
            });
            more = all.len().saturating_sub(MAX_WORKLOADS);
            all.truncate(MAX_WORKLOADS);
            inspected = all;
        }
        // An owned Deployment is the operator's alone: nothing else should write it.
        Ok(Source::Container(_) | Source::Template(_)) | Err(_) => {}
    }
    Ok(report(tdset, &inspected, more))
}

async fn one(
    client: &Client,
    ns: &str,
    r: &ScaleTargetRef,
    fields: &[Field],
) -> Result<Option<Inspected>> {
    let (group, version) = match r.api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), r.api_version.clone()),
    };
    let res = match kube::discovery::group(client, &group).await {
        Ok(g) => g
            .versioned_resources(&version)
            .into_iter()
            .find(|(ar, _)| ar.kind == r.kind)
            .map(|(ar, _)| ar),
        Err(_) => None,
    };
    let Some(res) = res else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
    let o = api
        .get_opt(&r.name)
        .await
        .map_err(Error::kube(format!("reading {} {}", r.kind, r.name)))?;
    Ok(o.map(|o| inspected_of(&res, ns, o, fields.to_vec())))
}

fn inspected_of(res: &ApiResource, ns: &str, o: DynamicObject, fields: Vec<Field>) -> Inspected {
    Inspected {
        object: Object {
            group: res.group.clone(),
            kind: res.kind.clone(),
            namespace: ns.to_string(),
            name: o.name_any(),
        },
        fields,
        labels: o.labels().clone(),
        annotations: o.annotations().clone(),
        managed: o.metadata.managed_fields.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        serde_json::from_value(serde_json::json!({
            "manager": manager, "operation": "Apply", "time": "2026-11-29T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": fields
        }))
        .unwrap()
    }

    fn pairs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web(managed: Vec<ManagedFieldsEntry>, labels: &[(&str, &str)]) -> Inspected {
        Inspected {
            object: Object {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
            },
            fields: vec![REPLICAS],
            labels: pairs(labels),
            annotations: BTreeMap::new(),
            managed,
        }
    }

    #[test]
    fn the_gitops_tool_that_set_a_field_is_named_with_its_fix() {
        let i = web(
            vec![
                entry(
                    FIELD_MANAGER,
                    serde_json::json!({"f:spec": {"f:replicas": {}}}),
                ),
                entry(
                    "kustomize-controller",
                    serde_json::json!({"f:spec": {"f:replicas": {}, "f:template": {}}}),
                ),
            ],
            &[
                ("kustomize.toolkit.fluxcd.io/name", "apps"),
                ("kustomize.toolkit.fluxcd.io/namespace", "flux-system"),
            ],
        );
        let found = diagnose(&i);
        assert!(
            matches!(
                &found[..],
                [Finding::SetBy {
                    gitops: Some(_),
                    ..
                }]
            ),
            "{found:?}"
        );
        let text = finding(&i.object, &found[0]);
        assert!(
            text.contains("Flux (Kustomization flux-system/apps)"),
            "{text}"
        );
        assert!(text.contains("  ignore:"), "{text}");
    }

    #[test]
    fn a_workload_a_tool_applies_is_flagged_before_any_fight_and_a_quiet_one_is_not() {
        let ours = vec![entry(
            FIELD_MANAGER,
            serde_json::json!({"f:spec": {"f:replicas": {}}}),
        )];
        let mut tracked = web(ours.clone(), &[]);
        tracked.annotations =
            pairs(&[(gitops::ARGOCD_TRACKING_ID, "shop:apps/Deployment:shop/web")]);
        let found = diagnose(&tracked);
        assert!(matches!(&found[..], [Finding::AppliedBy(_)]), "{found:?}");
        assert!(finding(&tracked.object, &found[0]).contains("managedFieldsManagers"));
        assert!(diagnose(&web(ours.clone(), &[])).is_empty());
        // A tracking id copied from another object (an operator copying its CR's annotations).
        let mut copied = web(ours.clone(), &[]);
        copied.annotations =
            pairs(&[(gitops::ARGOCD_TRACKING_ID, "shop:apps/Deployment:shop/api")]);
        assert!(diagnose(&copied).is_empty());
        // A Helm chart's instance label alone is no sign of Argo CD.
        let helm = web(ours, &[("app.kubernetes.io/instance", "shop")]);
        assert!(diagnose(&helm).is_empty());
        // Another writer that is no GitOps tool is named, without a tool's fix.
        let script = web(
            vec![entry(
                "deploy-script",
                serde_json::json!({"f:spec": {"f:replicas": {}}}),
            )],
            &[],
        );
        let found = diagnose(&script);
        assert!(
            matches!(&found[..], [Finding::SetBy { gitops: None, .. }]),
            "{found:?}"
        );
    }
}
