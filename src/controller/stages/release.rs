//! Letting go of a target: when a TDSet is deleted, or stops referencing the object it
//! scaled (a new `scaleTargetRef`, another form). A group gives every workload that carries
//! its record its own count back, always. `onDelete: Restore` puts the count recorded
//! in `status.target` back, onto that very object (kind, name, uid), never onto whatever the
//! spec names now. An HPA's target that the schedule put to sleep (an HPA cannot hold 0) is
//! woken whatever `onDelete` says. A finalizer holds the deletion for this; it never blocks
//! it for a target that is gone or that the operator may not write: it says so in an Event
//! and lets go.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use crate::api::{GroupStatus, OnDelete, ScaleTargetRef, TDSet, TargetStatus};
use crate::controller::forms::group;
use crate::controller::io::intercept;
use crate::controller::io::owned::delete_owned;
use crate::controller::io::tdset::{RESTORE_FINALIZER, set_finalizer};
use crate::controller::kinds;
use crate::controller::kinds::hold::Letting;
use crate::controller::kinds::list::let_go_writes;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::Context;
use crate::error::Result;
use crate::status::Problem;
use crate::workload::Source;
use crate::workload::intercept::{SERVICE_NAME_LABEL, TDSET_LABEL, retired_at};

fn wants_finalizer(tdset: &TDSet) -> bool {
    tdset.spec.scale_target_selector.is_some()
        || tdset
            .spec
            .scale_target_ref
            .as_ref()
            .is_some_and(|r| let_go_writes(r, restores(tdset)))
}

/// Whether the TDSet held a group (its status says so) and may have left records on workloads.
fn held_group(tdset: &TDSet, ctx: &Context) -> bool {
    tdset.spec.scale_target_selector.is_some()
        || ctx
            .statuses
            .current(tdset)
            .is_some_and(|s| s.group.is_some())
}

/// Gives the group's workloads their own count back; what could not be is said in an Event
/// and returned (a deletion does not wait for it: the workload is gone, or the operator may
/// not write it).
async fn release_group(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    why: &str,
    events: &mut Events,
) -> Result<group::Release> {
    let sel = tdset.spec.scale_target_selector.as_ref();
    let release = group::release_all(tdset, ctx, ns, sel, events).await?;
    // Tried again every few seconds while an autoscaler is waited for: said once.
    let said = if release.repeated {
        &[][..]
    } else {
        &release.problems[..]
    };
    for p in said {
        warn!(problem = %p.message(), why, "could not give a workload its own count back");
        events.push(note(
            tdset,
            EventType::Warning,
            "RestoreFailed",
            format!(
                "a workload of the group was not given its own count back (the TDSet was {why}): {}",
                p.message()
            ),
        ));
    }
    Ok(release)
}

/// How soon to look again where a workload of the group is not let go of yet (its
/// autoscaler not yet running it again): the TDSet is kept, bounded, until then.
fn not_over(release: &group::Release) -> Option<std::time::Duration> {
    if !release.waiting.is_empty() {
        debug!(workloads = ?release.waiting, "waiting for their autoscaler to run them again");
    }
    release.wait
}

fn restores(tdset: &TDSet) -> bool {
    tdset.spec.on_delete == Some(OnDelete::Restore)
}

fn has_finalizer(tdset: &TDSet) -> bool {
    tdset.finalizers().iter().any(|f| f == RESTORE_FINALIZER)
}

/// What the TDSet drove before and no longer describes is let go of first (suspended or not:
/// letting go is not scheduling), so a target's record is never overwritten before it has been
/// given back: a retargeted or form-changed target, a group's workloads, the owned Deployment
/// and Service of a TDSet that now references its workload. Then the finalizer is set as the
/// spec asks.
///
/// Returns the group the TDSet still holds when it left the group form and not every
/// workload could be given back (the status keeps it, so the release is tried again), and how
/// soon to look again where letting go of the previous target is not over yet: then nothing
/// else is written until it is.
pub(crate) async fn previous(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    source: Source<'_>,
    events: &mut Events,
) -> Result<Previous> {
    let previous = release_previous(tdset, ctx, ns, events).await?;
    if previous.wait.is_some() {
        return Ok(previous);
    }
    // Decided before anything is removed (nothing removed changes it).
    let finalizer = wants_finalizer(tdset) || held_group(tdset, ctx);
    // Every form but the two that own their Deployment: what they owned goes.
    if !source.is_owned() {
        remove_owned(tdset, ctx, ns, events).await?;
    }
    // Adds the finalizer when `onDelete: Restore` asks for it, removes it when it no longer
    // does. A group left for another form keeps it while its status still holds the group
    // (not every workload had its own count back): a deletion then still gives them back.
    if finalizer != has_finalizer(tdset) {
        set_finalizer(tdset, ctx, ns, finalizer).await?;
    }
    Ok(previous)
}

/// What letting go of what a TDSet no longer describes came to (see `previous`).
#[derive(Debug, Default)]
pub(crate) struct Previous {
    pub(crate) unreleased: Option<(GroupStatus, Problem)>,
    pub(crate) wait: Option<std::time::Duration>,
}

/// A TDSet that now references a target instead of running its own Deployment (its form
/// changed from `container`/`template` to `scaleTargetRef`): the Deployment and Service it
/// owns are deleted, so nothing it no longer describes keeps running.
async fn remove_owned(tdset: &TDSet, ctx: &Context, ns: &str, events: &mut Events) -> Result<()> {
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

/// A TDSet being deleted: let go of its target, then of the TDSet. Returns how soon to look
/// again where letting go is not over yet (the finalizer stays until then).
pub(crate) async fn on_delete(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    events: &mut Events,
) -> Result<Option<std::time::Duration>> {
    if !has_finalizer(tdset) {
        // Owned objects go with the garbage collector; a target is kept as it is.
        return Ok(None);
    }
    if held_group(tdset, ctx)
        && let Some(wait) = not_over(&release_group(tdset, ctx, ns, "deleted", events).await?)
    {
        return Ok(Some(wait));
    }
    match ctx.statuses.current(tdset).and_then(|s| s.target) {
        Some(recorded) => {
            if let Some(wait) = let_go(tdset, ctx, ns, &recorded, "deleted", events).await? {
                return Ok(Some(wait));
            }
        }
        None if restores(tdset) => {
            let what = tdset
                .spec
                .scale_target_ref
                .as_ref()
                .map_or_else(|| "the target".to_string(), ToString::to_string);
            events.push(note(tdset, EventType::Warning,
                "RestoreFailed",
                format!("no original count of {what} was recorded, so there is nothing to restore; the TDSet is deleted anyway")));
        }
        None => {}
    }
    if let Some(wait) = woken_behind_slices(tdset, ctx, ns, events).await? {
        return Ok(Some(wait));
    }
    set_finalizer(tdset, ctx, ns, false).await?;
    Ok(None)
}

/// How long a deleted TDSet waits at most, its slices in the path, for the workload it woke
/// on the way out to have ready endpoints of its own.
const SLICES_WAIT_AT_MOST: std::time::Duration = std::time::Duration::from_secs(120);
/// How often it looks meanwhile (an endpoint's readiness reaches its slice a moment after the
/// pod's).
const SLICES_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// A TDSet deleted while asleep behind the wake proxy, its workload woken on the way out: the
/// garbage collector takes its slices with it, so the finalizer stays while a Service they
/// stand in for has no ready endpoint of its own yet (else it would have none at all), for
/// `SLICES_WAIT_AT_MOST` at most (a workload given back 0 never has one). How soon to look
/// again, or `None`: let go.
async fn woken_behind_slices(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    events: &mut Events,
) -> Result<Option<std::time::Duration>> {
    let name = tdset.name_any();
    let services: BTreeSet<String> = (ctx.wake_slices.state().iter())
        .filter(|s| s.namespace().as_deref() == Some(ns))
        .filter(|s| s.labels().get(TDSET_LABEL) == Some(&name))
        .filter(|s| !s.endpoints.is_empty() && retired_at(s).is_none())
        .filter_map(|s| s.labels().get(SERVICE_NAME_LABEL).cloned())
        .collect();
    let key = format!("{ns}/{name}/deleted-behind-slices");
    if services.is_empty() {
        return Ok(None);
    }
    let waited = ctx.contest(&key, |c| c.seen_for(tokio::time::Instant::now()));
    for service in &services {
        let trusted = ctx.trusted_endpoint_managers();
        if intercept::own_ready(&ctx.client, ns, service, trusted).await? {
            continue;
        }
        if waited < SLICES_WAIT_AT_MOST {
            return Ok(Some(SLICES_RECHECK));
        }
        events.push(note(
            tdset,
            EventType::Warning,
            "WakeSlicesReleased",
            format!(
                "Service {service} has no ready endpoint of its own {}s after the TDSet's \
                 deletion; its wake-proxy slice goes with the TDSet all the same",
                SLICES_WAIT_AT_MOST.as_secs()
            ),
        ));
    }
    // The wait's memory goes with the TDSet (`Context::forget`); kept if the finalizer's
    // removal fails, so the bound is not started again.
    Ok(None)
}

/// The TDSet no longer references the target its status records (a new `scaleTargetRef`,
/// or another form): that target is let go of as a deletion would, before anything else is
/// written. The status that names the new target (or none) follows from this reconcile.
///
/// Returns the group the TDSet still holds when it left the group form and not every
/// workload could be given back (the status keeps it, so the release is tried again), and how
/// soon to look again where letting go of the target is not over yet.
async fn release_previous(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    events: &mut Events,
) -> Result<Previous> {
    let mut unreleased = None;
    if tdset.spec.scale_target_selector.is_none() && held_group(tdset, ctx) {
        // The group form was left: its workloads were held under its old selector, which is
        // gone, so every kind that can carry a record is looked at.
        // Kept while a workload was refused its count back, or a kind that may carry records
        // could not be listed (not granted): until then its workloads may sleep on. A kind
        // whose CRD is gone does not keep it (its records went with its objects).
        let release = release_group(tdset, ctx, ns, "given another form", events).await?;
        if let Some(wait) = not_over(&release) {
            // The status keeps the group (nothing else is written) until it is over.
            return Ok(Previous {
                unreleased: None,
                wait: Some(wait),
            });
        }
        if release.stuck
            && let Some(first) = release.problems.into_iter().next()
        {
            let group = ctx.statuses.current(tdset).and_then(|s| s.group);
            unreleased = group.map(|g| (g, first));
        }
    }
    let mut wait = None;
    if let Some(recorded) = ctx.statuses.current(tdset).and_then(|s| s.target) {
        let still = tdset
            .spec
            .scale_target_ref
            .as_ref()
            .is_some_and(|r| recorded.names(r));
        if !still {
            wait = let_go(tdset, ctx, ns, &recorded, "retargeted", events).await?;
        }
    }
    Ok(Previous { unreleased, wait })
}

/// Puts `recorded` back as `onDelete` asks (and wakes what the schedule left asleep through
/// it), reporting what was done, or why not, in an Event. Returns how soon to look again where
/// letting go is not over yet (an autoscaler not yet running the workload again): the TDSet is kept
/// until then.
async fn let_go(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    recorded: &TargetStatus,
    why: &str,
    events: &mut Events,
) -> Result<Option<std::time::Duration>> {
    let r = ScaleTargetRef {
        api_version: recorded.api_version.clone(),
        kind: recorded.kind.clone(),
        name: recorded.name.clone(),
    };
    let letting = Letting {
        tdset,
        ctx,
        ns,
        recorded,
        restore: restores(tdset),
        deleting: why == "deleted",
    };
    let verb = if letting.restore {
        "restore"
    } else {
        "let go of"
    };
    match kinds::list::let_go(&letting, &r).await? {
        Ok(go) => {
            if let Some((reason, what)) = go.not_resumed {
                warn!(%what, why, "the workload's autoscaler did not run it again");
                events.push(note(tdset, EventType::Warning, reason, what));
            }
            if let Some(done) = go.done {
                info!(%done, why, "let go of the target");
                events.push(note(
                    tdset,
                    EventType::Normal,
                    "Restored",
                    format!(
                        "{done} (the TDSet was {why}; onDelete: {})",
                        on_delete_name(tdset)
                    ),
                ));
            }
            Ok(go.wait)
        }
        Err(p) => {
            warn!(problem = %p.message(), why, "could not let go of the target as asked");
            events.push(note(
                tdset,
                EventType::Warning,
                "RestoreFailed",
                format!(
                    "could not {verb} {r}: {}; it was not restored (the TDSet was {why})",
                    p.message()
                ),
            ));
            Ok(None)
        }
    }
}

fn on_delete_name(tdset: &TDSet) -> &'static str {
    if restores(tdset) { "Restore" } else { "Keep" }
}
