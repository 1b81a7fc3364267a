//! `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`); a floor of 0
//! puts the HPA's target to sleep (an HPA cannot hold 0).

use tracing::debug;

use super::Turn;
use super::claims;
use super::events::record_scale;
use super::target::{Record, ensure_durable, problem_outcome, target_status};
use crate::api::{Asleep, ScaleTargetRef};
use crate::controller::io::target::{
    read_hpa, resolve_and_read, write, write_if_unchanged, write_min_replicas,
};
use crate::controller::lane::{EventType, note};
use crate::controller::state::{Answer, Context, Outcome, Resolved, Scaled, Write};
use crate::error::Result;
use crate::status::{Notice, Observed, Problem};
use crate::workload::hpa::{self, HpaView};
use crate::workload::savings::{Requests, Saved};

/// The field this form sets.
const FIELD: &str = "spec.minReplicas";

/// The HPA's own target, as read for its count: a floor of 0 is the target asleep.
struct HpaTarget {
    reference: ScaleTargetRef,
    uid: Option<String>,
    resource: Option<Resolved>,
    replicas: Option<i32>,
    /// Its ready replicas, when its kind reports them (what a warm-up measures).
    ready: Option<i32>,
    /// Why its count could not be read.
    unreadable: Option<Problem>,
    requests: Requests,
}

/// `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`).
pub(crate) async fn reconcile(mut turn: Turn<'_>, r: &ScaleTargetRef) -> Result<Outcome> {
    let Turn {
        tdset,
        ctx,
        ns,
        eval,
        write: _,
        events: _,
    } = turn;
    if let Some(p) = claims::held_elsewhere(tdset, ctx, ns, r) {
        return claims::claimed_outcome(tdset, ctx, ns, p, r).await;
    }
    let (hpa, uid) = match read_hpa(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => {
            let recorded = target_status(tdset, ctx, ns, r, FIELD, None).await?;
            return Ok(problem_outcome(p, r, recorded.status));
        }
    };
    // A group's floor on it is not its own (see `group::own_floor`), nor another TDSet's.
    let own = claims::own_count(tdset, ctx, ns, r, uid.as_deref(), hpa.min(), hpa.own_min);
    let observed = Some((own, uid.as_deref()));
    let record = target_status(tdset, ctx, ns, r, FIELD, observed).await?;
    let reference = hpa.target.clone();
    let target = match resolve_and_read(ctx, ns, &reference).await? {
        Ok((res, view)) => HpaTarget {
            reference,
            uid: view.uid,
            resource: Some(res),
            replicas: Some(view.spec_replicas),
            ready: view.ready_replicas,
            unreadable: None,
            requests: view.requests,
        },
        Err(p) => {
            debug!(problem = %p.message(), "the HPA's target cannot be read");
            HpaTarget {
                reference,
                uid: None,
                resource: None,
                replicas: None,
                ready: None,
                unreadable: Some(p),
                requests: Requests::default(),
            }
        }
    };
    // The HPA points at another workload than the one this TDSet put to sleep through it (or
    // that one was replaced): it is woken to the HPA's own floor first, suspended or not
    // (letting go is not scheduling); nobody else would.
    let mut record = record;
    if let Some(left) = record
        .status
        .asleep
        .clone()
        .filter(|a| !asleep_is(a, &target.reference, target.uid.as_deref()))
    {
        let to = record.status.original_replicas.unwrap_or(1).max(1);
        match wake_asleep(ctx, ns, &left, to).await? {
            Ok(Some(done)) => turn.events.push(note(
                tdset,
                EventType::Normal,
                "Restored",
                format!(
                    "{done}: HorizontalPodAutoscaler {} no longer scales it",
                    r.name
                ),
            )),
            Ok(None) => {}
            // Gone, or not ours to write: nothing is left asleep by this TDSet.
            Err(p) => debug!(problem = %p.message(), "the workload left asleep cannot be woken"),
        }
        record.status.asleep = None;
    }
    let mut plan = hpa::plan(eval.replicas, &hpa, target.replicas);
    if turn.write == Write::Never {
        plan.min_replicas = None;
        plan.scale_target = None;
    }
    apply(&mut turn, r, hpa, uid, record, target, plan).await
}

/// Writes what the plan asks for (the floor, then the target's count), the HPA's own floor
/// made durable first.
async fn apply(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    mut hpa: HpaView,
    uid: Option<String>,
    mut record: Record,
    mut target: HpaTarget,
    plan: hpa::FloorPlan,
) -> Result<Outcome> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    if plan.scale_target == Some(0) {
        // Which workload this TDSet puts to sleep, durable before it does: whatever happens
        // to the HPA (deleted, pointed elsewhere), the workload is woken.
        let asleep = Some(Asleep {
            target: target.reference.clone(),
            uid: target.uid.clone(),
        });
        if record.status.asleep != asleep {
            record.status.asleep = asleep;
            record.durable = false;
        }
    }
    if plan.min_replicas.is_some() || plan.scale_target.is_some() {
        ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
    }
    let (floor_before, target_before) = (hpa.min(), target.replicas);
    if let Some(min) = plan.min_replicas {
        if let Err(p) = write_min_replicas(ctx, ns, r, uid.as_deref(), min).await? {
            return Ok(problem_outcome(p, r, record.status));
        }
        let change = format!("set HorizontalPodAutoscaler {} minReplicas", r.name);
        turn.events
            .push(record_scale(ctx, tdset, &change, hpa.min(), min, eval));
        hpa.min_replicas = Some(min);
    }
    if let (Some(n), Some(res)) = (plan.scale_target, target.resource.as_ref()) {
        if let Err(p) = write(ctx, ns, &target.reference, res, n).await? {
            return Ok(problem_outcome(p, r, record.status));
        }
        let change = format!(
            "scaled {} (the target of HorizontalPodAutoscaler {})",
            target.reference, r.name
        );
        let from = target.replicas.unwrap_or(0);
        turn.events
            .push(record_scale(ctx, tdset, &change, from, n, eval));
        target.replicas = Some(n);
        if n > 0 {
            record.status.asleep = None;
        }
    }
    // The count before: the target's when it was put to sleep or woken, else the floor's.
    let scaled = plan
        .scale_target
        .map(|_| target_before.unwrap_or(0))
        .or(plan.min_replicas.map(|_| floor_before));
    Ok(outcome(
        r,
        &hpa,
        record,
        target,
        &plan,
        scaled.map(Scaled::from_count),
    ))
}

/// What the form observed and wrote.
fn outcome(
    r: &ScaleTargetRef,
    hpa: &HpaView,
    record: Record,
    target: HpaTarget,
    plan: &hpa::FloorPlan,
    scaled: Option<Scaled>,
) -> Outcome {
    let notices = plan
        .clamped_from
        .map(|asked| Notice::Clamped {
            hpa: r.name.clone(),
            asked,
            max: hpa.max_replicas,
        })
        .into_iter()
        .collect();
    // Without the target's count, whether it sleeps or runs is unknown: say so, never
    // "Settled" at a count nobody read.
    if let Some(p) = target.unreadable {
        let mut out = problem_outcome(p, &target.reference, record.status);
        out.notices = notices;
        out.scaled = scaled;
        if let Err(missing) = &mut out.workload {
            missing.message = format!(
                "the target of HorizontalPodAutoscaler {}: {}",
                r.name, missing.message
            );
        }
        return out;
    }
    // Against the floor the HPA had before the schedule: it would run at least that many.
    let running_floor = match target.replicas {
        Some(0) => 0,
        _ => hpa.min(),
    };
    let saved = record
        .status
        .original_replicas
        .map(|own| Saved::removed(own, running_floor, target.requests));
    Outcome {
        notices,
        target: Some(record.status),
        scaled,
        saved,
        ..Outcome::observed(Ok(Observed::hpa(
            hpa,
            plan.floor,
            target.replicas,
            target.ready,
        )))
    }
}

/// Whether `asleep` is the workload `reference` (object `uid`).
fn asleep_is(asleep: &Asleep, reference: &ScaleTargetRef, uid: Option<&str>) -> bool {
    asleep.target == *reference
        && match (asleep.uid.as_deref(), uid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

/// Wakes a workload this TDSet put to sleep through an HPA to `to` replicas: only that very
/// object (its uid), and only while it is still at 0 (someone who woke it meanwhile is left
/// alone). What was done, if anything.
pub(crate) async fn wake_asleep(
    ctx: &Context,
    ns: &str,
    asleep: &Asleep,
    to: i32,
) -> Answer<Option<String>> {
    let (res, view) = match resolve_and_read(ctx, ns, &asleep.target).await? {
        Ok(found) => found,
        Err(p) => return Ok(Err(p)),
    };
    if !asleep_is(asleep, &asleep.target, view.uid.as_deref()) || view.spec_replicas != 0 {
        return Ok(Ok(None));
    }
    let read_at = view.resource_version.as_deref();
    if let Err(p) = write_if_unchanged(ctx, ns, &asleep.target, &res, to, read_at).await? {
        return Ok(Err(p));
    }
    Ok(Ok(Some(format!("woke {} to {to} replicas", asleep.target))))
}
