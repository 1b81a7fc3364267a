//! The report stage: what the forms observed and wrote becomes the TDSet's status (pure:
//! `status::next_status`), its history entry, the transition lag and the savings metrics, and
//! the wait until the TDSet is looked at again. The status is queued on the lane only when it
//! differs; a Warning follows a change of `Degraded`.

use std::time::Duration;

use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use super::intercept::Intercepted;
use super::resolve::Resolved;
use crate::api::{HistoryEntry, TDSet, TDSetStatus};
use crate::controller::io::tdset::queue_status;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::{Context, Outcome};
use crate::error::Result;
use crate::status::warm_up::{Readiness, Rise};
use crate::status::{self, Inputs, Problem};
use crate::workload::Source;

/// How soon a group that could not give every workload back after a change of form tries again.
const UNRELEASED_RETRY: Duration = Duration::from_secs(15);

/// How often a group looks whether a scale-up's count is ready (see `report`), at first and at
/// most, and for how long after its write.
const READY_POLL: Duration = Duration::from_secs(5);
const READY_POLL_MAX: Duration = Duration::from_secs(30);
const READY_WATCH_FOR: Duration = Duration::from_secs(600);

/// When to look at the TDSet again, and whether some of its writes failed (then the driver
/// backs off as for a failed reconcile).
pub(crate) struct Next {
    pub wait: Duration,
    pub failed: bool,
}

/// Reports `outcome`, and says when to look again. A Service `wakeOnRequest` cannot
/// intercept is reported (unless the workload has a worse problem), and slices waiting for the
/// workload's own endpoints are looked at again soon; a group left behind with workloads not
/// yet given back stays in the status (and is tried again) until every one is.
pub(crate) async fn report(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    (resolved, mut outcome): (Resolved<'_>, Outcome),
    intercepted: &Intercepted,
    unreleased: Option<(crate::api::GroupStatus, Problem)>,
    events: &mut Events,
) -> Result<Next> {
    if let Some((group, problem)) = unreleased {
        outcome.group.get_or_insert(group);
        outcome.problem.get_or_insert(problem);
        outcome.retry_within(UNRELEASED_RETRY);
    }
    if let Some(problem) = intercept_problem(intercepted) {
        outcome.problem.get_or_insert(problem);
    }
    if let Some(recheck) = intercepted.recheck {
        outcome.retry_within(recheck);
    }
    if let Some(saved) = outcome.saved {
        ctx.metrics.saved(
            &format!("{ns}/{}", tdset.name_any()),
            saved.replicas,
            resolved.now,
        );
    }
    let change = change(ctx, &resolved, &outcome, tdset.spec.is_suspended());
    // The scale-ups the workload now serves: how long they took, and how late they were.
    let readiness = match &outcome.workload {
        Ok(o) => o.ready.map_or(Readiness::NotReported, Readiness::Reported),
        Err(_) => Readiness::Unknown,
    };
    let reported = status::reported(
        inputs(tdset, ctx, &resolved, &outcome, change),
        &tdset.spec,
        readiness,
        ctx.leading_since,
        ctx.clock.now(),
    );
    report_risen(tdset, ctx, &reported.risen, events);
    let wait = wait(
        tdset,
        &resolved,
        &outcome,
        reported.relearnt,
        (reported.awaiting, readiness),
    );
    let (previous, new) = (resolved.previous.as_ref(), reported.status);
    write_status(tdset, ctx, previous, new, reported.degraded, events).await?;
    // The wait is logged by the driver, which may shorten it (some writes failed).
    let eval = &resolved.eval;
    debug!(replicas = eval.replicas, window = ?eval.window_label, next = ?resolved.next.map(|n| n.at), "reconciled");
    Ok(Next {
        wait,
        failed: outcome.failed,
    })
}

/// What the intercept stage refused, as Degraded says it (the schedule goes on).
fn intercept_problem(done: &Intercepted) -> Option<Problem> {
    if !done.unguarded.is_empty() {
        return Some(Problem::NoWakeProxy(format!(
            "wakeOnRequest: no wake proxy pod is ready to stand in for {}: the workload is \
             left as it is, not put to sleep where no request could wake it, until one is; \
             see the wake proxy's pods and their readiness (the operator's wake endpoint \
             must answer them)",
            done.unguarded.join(", ")
        )));
    }
    (!done.refused.is_empty()).then(|| {
        Problem::WakeRefused(format!(
            "wakeOnRequest: {}; requests to it do not wake the workload",
            done.refused.join("; ")
        ))
    })
}

/// The change this reconcile made, for `status.history` (at the transition's instant when
/// one was due), and the transition lag it observed. A change that did not land at all is
/// recorded only when one was due (a workload that keeps refusing writes would otherwise add
/// an entry every reconcile).
fn change(
    ctx: &Context,
    resolved: &Resolved<'_>,
    outcome: &Outcome,
    suspended: bool,
) -> Option<HistoryEntry> {
    let (eval, due, now) = (&resolved.eval, resolved.due, resolved.now);
    let landed = outcome.scaled.as_ref().is_some_and(|s| s.landed);
    if let Some(due) = due.filter(|_| landed) {
        let lag = (ctx.clock.now() - due).num_milliseconds().max(0) as f64 / 1000.0;
        ctx.metrics.transition_lag.observe(lag);
    }
    let at = eval.ahead_of.map(|t| t.at).or(due).unwrap_or(now);
    let Some(s) = outcome.scaled.clone() else {
        // Nothing written, nothing in the way, and the count differs from the one on record:
        // the write landed before a restart, its status did not.
        // (Suspended, nothing is written: the count on record is what it asks for, not what
        // the workload runs.)
        let clear = !suspended && outcome.at_count && outcome.problem.is_none() && !outcome.failed;
        let single = !matches!(resolved.source, Source::Group(_));
        return (clear && single && outcome.workload.is_ok())
            .then(|| {
                status::found_applied(
                    resolved.previous.as_ref(),
                    eval.count().replicas(),
                    eval.why(),
                    at,
                    ctx.clock.now(),
                )
            })
            .flatten();
    };
    Some(s)
        .filter(|s| s.landed || due.is_some())
        .map(|s| HistoryEntry {
            // A rise written ahead is recorded at its transition, applied before it.
            at: crate::preview::rfc3339(at),
            // Milliseconds: how late a change landed is usually well under a second.
            applied_at: s.landed.then(|| {
                ctx.clock
                    .now()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            }),
            ready_at: None,
            from: Some(s.from),
            to: s.to.or(eval.count().replicas()),
            level: matches!(resolved.source, Source::Group(_)).then(|| eval.count().to_string()),
            reason: eval.why(),
            message: s.failed.map(|m| status::clipped(&m)),
        })
}

/// What the next status is made of (pure: `status::reported`), from what was resolved and
/// observed.
fn inputs<'a>(
    tdset: &TDSet,
    ctx: &'a Context,
    resolved: &'a Resolved<'_>,
    outcome: &'a Outcome,
    change: Option<HistoryEntry>,
) -> Inputs<'a> {
    // A calendar that does not exist is reported, unless the workload has a worse problem.
    let problem = (outcome.problem.as_ref()).or(resolved.calendar_problem.as_ref());
    Inputs {
        previous: resolved.previous.as_ref(),
        generation: tdset.meta().generation,
        evaluation: Some(&resolved.eval),
        next: resolved.next.as_ref(),
        next_write: resolved.next_write,
        warnings: &resolved.warnings,
        notices: &outcome.notices,
        workload: outcome.workload.as_ref(),
        target: outcome.target.as_ref(),
        group: outcome.group.as_ref(),
        saved: outcome.saved,
        problem,
        suspended: tdset.spec.is_suspended(),
        change,
        ceiling: outcome.ceiling.or(resolved.eval.ceiling),
        shard: ctx.shard.as_ref().map(|s| s.name()),
        requested: resolved.requested,
        idle: resolved.idle.as_ref(),
        now: resolved.now,
    }
}

/// How long until the TDSet is looked at again: until what is written changes next (at most
/// its interval), sooner for a retry the forms asked for, at once for a new lead, and while a
/// group's scale-up with `warmUp` is not yet ready (`awaiting`: since its write), soon enough
/// to read its time to Ready.
fn wait(
    tdset: &TDSet,
    resolved: &Resolved<'_>,
    outcome: &Outcome,
    relearnt: bool,
    (awaiting, readiness): (Option<chrono::DateTime<chrono::Utc>>, Readiness),
) -> Duration {
    let (now, interval) = (resolved.now, resolved.interval);
    let mut wait = match resolved.next_write {
        Some(at) => (at - now).to_std().unwrap_or_default().min(interval),
        None => interval,
    };
    if let Some(retry) = outcome.retry {
        wait = wait.min(retry);
    }
    // A new lead moves the next scale-up's write: looked at again at once, so that the wait
    // and `nextWriteTime` follow it (the next reconcile resolves with the new samples).
    if relearnt {
        wait = Duration::ZERO;
    }
    // A group is not woken by its workloads' readiness (a rollout under 300 groups would wake
    // each), so while a scale-up of a group with `warmUp` is not yet ready it looks again, every
    // 5 s at first and less often as it waits (each wait a fifth of the time since the write,
    // so a time to Ready is read at most a fifth too long), for at most `READY_WATCH_FOR`.
    let warm_up_on = tdset.spec.warm_up_mode() != crate::api::WarmUpMode::Off;
    if let (Source::Group(_), Some(written), true, Readiness::Reported(_)) =
        (resolved.source, awaiting, warm_up_on, readiness)
    {
        // A write "after now" (a status edited by hand, a clock stepped back) is not waited on.
        if let Ok(since) = (now - written).to_std()
            && since < READY_WATCH_FOR
        {
            wait = wait.min((since / 5).clamp(READY_POLL, READY_POLL_MAX));
        }
    }
    wait
}

/// Records a failed reconcile: Degraded=True (ReconcileError), the rest of status kept as the
/// last successful reconcile left it (it is still the best knowledge there is).
pub(crate) async fn failure(
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
    let degraded = status::degraded_warning(previous.as_ref(), &new_status);
    write_status(tdset, ctx, previous.as_ref(), new_status, degraded, events).await
}

/// Patches status only when it differs from `previous` (from `StatusMemo::current`), then
/// publishes the Warning a change of Degraded brings (`status::degraded_warning`).
async fn write_status(
    tdset: &TDSet,
    ctx: &Context,
    previous: Option<&TDSetStatus>,
    new: TDSetStatus,
    degraded: Option<(String, String)>,
    events: &mut Events,
) -> Result<()> {
    if previous == Some(&new) {
        return Ok(());
    }
    debug!(old = ?previous, new = ?new, "status differs; queued");
    queue_status(tdset, ctx, new).await?;
    if let Some((reason, message)) = degraded {
        events.push(note(tdset, EventType::Warning, &reason, message));
    }
    Ok(())
}

/// The scale-ups found ready, in the metrics; a late one as a Warning that says by how much
/// and what would write it ahead.
fn report_risen(
    tdset: &TDSet,
    ctx: &Context,
    risen: &[(Rise, Option<String>)],
    events: &mut Events,
) {
    let mode = format!("{:?}", tdset.spec.warm_up_mode());
    for (r, late_warning) in risen {
        let late = r.late();
        ctx.metrics
            .scale_up_lateness
            .with_label_values(&[&mode])
            .observe(late.num_milliseconds() as f64 / 1000.0);
        if r.sampled {
            ctx.metrics
                .scale_up_ready
                .observe(r.took().num_milliseconds() as f64 / 1000.0);
        }
        ctx.metrics.warm_up_early.inc_by(r.early_replica_seconds());
        info!(
            from = r.from,
            to = r.to,
            took_ms = r.took().num_milliseconds(),
            late_ms = late.num_milliseconds(),
            "scale-up ready"
        );
        if let Some(message) = late_warning {
            let reason = status::reason::SCALE_UP_LATE;
            events.push(note(tdset, EventType::Warning, reason, message.clone()));
        }
    }
}
