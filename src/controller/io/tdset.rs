//! Writes to the TDSet itself: a status made durable before the workload write that needs it
//! (past the lane's queue), a status queued on the lane, and the finalizer.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::debug;

use crate::api::{TDSet, TDSetStatus, TargetStatus};
use crate::controller::lane::StatusWrite;
use crate::controller::state::Context;
use crate::error::{Error, Result};
use crate::workload::owned::FIELD_MANAGER;

/// The finalizer the operator sets on TDSets with `onDelete: Restore`, on HPA floors, and on
/// groups.
pub const RESTORE_FINALIZER: &str = "schedule.rs/restore-target";

/// Writes the TDSet's status as it stands with `target` recorded in it, and returns once the
/// API server has it: a count to restore must be durable before the write that changes it
/// (a crash, a restart or a change of leader between the two would otherwise take the
/// operator's own count for the original).
pub(crate) async fn write_target_now(
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
async fn write_now(tdset: &TDSet, ctx: &Context, status: TDSetStatus) -> Result<()> {
    let write = status_write(tdset, status)?;
    ctx.lane.write_now(tdset, write).await
}

/// Makes `status.group` durable before a group's first workload write, and each custom kind in
/// `status.group.heldKinds` before its first record: a change of form or of `kinds` must find
/// what the TDSet held (and give it back), even if the operator crashed, or lost its lease,
/// before the status of that first write was sent.
pub(crate) async fn write_group_now(tdset: &TDSet, ctx: &Context, kinds: &[String]) -> Result<()> {
    let covered = |s: &TDSetStatus| {
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

/// Queues `status` on the lane (sent after the workload writes, coalesced per TDSet).
pub(crate) async fn queue_status(tdset: &TDSet, ctx: &Context, status: TDSetStatus) -> Result<()> {
    let write = status_write(tdset, status)?;
    ctx.lane.status(tdset, write).await;
    Ok(())
}

fn status_write(tdset: &TDSet, status: TDSetStatus) -> Result<StatusWrite> {
    let (Some(uid), Some(ns)) = (tdset.meta().uid.clone(), tdset.namespace()) else {
        return Err(Error::MissingField("metadata.uid"));
    };
    Ok(StatusWrite {
        namespace: ns,
        name: tdset.name_any(),
        uid,
        status: Arc::new(status),
        attempts: 0,
    })
}

/// Sets or clears the finalizer with server-side apply: the operator's field manager owns its
/// own item of `metadata.finalizers` (a set), so other finalizers are never touched.
pub(crate) async fn set_finalizer(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    present: bool,
) -> Result<()> {
    let finalizers: Vec<&str> = if present {
        vec![RESTORE_FINALIZER]
    } else {
        vec![]
    };
    let body = json!({
        "apiVersion": "schedule.rs/v1",
        "kind": "TDSet",
        "metadata": {"name": tdset.name_any(), "uid": tdset.meta().uid, "finalizers": finalizers},
    });
    ctx.metrics.write("tdsets", "apply");
    let api: Api<TDSet> = Api::namespaced(ctx.client.clone(), ns);
    match api
        .patch(
            &tdset.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted meanwhile: nothing to hold any more.
        Err(kube::Error::Api(s)) if !present && (s.is_not_found() || s.is_conflict()) => Ok(()),
        Err(e) => Err(Error::kube(format!(
            "{} the finalizer of TDSet {ns}/{}",
            if present { "adding" } else { "removing" },
            tdset.name_any()
        ))(e)),
    }
}
