//! `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`); a floor of 0
//! puts the HPA's target to sleep (an HPA cannot hold 0).

use tracing::debug;

use super::Turn;
use super::claims;
use super::events::record_scale;
use super::target::{ensure_durable, problem_outcome, target_status};
use crate::api::ScaleTargetRef;
use crate::controller::io::target::{read_hpa, resolve_and_read, write, write_min_replicas};
use crate::controller::state::{Outcome, Write};
use crate::error::Result;
use crate::status::{Notice, Observed};
use crate::workload::hpa;
use crate::workload::savings::{Requests, Saved};

/// `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`).
pub(crate) async fn reconcile(turn: Turn<'_>, r: &ScaleTargetRef) -> Result<Outcome> {
    let Turn {
        tdset,
        ctx,
        ns,
        eval,
        write: write_,
        events,
    } = turn;
    const FIELD: &str = "spec.minReplicas";
    if let Some(p) = claims::held_elsewhere(tdset, ctx, ns, r) {
        return Ok(claims::held_outcome(tdset, ctx, p, r));
    }
    let (mut hpa, uid) = match read_hpa(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => {
            return Ok(problem_outcome(
                p,
                r,
                target_status(tdset, ctx, ns, r, FIELD, None).await?.status,
            ));
        }
    };
    // A group's floor on it is not its own (see `group::own_floor`), nor another TDSet's.
    let own = claims::own_count(tdset, ctx, ns, r, uid.as_deref(), hpa.min(), hpa.own_min);
    let observed = Some((own, uid.as_deref()));
    let mut record = target_status(tdset, ctx, ns, r, FIELD, observed).await?;
    // The HPA's own target, read for its count: a floor of 0 is the target asleep.
    let workload_ref = hpa.target.clone();
    let (res, mut target_replicas, unreadable, requests) =
        match resolve_and_read(ctx, ns, &workload_ref).await? {
            Ok((res, view)) => (Some(res), Some(view.spec_replicas), None, view.requests),
            Err(p) => {
                debug!(problem = %p.message(), "the HPA's target cannot be read");
                (None, None, Some(p), Requests::default())
            }
        };
    let mut plan = hpa::plan(eval.replicas, &hpa, target_replicas);
    if write_ == Write::Never {
        plan.min_replicas = None;
        plan.scale_target = None;
    }
    if plan.min_replicas.is_some() || plan.scale_target.is_some() {
        ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
    }
    let (floor_before, target_before) = (hpa.min(), target_replicas);
    if let Some(min) = plan.min_replicas {
        if let Err(p) = write_min_replicas(ctx, ns, r, uid.as_deref(), min).await? {
            return Ok(problem_outcome(p, r, record.status));
        }
        let change = format!("set HorizontalPodAutoscaler {} minReplicas", r.name);
        events.push(record_scale(ctx, tdset, &change, hpa.min(), min, eval));
        hpa.min_replicas = Some(min);
    }
    if let (Some(n), Some(res)) = (plan.scale_target, res.as_ref()) {
        match write(ctx, ns, &workload_ref, res, n).await? {
            Ok(()) => {
                let change = format!(
                    "scaled {workload_ref} (the target of HorizontalPodAutoscaler {})",
                    r.name
                );
                events.push(record_scale(
                    ctx,
                    tdset,
                    &change,
                    target_replicas.unwrap_or(0),
                    n,
                    eval,
                ));
                target_replicas = Some(n);
            }
            Err(p) => return Ok(problem_outcome(p, r, record.status)),
        }
    }
    let notices = plan
        .clamped_from
        .map(|asked| Notice::Clamped {
            hpa: r.name.clone(),
            asked,
            max: hpa.max_replicas,
        })
        .into_iter()
        .collect();
    // The count before: the target's when it was put to sleep or woken, else the floor's.
    let scaled = plan
        .scale_target
        .map(|_| target_before.unwrap_or(0))
        .or(plan.min_replicas.map(|_| floor_before));
    // Without the target's count, whether it sleeps or runs is unknown: say so, never
    // "Settled" at a count nobody read.
    if let Some(p) = unreadable {
        let mut out = problem_outcome(p, &workload_ref, record.status);
        out.notices = notices;
        out.scaled = scaled;
        if let Err(missing) = &mut out.workload {
            missing.message = format!(
                "the target of HorizontalPodAutoscaler {}: {}",
                r.name, missing.message
            );
        }
        return Ok(out);
    }
    // Against the floor the HPA had before the schedule: it would run at least that many.
    let running_floor = match target_replicas {
        Some(0) => 0,
        _ => hpa.min(),
    };
    let saved = record
        .status
        .original_replicas
        .map(|own| Saved::removed(own, running_floor, requests));
    Ok(Outcome {
        workload: Ok(Observed::hpa(&hpa, plan.floor, target_replicas)),
        problem: None,
        notices,
        target: Some(record.status),
        retry: None,
        scaled,
        group: None,
        failed: false,
        saved,
    })
}
