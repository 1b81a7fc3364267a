//! `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`); a floor of 0
//! puts the HPA's target to sleep (an HPA cannot hold 0).

use tracing::debug;

use super::Turn;
use super::claims;
use super::events::record_scale;
use super::target::{Record, ensure_durable, problem_outcome, target_status};
use crate::api::ScaleTargetRef;
use crate::controller::io::target::{read_hpa, resolve_and_read, write, write_min_replicas};
use crate::controller::state::{Outcome, Resolved, Write};
use crate::error::Result;
use crate::status::{Notice, Observed, Problem};
use crate::workload::hpa::{self, HpaView};
use crate::workload::savings::{Requests, Saved};

/// The field this form sets.
const FIELD: &str = "spec.minReplicas";

/// The HPA's own target, as read for its count: a floor of 0 is the target asleep.
struct HpaTarget {
    reference: ScaleTargetRef,
    resource: Option<Resolved>,
    replicas: Option<i32>,
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
        return Ok(claims::held_outcome(tdset, ctx, p, r));
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
            resource: Some(res),
            replicas: Some(view.spec_replicas),
            unreadable: None,
            requests: view.requests,
        },
        Err(p) => {
            debug!(problem = %p.message(), "the HPA's target cannot be read");
            HpaTarget {
                reference,
                resource: None,
                replicas: None,
                unreadable: Some(p),
                requests: Requests::default(),
            }
        }
    };
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
    }
    // The count before: the target's when it was put to sleep or woken, else the floor's.
    let scaled = plan
        .scale_target
        .map(|_| target_before.unwrap_or(0))
        .or(plan.min_replicas.map(|_| floor_before));
    Ok(outcome(r, &hpa, record, target, &plan, scaled))
}

/// What the form observed and wrote.
fn outcome(
    r: &ScaleTargetRef,
    hpa: &HpaView,
    record: Record,
    target: HpaTarget,
    plan: &hpa::FloorPlan,
    scaled: Option<i32>,
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
        ..Outcome::observed(Ok(Observed::hpa(hpa, plan.floor, target.replicas)))
    }
}
