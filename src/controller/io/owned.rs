//! Guarded writes of the objects a TDSet owns (its Deployment and Service): a create that
//! never overwrites, a `/scale` or server-side apply carrying the uid it was planned from, a
//! delete guarded by that uid. Client calls only: what a write means is the form's to say.

use std::fmt::Debug;

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use crate::api::TDSet;
use crate::controller::state::Context;
use crate::error::{Error, Result};
use crate::workload::owned::{self, FIELD_MANAGER, OwnedWrite};
use crate::workload::target;

/// What happened to an owned object in this reconcile.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Unchanged,
    Created,
    Updated,
}

/// Makes an owned object match `desired`, writing only when it differs. Never writes to an
/// object of that name that this TDSet does not control.
pub(crate) async fn ensure<K>(
    ctx: &Context,
    tdset: &TDSet,
    api: &Api<K>,
    resource: &'static str,
    mut desired: K,
    cached: Option<&K>,
) -> Result<(K, Change)>
where
    K: Resource<DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = desired.name_any();
    let ns = desired.namespace().unwrap_or_default();
    let foreign = || Error::ForeignObject {
        kind: K::KIND,
        namespace: ns.clone(),
        name: name.clone(),
    };
    let observed = match cached {
        Some(o) => o.clone(),
        None => {
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            ctx.metrics.write(resource, "create");
            match api.create(&pp, &desired).await {
                Ok(created) => return Ok((created, Change::Created)),
                // The cache had not seen it: read the real thing and decide from that.
                Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => {
                    api.get(&name).await.map_err(Error::kube(format!(
                        "reading existing {resource} {ns}/{name}"
                    )))?
                }
                Err(e) => return Err(Error::kube(format!("creating {resource} {ns}/{name}"))(e)),
            }
        }
    };
    if !owned::is_owned_by(&observed, tdset) {
        return Err(foreign());
    }
    let uid = observed.meta().uid.clone();
    match owned::owned_write(&desired, &observed) {
        OwnedWrite::None => return Ok((observed, Change::Unchanged)),
        OwnedWrite::Scale(replicas) => {
            let scaled = scale(ctx, api, resource, &name, uid.as_deref(), replicas).await?;
            return Ok((scaled_copy(observed, replicas, &scaled)?, Change::Updated));
        }
        // A scale removes nothing, so only other changes need the fields a create left under
        // an Update entry (see `owned::handed_over`). Deferring it to here spares a write
        // per created object; spec changes are rare.
        OwnedWrite::Apply => hand_over_to_apply(ctx, api, resource, &name, uid.as_deref()).await?,
    }
    // The uid turns the apply into "only if it is still the object I looked at".
    desired.meta_mut().uid = uid;
    ctx.metrics.write(resource, "apply");
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(Error::kube(format!("applying {resource} {ns}/{name}")))?;
    Ok((applied, Change::Updated))
}

/// Sets an owned object's replicas through `/scale` under the operator's field manager. The
/// uid makes it "only if it is still the object I looked at": the API server refuses a
/// `/scale` write whose uid is not the object's.
async fn scale<K>(
    ctx: &Context,
    api: &Api<K>,
    resource: &'static str,
    name: &str,
    uid: Option<&str>,
    replicas: i32,
) -> Result<Scale>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    let mut body = target::scale_body(name, replicas);
    body["metadata"]["uid"] = serde_json::json!(uid);
    ctx.metrics.write(&format!("{resource}/scale"), "apply");
    api.patch_scale(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(Error::kube(format!("scaling {resource} {name}")))
}

/// The object as a `/scale` write left it: `observed` with the new replica count and the
/// resourceVersion the write returned (what read-your-own-writes compares the cache with).
fn scaled_copy<K: Serialize + DeserializeOwned>(
    observed: K,
    replicas: i32,
    scale: &Scale,
) -> Result<K> {
    let serialize = |source| Error::Serialize {
        what: "a scaled object",
        source,
    };
    let mut value = serde_json::to_value(observed).map_err(serialize)?;
    value["spec"]["replicas"] = serde_json::json!(replicas);
    value["metadata"]["resourceVersion"] = serde_json::json!(scale.metadata.resource_version);
    serde_json::from_value(value).map_err(serialize)
}

/// Hands the fields a create left under our Update entry to our Apply entry, if there is
/// such an entry. Reads the live object (the caches drop managedFields) and patches only if
/// neither its uid nor its resourceVersion changed meanwhile, so no other manager's entry is
/// overwritten; retried a few times when another write got in between.
async fn hand_over_to_apply<K>(
    ctx: &Context,
    api: &Api<K>,
    resource: &'static str,
    name: &str,
    uid: Option<&str>,
) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let live = api.get(name).await.map_err(Error::kube(format!(
            "reading {resource} {name} to hand its fields to the apply manager"
        )))?;
        let meta = live.meta();
        if meta.uid.as_deref() != uid {
            // Replaced meanwhile: the uid-guarded apply that follows refuses it.
            return Ok(());
        }
        let Some(fields) = meta.managed_fields.as_deref().and_then(owned::handed_over) else {
            return Ok(());
        };
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/uid", "value": meta.uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version},
            {"op": "replace", "path": "/metadata/managedFields", "value": fields},
        ]))
        .map_err(|source| Error::Serialize {
            what: "managedFields patch",
            source,
        })?;
        ctx.metrics.write(resource, "patch");
        match api
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(()),
            // A failed test op (422) or a conflict (409): someone wrote in between; look again.
            Err(kube::Error::Api(s))
                if (s.is_conflict() || s.is_invalid()) && attempt < ATTEMPTS =>
            {
                debug!(
                    resource,
                    name, attempt, "object changed during the hand-over; retrying"
                );
            }
            Err(e) => {
                return Err(Error::kube(format!(
                    "handing {resource} {name} to the apply manager"
                ))(e));
            }
        }
    }
    Ok(())
}

/// Deletes `cached` if this TDSet owns it, guarded by its uid (so an object created meanwhile
/// under that name is never deleted). Whether this delete removed it.
pub(crate) async fn delete_owned<K>(
    ctx: &Context,
    tdset: &TDSet,
    api: &Api<K>,
    plural: &str,
    cached: Option<K>,
) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(object) = cached.filter(|o| owned::is_owned_by(o, tdset)) else {
        return Ok(false);
    };
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: object.meta().uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    ctx.metrics.write(plural, "delete");
    match api.delete(&object.name_any(), &dp).await {
        Ok(_) => Ok(true),
        // Already gone (or replaced): the goal is reached, but not by this delete.
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(false),
        Err(e) => Err(Error::kube(format!(
            "deleting {plural} {}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        ))(e)),
    }
}
