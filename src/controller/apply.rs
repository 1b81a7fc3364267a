//! The writes: owned objects through guarded create + server-side apply, and the TDSet's
//! status. Every write is skipped when the object already says what is wanted.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use super::bookkeeping::StatusWrite;
use super::context::{Change, Context, Outcome, Write};
use super::events::{EventType, Events, note, record_deployment_change};
use crate::api::{ScaleTargetRef, TDSet, TDSetStatus, TargetStatus};
use crate::error::{Error, Result};
use crate::memo::OwnWrites;
use crate::schedule::Evaluation;
use crate::status::{self, DEGRADED, Missing, Observed, Problem, reason};
use crate::workload::owned::{self, FIELD_MANAGER, OwnedWrite};
use crate::workload::savings::{self, Saved};
use crate::workload::target;

/// The owned mode (`container` or `template`): the Deployment, then the Service.
pub(super) async fn reconcile_owned(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    eval: &Evaluation,
    write: Write,
    events: &mut Events,
) -> Result<Outcome> {
    let name = tdset.name_any();
    let cached = ctx
        .deployments
        .get(&ObjectRef::new(&name).within(ns))
        .map(|c| c.object())
        .transpose()?;
    if write == Write::Never {
        // Suspended: report what is there, touch nothing.
        let workload = cached
            .as_ref()
            .filter(|d| owned::is_owned_by(*d, tdset))
            .map(|d| Observed::deployment(d, eval.replicas))
            .ok_or_else(|| Missing {
                reason: reason::DEPLOYMENT_MISSING,
                message: format!(
                    "no Deployment {name} of this TDSet exists (suspended: none is created)"
                ),
            });
        return Ok(Outcome {
            workload,
            problem: None,
            notices: vec![],
            target: None,
            retry: None,
            scaled: None,
            group: None,
            failed: false,
            saved: None,
        });
    }
    // An HPA that scales this Deployment sets its replicas: they are left to it (the two would
    // revert each other at every HPA sync), and the TDSet says so.
    let hpa = super::scale::hpa_scaling(
        ctx,
        ns,
        &ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: name.clone(),
        },
    );
    let cached_replicas = cached
        .as_ref()
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas);
    let replicas = match (&hpa, cached_replicas) {
        (Some(_), Some(n)) => n,
        _ => eval.replicas,
    };
    let desired =
        owned::desired_deployment(tdset, replicas)?.ok_or(Error::MissingField("spec.container"))?;
    let template_changed = cached
        .as_ref()
        .is_some_and(|c| !owned::only_replicas_differ(&desired, c));
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let missing = || Missing {
        reason: reason::DEPLOYMENT_MISSING,
        message: format!("no Deployment {name} of this TDSet exists"),
    };
    let before = cached_replicas;
    let mut scaled = None;
    let key = OwnWrites::key(ns, &name);
    let fingerprint = OwnWrites::fingerprint(&desired);
    let stale_but_written = cached.as_ref().is_some_and(|c| {
        ctx.own_writes
            .in_place(&key, fingerprint, c.meta().resource_version.as_deref())
    });
    let result = if stale_but_written {
        // Our own write is newer than the cache and still what is wanted: nothing to do, and
        // nothing to report twice. Its replica count is the one we wrote.
        let mut d = cached.clone().unwrap_or_default();
        if let Some(spec) = d.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
        Ok((d, Change::Unchanged))
    } else {
        ensure(ctx, tdset, &api, "deployments", desired, cached.as_ref()).await
    };
    let (workload, mut problem) = match result {
        Ok((d, change)) => {
            if change != Change::Unchanged {
                ctx.own_writes
                    .record(&key, fingerprint, d.meta().resource_version.as_deref());
            }
            if change == Change::Updated && before != Some(replicas) {
                scaled = Some(before.unwrap_or(0));
            }
            record_deployment_change(
                tdset,
                ctx,
                eval,
                cached.as_ref(),
                &change,
                template_changed,
                events,
            );
            (Ok(Observed::deployment(&d, eval.replicas)), None)
        }
        Err(e @ Error::ForeignObject { .. }) => (Err(missing()), Some(foreign_problem(&e))),
        // The API server rejected the pod template: say why, keep the Deployment as it is,
        // and look again when the spec changes (no retry storm).
        Err(Error::Kube {
            source: kube::Error::Api(s),
            ..
        }) if s.is_invalid() || s.code == 400 => {
            let message = format!(
                "the API server rejected the Deployment: {}; the Deployment is left as it is until spec.template is fixed",
                s.message
            );
            warn!(%message, "invalid pod template");
            let seen = cached
                .as_ref()
                .map(|d| Observed::deployment(d, eval.replicas));
            (
                seen.ok_or_else(missing),
                Some(Problem::InvalidTemplate(message)),
            )
        }
        Err(e) => return Err(e),
    };
    if let Some(h) = hpa {
        problem = problem.or(Some(Problem::ConflictingAutoscaler(format!(
            "HorizontalPodAutoscaler {h} scales Deployment {name}, which this TDSet runs; its replicas are \
             left to the HPA rather than fought over. To schedule the HPA's floor, run the workload \
             elsewhere and set spec.scaleTargetRef to {{apiVersion: autoscaling/v2, kind: \
             HorizontalPodAutoscaler, name: {h}}}"
        ))));
    }
    match ensure_service(tdset, ctx, ns, events).await {
        Ok(()) => {}
        Err(e @ Error::ForeignObject { .. }) => problem = problem.or(Some(foreign_problem(&e))),
        Err(Error::InvalidSpec(errors)) => {
            let text = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            problem = problem.or(Some(Problem::InvalidSpec(text)));
        }
        Err(e) => return Err(e),
    }
    Ok(Outcome {
        workload,
        problem,
        notices: vec![],
        target: None,
        retry: None,
        scaled,
        group: None,
        failed: false,
        saved: Some(owned_savings(tdset, eval.replicas)),
    })
}

/// An owned Deployment at `replicas` against the highest count its spec sets.
fn owned_savings(tdset: &TDSet, replicas: i32) -> Saved {
    Saved::removed(
        savings::highest_count(&tdset.spec),
        replicas,
        savings::owned_requests(&tdset.spec),
    )
}

/// The Degraded problem for an object of the owned name that belongs to someone else.
fn foreign_problem(e: &Error) -> Problem {
    Problem::ForeignObject(format!(
        "{e}; the operator will not adopt, scale or patch it. Delete or rename it, or rename the TDSet"
    ))
}

/// Makes an owned object match `desired`, writing only when it differs. Never writes to an
/// object of that name that this TDSet does not control.
pub(super) async fn ensure<K>(
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

pub(super) async fn ensure_service(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    events: &mut Events,
) -> Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let cached = ctx
        .services
        .get(&ObjectRef::new(&tdset.name_any()).within(ns))
        .map(|c| c.object())
        .transpose()?;
    match owned::desired_service(tdset)? {
        Some(desired) => {
            let (_, change) =
                ensure(ctx, tdset, &api, "services", desired, cached.as_ref()).await?;
            if change != Change::Unchanged {
                let verb = if change == Change::Created {
                    "created"
                } else {
                    "updated"
                };
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "ServiceApplied",
                    format!("{verb} Service {ns}/{}", tdset.name_any()),
                ));
            }
        }
        // spec.service was removed: delete the Service only if it is ours, and only that one.
        None => {
            if delete_owned(ctx, tdset, &api, "services", cached).await? {
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "ServiceDeleted",
                    format!(
                        "deleted Service {ns}/{} (spec.service removed)",
                        tdset.name_any()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Deletes `cached` if this TDSet owns it, guarded by its uid (so an object created meanwhile
/// under that name is never deleted). Whether this delete removed it.
async fn delete_owned<K>(
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

/// A TDSet that now references a target instead of running its own Deployment (its form
/// changed from `container`/`template` to `scaleTargetRef`): the Deployment and Service it
/// owns are deleted, so nothing it no longer describes keeps running.
pub(super) async fn remove_owned(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    events: &mut Events,
) -> Result<()> {
    let name = tdset.name_any();
    let deployment = ctx
        .deployments
        .get(&ObjectRef::new(&name).within(ns))
        .map(|c| c.object())
        .transpose()?;
    let service = ctx
        .services
        .get(&ObjectRef::new(&name).within(ns))
        .map(|c| c.object())
        .transpose()?;
    let mut removed = vec![];
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    if delete_owned(ctx, tdset, &deployments, "deployments", deployment).await? {
        removed.push("Deployment");
    }
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    if delete_owned(ctx, tdset, &services, "services", service).await? {
        removed.push("Service");
    }
    if !removed.is_empty() {
        events.push(note(tdset, EventType::Normal,
            "OwnedDeleted",
            format!(
                "deleted {} {ns}/{name}: the TDSet now scales spec.scaleTargetRef and runs nothing of its own",
                removed.join(" and ")
            )));
    }
    Ok(())
}

/// Records a failed reconcile: Degraded=True (ReconcileError), the rest of status kept as the
/// last successful reconcile left it (it is still the best knowledge there is).
pub(super) async fn report_failure(
    tdset: &TDSet,
    ctx: &Context,
    problem: &Problem,
    events: &mut Events,
) -> Result<()> {
    let previous = ctx.statuses.current(tdset);
    let new_status = status::with_failure(
        previous.as_ref(),
        tdset.meta().generation,
        problem,
        ctx.clock.now(),
    );
    write_status(tdset, ctx, previous.as_ref(), new_status, events).await
}

/// Writes the TDSet's status as it stands with `target` recorded in it, and returns once the
/// API server has it: a count to restore must be durable before the write that changes it
/// (a crash, a restart or a change of leader between the two would otherwise take the
/// operator's own count for the original).
pub(super) async fn write_target_now(
    tdset: &TDSet,
    ctx: &Context,
    target: &TargetStatus,
    sets: i32,
) -> Result<()> {
    let mut status = ctx.statuses.current(tdset).unwrap_or_default();
    status.target = Some(target.clone());
    status.desired_replicas = Some(sets);
    debug!(
        ?target,
        "recording the target's original count before changing it"
    );
    write_now(tdset, ctx, status).await
}

/// Writes `status` past the bookkeeping lane's queue and returns once the API server has it.
async fn write_now(tdset: &TDSet, ctx: &Context, status: crate::api::TDSetStatus) -> Result<()> {
    let (Some(uid), Some(ns)) = (tdset.meta().uid.clone(), tdset.namespace()) else {
        return Err(Error::MissingField("metadata.uid"));
    };
    ctx.lane
        .write_now(
            tdset,
            StatusWrite {
                namespace: ns,
                name: tdset.name_any(),
                uid,
                status: std::sync::Arc::new(status),
                attempts: 0,
            },
        )
        .await
}

/// Makes `status.group` durable before a group's first workload write, and each custom kind in
/// `status.group.heldKinds` before its first record: a change of form or of `kinds` must find
/// what the TDSet held (and give it back), even if the operator crashed, or lost its lease,
/// before the status of that first write was sent.
pub(super) async fn write_group_now(tdset: &TDSet, ctx: &Context, kinds: &[String]) -> Result<()> {
    let covered = |s: &crate::api::TDSetStatus| {
        s.group
            .as_ref()
            .is_some_and(|g| kinds.iter().all(|k| g.held_kinds.contains(k)))
    };
    // The current status too: one queued after the durable one may drop a kind.
    let current = ctx.statuses.current(tdset);
    if ctx.statuses.durable(tdset).is_some_and(|s| covered(&s))
        && current.as_ref().is_some_and(covered)
    {
        return Ok(());
    }
    let mut status = current.unwrap_or_default();
    let group = status.group.get_or_insert_with(Default::default);
    group.held_kinds.extend(kinds.iter().cloned());
    group.held_kinds.sort();
    group.held_kinds.dedup();
    write_now(tdset, ctx, status).await
}

/// Patches status only when it differs from `previous` (from `StatusMemo::current`), and
/// publishes a Warning when Degraded's reason or message changes (so a persisting problem is
/// reported once, not every reconcile).
pub(super) async fn write_status(
    tdset: &TDSet,
    ctx: &Context,
    previous: Option<&TDSetStatus>,
    new: TDSetStatus,
    events: &mut Events,
) -> Result<()> {
    if previous == Some(&new) {
        return Ok(());
    }
    let old_degraded = status::find(previous, DEGRADED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    let new_degraded = status::find(Some(&new), DEGRADED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    debug!(old = ?previous, new = ?new, "status differs; queued");
    let (Some(uid), Some(ns)) = (tdset.meta().uid.clone(), tdset.namespace()) else {
        return Err(Error::MissingField("metadata.uid"));
    };
    ctx.lane
        .status(
            tdset,
            StatusWrite {
                namespace: ns,
                name: tdset.name_any(),
                uid,
                status: std::sync::Arc::new(new),
                attempts: 0,
            },
        )
        .await;
    if old_degraded != new_degraded
        && let Some((state, reason, message)) = new_degraded
        && (state == "True" || reason != status::reason::AS_EXPECTED)
    {
        events.push(note(tdset, EventType::Warning, &reason, message));
    }
    Ok(())
}
