//! A KEDA ScaledObject on the wire: read live (no watch: KEDA's CRD may be absent, and the
//! TDSets that target one are few), written by merge patches guarded by its uid.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use super::target::{Request, object_of};
use crate::api::{KedaPause, ScaleTargetRef};
use crate::controller::state::{Answer, Context, Resolved};
use crate::error::Error;
use crate::status::Problem;
use crate::workload::gitops;
use crate::workload::group;
use crate::workload::keda::{self, ScaledObjectView};
use crate::workload::owned::FIELD_MANAGER;

/// A ScaledObject as read: its view, and who else last set its `minReplicaCount` and its
/// `maxReplicaCount` (read before the operator's own write takes the field over).
pub(crate) struct ScaledObjectRead {
    pub resource: Resolved,
    pub view: ScaledObjectView,
    pub min_setter: Option<gitops::Setter>,
    pub max_setter: Option<gitops::Setter>,
    /// The group that holds it, by its record (`schedule.rs/held-by`), if any.
    pub held_by: Option<String>,
}

/// Reads the ScaledObject `r` names, live.
pub(crate) async fn read(ctx: &Context, ns: &str, r: &ScaleTargetRef) -> Answer<ScaledObjectRead> {
    let resource = match ctx.discovery.resolve(r).await? {
        Ok(res) => res,
        Err(p) => return Ok(Err(p)),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource.resource);
    let request = Request {
        verb: "get",
        target: r,
        resource: &resource.resource,
        subresource: "",
        ns,
    };
    Ok(request.answer(api.get(&r.name).await)?.map(|o| {
        let object = object_of(ns, &r.name, (keda::GROUP, keda::KIND));
        let setter = |path| gitops::setter(&o.metadata, object.clone(), path, FIELD_MANAGER);
        let (min_setter, max_setter) = (
            setter("/spec/minReplicaCount"),
            setter("/spec/maxReplicaCount"),
        );
        let view = serde_json::to_value(&o)
            .map(|v| ScaledObjectView::from_object(&v))
            .unwrap_or_default();
        let held_by = o.annotations().get(group::HELD_BY).cloned();
        ScaledObjectRead {
            resource,
            view,
            min_setter,
            max_setter,
            held_by,
        }
    }))
}

/// Writes a plan's fields to the ScaledObject under field manager `manager` (see
/// `keda::patch`), refused by the API server if it changed since revision `read_at` (where
/// given): forbidden or gone is a problem to report; changed since (or replaced: another uid)
/// an error, so that the reconcile reads it again. The revision it wrote.
///
/// KEDA writes the ScaledObject's status every polling interval, which moves its revision too:
/// a write refused for that alone (read again, what the guard protects, its annotations,
/// counts, workload and uid, is as it was read) is sent once more at the new revision, rather
/// than failing the reconcile.
pub(crate) async fn write(
    ctx: &Context,
    ns: &str,
    (r, read, read_at): (&ScaleTargetRef, &ScaledObjectRead, Option<&str>),
    manager: &str,
    fields: (Option<&KedaPause>, Option<i32>, Option<i32>),
) -> Answer<Option<String>> {
    match patch(ctx, ns, r, read, read_at, manager, fields).await {
        Err(e) if e.is_conflict() && read_at.is_some() => {
            let fresh = match self::read(ctx, ns, r).await? {
                Ok(fresh) => fresh,
                Err(p) => return Ok(Err(p)),
            };
            let (was, now) = (&read.view, &fresh.view);
            let same = was.uid == now.uid
                && was.target == now.target
                && was.pause == now.pause
                && was.pause_ours == now.pause_ours
                && was.min_replica_count == now.min_replica_count
                && was.max_replica_count == now.max_replica_count
                && now.resource_version.as_deref() != read_at;
            if !same {
                return Err(e);
            }
            let at = now.resource_version.as_deref();
            patch(ctx, ns, r, &fresh, at, manager, fields).await
        }
        other => other,
    }
}

async fn patch(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    read: &ScaledObjectRead,
    read_at: Option<&str>,
    manager: &str,
    (pause, min, max): (Option<&KedaPause>, Option<i32>, Option<i32>),
) -> Answer<Option<String>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &read.resource.resource);
    ctx.metrics.write("scaledobjects", "patch");
    let body = keda::patch((read.view.uid.as_deref(), read_at), pause, min, max);
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    match api.patch(&r.name, &pp, &Patch::Merge(&body)).await {
        Ok(o) => Ok(Ok(o.metadata.resource_version)),
        Err(kube::Error::Api(s)) if s.is_forbidden() => Ok(Err(Problem::Forbidden(format!(
            "the operator may not patch ScaledObject {} in namespace {ns}: {}; its ClusterRole \
             needs patch on keda.sh scaledobjects (the chart grants it)",
            r.name, s.message
        )))),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Err(Problem::TargetNotFound(format!(
            "{r} was deleted while it was being written"
        )))),
        Err(e) => Err(Error::kube(format!("patching {r} in {ns}"))(e)),
    }
}

/// Whether HPA `name` is in the operator's cache (KEDA's, for a ScaledObject it runs).
pub(crate) fn hpa_cached(ctx: &Context, ns: &str, name: &str) -> bool {
    let hpa = kube::runtime::reflector::ObjectRef::new(name).within(ns);
    ctx.hpas.get(&hpa).is_some()
}

/// KEDA's version, from the labels on the HPA it made for the ScaledObject (in the cache).
pub(crate) fn version(ctx: &Context, ns: &str, hpa_name: &str) -> Option<(u32, u32)> {
    let hpa = ctx
        .hpas
        .get(&kube::runtime::reflector::ObjectRef::new(hpa_name).within(ns))?;
    keda::version_of(hpa.metadata.labels.as_ref()?)
}
