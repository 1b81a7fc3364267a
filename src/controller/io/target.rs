//! Referenced targets on the wire: an object's replica count read and written through its
//! `/scale` subresource (the built-in kinds read whole, for readiness and labels), an HPA read
//! and its `minReplicas` written. The operator never creates, owns, relabels or deletes a
//! target; it writes `spec.replicas` (or `spec.minReplicas`) alone, under its own field
//! manager. Client calls and cache reads only: which write is due is the form's to say.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};

use crate::api::ScaleTargetRef;
use crate::controller::state::{Answer, Context, Resolved};
use crate::error::{Error, Result};
use crate::memo::OwnWrites;
use crate::status::Problem;
use crate::workload::gitops;
use crate::workload::group;
use crate::workload::hpa::{self, HpaView};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::Requests;
use crate::workload::target::{self, ScaleView};

/// What a request about a target came to: its value, a problem the TDSet reports and waits
/// out (the object is gone, or RBAC forbids `verb` on `resource` + `subresource`), or an error
/// the reconcile returns (retried with backoff).
pub(super) struct Request<'a> {
    pub verb: &'static str,
    pub target: &'a ScaleTargetRef,
    pub resource: &'a ApiResource,
    /// "/scale", or "" for the object itself.
    pub subresource: &'static str,
    pub ns: &'a str,
}

impl Request<'_> {
    pub(super) fn answer<T>(&self, result: kube::Result<T>) -> Answer<T> {
        let (r, ns) = (self.target, self.ns);
        let status = match result {
            Ok(v) => return Ok(Ok(v)),
            Err(kube::Error::Api(s)) => s,
            Err(e) => return Err(self.failed(e)),
        };
        if status.is_not_found() {
            return Ok(Err(Problem::TargetNotFound(format!(
                "{r} does not exist in namespace {ns}; nothing is written until it appears, and the \
                 TDSet picks it up by itself then"
            ))));
        }
        if status.is_forbidden() {
            let group = match self.resource.group.as_str() {
                "" => "\"\"".to_string(),
                g => g.to_string(),
            };
            let resource = format!("{}{}", self.resource.plural, self.subresource);
            return Ok(Err(Problem::Forbidden(format!(
                "the operator may not {verb} {resource} (apiGroup {group}) in namespace {ns}: {msg}. \
                 Grant it with a ClusterRole labelled schedule.rs/aggregate-to-tdset-operator: \"true\" \
                 (rules: apiGroups [{group}], resources [{resource}], verbs [get, patch]); see docs/trust-and-rbac.md",
                verb = self.verb,
                msg = status.message,
            ))));
        }
        Err(self.failed(kube::Error::Api(status)))
    }

    fn failed(&self, e: kube::Error) -> Error {
        Error::kube(format!(
            "{} {}{} of {} in {}",
            self.verb, self.resource.plural, self.subresource, self.target, self.ns
        ))(e)
    }
}

/// Reads a target's replica count (and readiness, where the kind reports it). For the
/// built-in kinds the object itself is read, for its `status.readyReplicas`; others through
/// `/scale`, which every scalable kind serves the same way.
async fn read(ctx: &Context, ns: &str, r: &ScaleTargetRef, res: &Resolved) -> Answer<ScaleView> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &res.resource);
    let request = |subresource| Request {
        verb: "get",
        target: r,
        resource: &res.resource,
        subresource,
        ns,
    };
    if r.group() == "apps" {
        return Ok(request("").answer(api.get(&r.name).await)?.map(|o| {
            let int = |path: &str| {
                o.data
                    .pointer(path)
                    .and_then(serde_json::Value::as_i64)
                    .map(|v| v as i32)
            };
            ScaleView {
                // The API server defaults an absent spec.replicas to 1.
                spec_replicas: int("/spec/replicas").unwrap_or(1),
                status_replicas: int("/status/replicas").unwrap_or(0),
                ready_replicas: Some(int("/status/readyReplicas").unwrap_or(0)),
                uid: o.metadata.uid.clone(),
                resource_version: o.metadata.resource_version.clone(),
                replicas_setter: gitops::setter(
                    &o.metadata,
                    object_of(ns, &r.name, (r.group(), &r.kind)),
                    "/spec/replicas",
                    FIELD_MANAGER,
                ),
                requests: o
                    .data
                    .pointer("/spec/template")
                    .map(Requests::of_template)
                    .unwrap_or_default(),
                labels: o.metadata.labels.clone().unwrap_or_default(),
                own_replicas: group::own_replicas(
                    o.annotations(),
                    int("/spec/replicas").unwrap_or(1),
                ),
            }
        }));
    }
    let scale = match api.get_scale(&r.name).await {
        Err(kube::Error::Api(s)) if count_unset(&s) => {
            return Ok(Err(Problem::ScaleNotSupported(format!(
                "{r}: spec.replicas is not set, so it runs its controller's default, which the \
                 operator could not give back (its /scale cannot be read: {}); set spec.replicas \
                 on it to schedule it",
                s.message
            ))));
        }
        scale => scale,
    };
    let view = match request("/scale").answer(scale)? {
        Ok(s) => ScaleView {
            uid: s.metadata.uid,
            resource_version: s.metadata.resource_version,
            replicas_setter: None,
            // `/scale` has no annotations: a group's record on the object is read below, where
            // a group may hold it.
            spec_replicas: s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            own_replicas: s.spec.and_then(|s| s.replicas).unwrap_or(0),
            status_replicas: s.status.map_or(0, |s| s.replicas),
            ready_replicas: None,
            requests: Requests::default(),
            labels: Default::default(),
        },
        Err(p) => return Ok(Err(p)),
    };
    // `/scale` carries no labels; whether a group selects the target needs them, and only a
    // namespace with a group of this kind pays the extra read.
    let grouped = ctx.groups.in_namespace(ns).iter().any(|(_, e)| {
        e.kinds
            .iter()
            .any(|k| k.group() == r.group() && k.kind() == r.kind)
    });
    if !grouped {
        return Ok(Ok(view));
    }
    Ok(request("")
        .answer(api.get_metadata(&r.name).await)?
        .map(|o| ScaleView {
            own_replicas: group::own_replicas(o.annotations(), view.spec_replicas),
            labels: o.metadata.labels.unwrap_or_default(),
            ..view
        }))
}

/// Sets `spec.replicas` through `/scale`, under the operator's field manager, which then owns
/// that field and nothing else. `/scale` never creates an object.
///
/// Server-side apply for the kinds built into the API server; a JSON merge patch for custom
/// resources, whose `/scale` the API server cannot apply to (it answers "request to convert
/// CR to an invalid group/version: autoscaling/v1").
pub(crate) async fn write(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    res: &Resolved,
    replicas: i32,
) -> Answer<()> {
    write_if_unchanged(ctx, ns, r, res, replicas, None).await
}

/// `write`, refused by the API server (409) if the target changed since it was read at
/// `read_at`: for a write decided by what it was then (a workload woken because it was at 0),
/// never over someone else's newer count.
pub(crate) async fn write_if_unchanged(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    res: &Resolved,
    replicas: i32,
    read_at: Option<&str>,
) -> Answer<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &res.resource);
    let built_in = matches!(r.group(), "" | "apps");
    ctx.metrics.write(
        &format!("{}/scale", res.resource.plural),
        if built_in { "apply" } else { "patch" },
    );
    let mut body = target::scale_body(&r.name, replicas);
    if let Some(rv) = read_at {
        body["metadata"]["resourceVersion"] = serde_json::json!(rv);
    }
    let sent = if built_in {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_scale(&r.name, &pp, &Patch::Apply(&body)).await
    } else {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let mut merge = serde_json::json!({"spec": {"replicas": replicas}});
        if let Some(rv) = read_at {
            merge["metadata"] = serde_json::json!({"resourceVersion": rv});
        }
        api.patch_scale(&r.name, &pp, &Patch::Merge(&merge)).await
    };
    let request = Request {
        verb: "patch",
        target: r,
        resource: &res.resource,
        subresource: "/scale",
        ns,
    };
    let produced = sent
        .as_ref()
        .ok()
        .and_then(|s| s.metadata.resource_version.clone());
    let answer = request.answer(sent)?;
    if answer.is_ok() {
        // Its echo through the target watch is then known for ours (see `on_target`).
        let key = OwnWrites::target_key(ns, r.group(), &r.kind, &r.name);
        ctx.own_writes
            .record(&key, OwnWrites::fingerprint(&replicas), produced.as_deref());
    }
    Ok(answer.map(|_| ()))
}

/// Resolves and reads a target, as one step: `Ok(Err)` is a problem to report.
pub(crate) async fn resolve_and_read(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
) -> Answer<(Resolved, ScaleView)> {
    let res = match ctx.discovery.resolve(r).await? {
        Ok(res) => res,
        Err(p) => return Ok(Err(p)),
    };
    if !res.has_scale {
        return Ok(Err(Problem::ScaleNotSupported(format!(
            "{} {} has no /scale subresource, so the operator cannot set its replicas; \
             target a Deployment, StatefulSet, ReplicaSet, HorizontalPodAutoscaler or a custom \
             resource whose CRD declares subresources.scale",
            r.api_version, r.kind
        ))));
    }
    Ok(read(ctx, ns, r, &res).await?.map(|view| (res, view)))
}

/// Whether the API server's answer to a read of `/scale` says the object's count is not set:
/// a 500, "the spec replicas field ... does not exist" (the CRD's specReplicasPath names a field
/// the object lacks). It runs its controller's default.
pub(crate) fn count_unset(s: &kube::core::Status) -> bool {
    s.code == 500 && s.message.contains("does not exist")
}

/// Why `r` is not there to be scheduled, if it is not (a read of its metadata): a TDSet that
/// another holds for it still says when nothing is there to hold.
pub(crate) async fn missing(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
) -> Result<Option<Problem>> {
    let res = match ctx.discovery.resolve(r).await? {
        Ok(res) => res,
        Err(p) => return Ok(Some(p)),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &res.resource);
    let request = Request {
        verb: "get",
        target: r,
        resource: &res.resource,
        subresource: "",
        ns,
    };
    Ok(match request.answer(api.get_metadata(&r.name).await)? {
        Err(p @ Problem::TargetNotFound(_)) => Some(p),
        // Anything else is the holder's to say.
        _ => None,
    })
}

/// The HPA (first by name) that scales `r`, from the cache.
pub(crate) fn hpa_scaling(ctx: &Context, ns: &str, r: &ScaleTargetRef) -> Option<String> {
    target::conflicting_hpa(r, &hpas_in(ctx, ns)).map(|h| h.name.clone())
}

/// The HPAs of a namespace, from the cache.
pub(crate) fn hpas_in(ctx: &Context, ns: &str) -> Vec<HpaView> {
    ctx.hpas
        .state()
        .iter()
        .filter(|h| h.namespace().as_deref() == Some(ns))
        .filter_map(|h| hpa_view(h))
        .collect()
}

pub(crate) fn hpa_view(h: &HorizontalPodAutoscaler) -> Option<HpaView> {
    let spec = h.spec.as_ref()?;
    Some(HpaView {
        name: h.name_any(),
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        target: ScaleTargetRef {
            api_version: spec
                .scale_target_ref
                .api_version
                .clone()
                .unwrap_or_default(),
            kind: spec.scale_target_ref.kind.clone(),
            name: spec.scale_target_ref.name.clone(),
        },
        current_replicas: h.status.as_ref().and_then(|s| s.current_replicas),
        own_min: group::own_floor(h.annotations(), spec.min_replicas.unwrap_or(1)),
        max_by_operator: h
            .metadata
            .managed_fields
            .as_deref()
            .is_some_and(|m| hpa::max_managed_by(m, FIELD_MANAGER)),
        scaled_object: hpa::scaled_object_of(h.owner_references()),
    })
}

/// What a live read of an HPA gives: its view, its uid, and who else last set its
/// `maxReplicas` (read before the operator's own write takes the field over).
pub(crate) type HpaRead = (HpaView, Option<String>, Option<gitops::Setter>);

/// Reads an HPA live (a cache may lag behind the operator's own last write).
pub(crate) async fn read_hpa(ctx: &Context, ns: &str, r: &ScaleTargetRef) -> Answer<HpaRead> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    let resource = ApiResource::erase::<HorizontalPodAutoscaler>(&());
    let request = Request {
        verb: "get",
        target: r,
        resource: &resource,
        subresource: "",
        ns,
    };
    Ok(request
        .answer(api.get(&r.name).await)?
        .and_then(|h| match hpa_view(&h) {
            Some(v) => {
                let object = object_of(ns, &r.name, (&resource.group, &resource.kind));
                let pointer = "/spec/maxReplicas";
                let setter = gitops::setter(&h.metadata, object, pointer, FIELD_MANAGER);
                Ok((v, h.uid(), setter))
            }
            None => Err(Problem::TargetNotFound(format!("{r} has no spec"))),
        }))
}

/// Sets an HPA's `maxReplicas` (a merge patch guarded by its uid, see
/// `hpa::max_replicas_patch`).
pub(crate) async fn write_max_replicas(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
    max: i32,
) -> Answer<()> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    ctx.metrics.write("horizontalpodautoscalers", "patch");
    let body = hpa::max_replicas_patch(uid, max);
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let sent = api.patch(&r.name, &pp, &Patch::Merge(&body)).await;
    hpa_written(sent, ns, r, "maxReplicas")
}

/// Sets an HPA's `spec.minReplicas` (server-side apply, guarded by the uid it was read with).
pub(crate) async fn write_min_replicas(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
    min: i32,
) -> Answer<()> {
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    ctx.metrics.write("horizontalpodautoscalers", "apply");
    let body = hpa::min_replicas_body(&r.name, uid, min);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let sent = api.patch(&r.name, &pp, &Patch::Apply(&body)).await;
    hpa_written(sent, ns, r, "minReplicas")
}

/// What a write of an HPA's `field` came to: refused (not granted), or the HPA gone or
/// replaced by another object of that name (the uid no longer matches), are problems.
fn hpa_written(
    sent: kube::Result<HorizontalPodAutoscaler>,
    ns: &str,
    r: &ScaleTargetRef,
    field: &str,
) -> Answer<()> {
    match sent {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Err(Problem::Forbidden(format!(
            "the operator may not patch HorizontalPodAutoscaler {} in namespace {ns}: {}; its ClusterRole \
             needs patch on autoscaling horizontalpodautoscalers",
            r.name, s.message
        )))),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => {
            Ok(Err(Problem::TargetNotFound(format!(
                "{r} was deleted (or replaced) while its {field} was being set"
            ))))
        }
        Err(e) => Err(Error::kube(format!("setting {field} of {r} in {ns}"))(e)),
    }
}

/// A fought-over object, as a GitOps tool's rules name it.
pub(super) fn object_of(ns: &str, name: &str, (group, kind): (&str, &str)) -> gitops::Object {
    gitops::Object {
        group: group.to_string(),
        kind: kind.to_string(),
        namespace: ns.to_string(),
        name: name.to_string(),
    }
}

/// The GitOps tool that last set the field at `pointer` (a JSON pointer) of object `name`,
/// read from the object itself: one GET, made only for a revert that continues a fight.
/// None when it is not a GitOps tool, or cannot be read now.
pub async fn gitops_writer(
    ctx: &Context,
    ns: &str,
    resource: &ApiResource,
    name: &str,
    pointer: &str,
) -> Option<(gitops::Writer, gitops::Object)> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, resource);
    let o = match api.get(name).await {
        Ok(o) => o,
        Err(e) => {
            tracing::debug!(error = %e, object = %name, "reading who set a field back");
            return None;
        }
    };
    let object = object_of(ns, name, (&resource.group, &resource.kind));
    gitops::setter(&o.metadata, object, pointer, FIELD_MANAGER)?.tool
}
