//! The reconcile driver: one call per stage, in order, each stage in a room of its own; then
//! the status, and when to look again. And the error policy.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use super::bookkeeping::WorkloadTurn;
use super::context::{Context, Outcome, Write, tdset_ref_named};
use super::events::{self, Events};
use super::{apply, backoff, calendars, finalizer, group, scale, shards};
use crate::api::TDSet;
use crate::cache::Cached;
use crate::error::{Error, Result};
use crate::schedule::Schedule;
use crate::status::{self, Inputs, Missing, Problem};
use crate::workload::Source;
use apply::write_status;

/// The longest one reconcile may take: a request that hangs (a black-holed connection)
/// holds one TDSet's transitions back for at most this long, then the reconcile is dropped
/// and retried by the error policy.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);
/// How soon a group that could not give every workload back after a change of form tries again.
const UNRELEASED_RETRY: Duration = Duration::from_secs(15);

pub async fn reconcile(cached: Arc<Cached<TDSet>>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, name) = (cached.namespace().unwrap_or_default(), cached.name_any());
    // Taken before the wakeup stops counting as due: from here until its workload is written
    // (or the reconcile ends) the bookkeeping lane waits, for as long as it takes if the
    // reconcile was due (a boundary's workload writes go before its statuses and Events).
    let mut turn = ctx.priority.workload();
    if !ctx.wakeups.started(&ns, &name) {
        turn.not_due();
    }
    if !ctx.synced.load(Ordering::SeqCst) {
        // The TDSets are listed but the owned objects not yet: an owned Deployment missing
        // from the cache would be taken for missing and created again (a restart against
        // 10 000 TDSets sent up to `concurrency` creates the API server refused). Wakeups
        // hand nothing over until then; this one came another way (an owned object's event).
        ctx.wakeups.now(&ns, &name);
        return Ok(Action::await_change());
    }
    // A shard lets go of a TDSet only once no reconcile of it runs, and starts none meanwhile.
    let _running = match &ctx.shard {
        Some(shard) => match shard.enter(&format!("{ns}/{name}")) {
            Some(running) => Some(running),
            None => return Ok(Action::await_change()),
        },
        None => None,
    };
    let tdset = cached.object()?;
    let started = Instant::now();
    let span = info_span!("reconcile", tdset = %format!("{ns}/{name}"));
    // The Events the stages decide on, published once at the end, whatever the outcome (a
    // target restored before a later stage failed is still reported).
    let mut events = Events::new();
    let mut failed_partly = false;
    let result = match tokio::time::timeout(
        RECONCILE_DEADLINE,
        reconcile_inner(&tdset, &ctx, turn, &mut events, &mut failed_partly).instrument(span),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(Error::Deadline(RECONCILE_DEADLINE)),
    };
    // The next look is kept by `wakeups`, not by kube-runtime's requeue (see wakeups.rs); a
    // failed reconcile keeps the wakeup it had and is retried by the error policy.
    if result.is_ok()
        && !failed_partly
        && let Ok(mut failures) = ctx.failures.lock()
    {
        failures.remove(&format!("{ns}/{name}"));
    }
    // A shard sets no wakeup for a TDSet it has stopped matching meanwhile: the controller
    // would not find it, and the wakeup would hold a place among those handed over.
    let still_cached =
        || ctx.shard.is_none() || ctx.tdsets.get(&tdset_ref_named(&ns, &name)).is_some();
    match &result {
        Ok(Some(wait)) if still_cached() => {
            ctx.wakeups
                .set(&ns, &name, tokio::time::Instant::now() + *wait)
        }
        Ok(Some(_)) => {}
        Ok(None) => {
            ctx.wakeups.forget(&ns, &name);
            ctx.forget(&format!("{ns}/{name}"));
        }
        Err(_) => {}
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(_) => ctx.metrics.reconciles.with_label_values(&["ok"]).inc(),
        Err(e) => {
            ctx.metrics.reconciles.with_label_values(&["error"]).inc();
            ctx.metrics
                .reconcile_errors
                .with_label_values(&[e.metric_label()])
                .inc();
            // Best effort: make the failure visible on the TDSet, then let the error policy back
            // off. Only Degraded changes: what status said before is still the best knowledge.
            let problem = Problem::ApiError(e.to_string());
            if let Err(e2) = apply::report_failure(&tdset, &ctx, &problem, &mut events).await {
                debug!(error = %e2, "could not record the reconcile error in status");
            }
        }
    }
    events::publish_all(&ctx, events).await;
    result.map(|_| Action::await_change())
}

/// Backs off on errors: one broken TDSet is retried on its own schedule (doubling from 5 s
/// to 5 min, each wait spread by +-25 % so TDSets that failed together do not retry
/// together) and never blocks others. A success resets it.
pub fn error_policy(tdset: Arc<Cached<TDSet>>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!(
        "{}/{}",
        tdset.namespace().unwrap_or_default(),
        tdset.name_any()
    );
    let attempt = count_failure(&ctx, &key);
    let wait = backoff::after(attempt, backoff::jitter());
    warn!(tdset = %key, %error, attempt, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// One more failure of TDSet `key` (namespace/name) in a row; returns how many there have been
/// (a success resets the count).
fn count_failure(ctx: &Context, key: &str) -> u32 {
    ctx.failures.lock().map_or(1, |mut f| {
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    })
}

/// One reconcile; what it returns is how long until the TDSet is to be looked at again
/// (none: never, it is going away). `failed_partly`: some writes failed, and the wait is the
/// error policy's next backoff.
async fn reconcile_inner(
    tdset: &TDSet,
    ctx: &Context,
    mut turn: WorkloadTurn<'_>,
    events: &mut Events,
    failed_partly: &mut bool,
) -> Result<Option<Duration>> {
    let ns = tdset
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    // Before anything is written for it: a shard writes only the TDSets it has claimed.
    if let Some(wait) = shards::claim(tdset, ctx).await {
        return Ok(Some(wait));
    }
    if tdset.meta().deletion_timestamp.is_some() {
        // Owned objects go with the garbage collector; a referenced target may be restored.
        finalizer::on_delete(tdset, ctx, &ns, events).await?;
        return Ok(None);
    }
    let now = ctx.clock.now();
    let interval = tdset.spec.check_interval();

    // Schedule: the level now and the next change (pure), with the named calendars' dates.
    let (found, missing_calendars) = calendars::resolve(&ctx.calendars, &tdset.spec);
    let schedule = match Schedule::compile_with(&tdset.spec, &calendars::holidays(&found)) {
        Ok(s) => s,
        Err(errors) => {
            let message = format!(
                "{}; the workload is left as it is until the spec is fixed",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            warn!(%message, "invalid spec");
            apply::report_failure(tdset, ctx, &Problem::InvalidSpec(message), events).await?;
            return Ok(Some(interval));
        }
    };
    let source = Source::of(&tdset.spec).map_err(|e| Error::InvalidSpec(vec![e]))?;
    let eval = schedule.evaluate(now);
    let next = schedule.next_transition(now);
    let warnings = schedule.warnings();

    // The change that was due, if its instant has passed: what the transition lag is measured from.
    let previous = ctx.statuses.current(tdset);
    let due = previous
        .as_ref()
        .and_then(|s| s.next_transition_time.as_deref())
        .and_then(crate::preview::parse_rfc3339)
        .filter(|t| *t <= now);
    // Only a reconcile with a change due (a boundary's) holds statuses and Events back for as
    // long as it takes; a periodic check or a watch event does not (else 10 000 TDSets'
    // 5-minute checks, 33 a second, would keep the lane waiting).
    if due.is_none() {
        turn.not_due();
    }

    // Observe and apply, as the mode asks; while suspended, observe only. The bookkeeping lane
    // (status, Events) waits while this runs anywhere (`turn`, taken when the reconcile began).
    // What the TDSet drove before and no longer describes is let go of first (suspended or
    // not: letting go is not scheduling), so a target's record is never overwritten before it
    // has been given back.
    let unreleased = finalizer::release_previous(tdset, ctx, &ns, events).await?;
    if matches!(
        source,
        Source::Scale(_) | Source::HpaFloor(_) | Source::Group(_)
    ) {
        apply::remove_owned(tdset, ctx, &ns, events).await?;
    }
    finalizer::ensure(tdset, ctx, &ns).await?;
    let write = if tdset.spec.is_suspended() {
        Write::Never
    } else {
        Write::IfDifferent
    };
    let mut outcome = match source {
        _ if let Some(refused) = ctx.pod_forms.refuse(source, &ns) => Outcome {
            workload: Err(Missing {
                reason: status::reason::BLOCKED,
                message: "nothing runs: this form is not allowed in this namespace".into(),
            }),
            problem: Some(Problem::FormNotAllowed(refused)),
            notices: vec![],
            target: None,
            retry: None,
            scaled: None,
            group: None,
            failed: false,
            saved: None,
        },
        Source::Container(_) | Source::Template(_) => {
            apply::reconcile_owned(tdset, ctx, &ns, &eval, write, events).await?
        }
        Source::Scale(target) => {
            scale::reconcile_scale(tdset, ctx, &ns, target, &eval, write, events).await?
        }
        Source::HpaFloor(hpa) => {
            scale::reconcile_hpa(tdset, ctx, &ns, hpa, &eval, write, events).await?
        }
        Source::Group(sel) => {
            group::reconcile_group(tdset, ctx, &ns, sel, &eval, write, events).await?
        }
    };
    drop(turn);
    // A group left behind with workloads not yet given back stays in the status (and is
    // tried again) until every one is.
    if let Some((group, problem)) = unreleased {
        outcome.group.get_or_insert(group);
        outcome.problem.get_or_insert(problem);
        outcome.retry = Some(
            outcome
                .retry
                .map_or(UNRELEASED_RETRY, |r| r.min(UNRELEASED_RETRY)),
        );
    }

    if let Some(saved) = outcome.saved {
        ctx.metrics
            .saved(&format!("{ns}/{}", tdset.name_any()), saved.replicas, now);
    }

    // A calendar that does not exist is reported, unless the workload has a worse problem.
    let calendar_problem = (!missing_calendars.is_empty())
        .then(|| Problem::CalendarNotFound(calendars::missing_message(&missing_calendars)));
    let problem = outcome.problem.clone().or(calendar_problem);

    if let Some(due) = due.filter(|_| outcome.scaled.is_some()) {
        let lag = (ctx.clock.now() - due).num_milliseconds().max(0) as f64 / 1000.0;
        ctx.metrics.transition_lag.observe(lag);
    }
    // The change, for status.history: at the transition's instant when one was due.
    let change = outcome.scaled.map(|from| crate::api::HistoryEntry {
        at: crate::preview::rfc3339(due.unwrap_or(now)),
        // Milliseconds: how late a change landed is usually well under a second.
        applied_at: Some(
            ctx.clock
                .now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ),
        from: Some(from),
        to: eval.count().replicas(),
        reason: eval.why(),
        message: None,
    });

    // Status (pure), written only when it differs.
    let new_status = status::next_status(&Inputs {
        previous: previous.as_ref(),
        generation: tdset.meta().generation,
        evaluation: Some(&eval),
        next: next.as_ref(),
        warnings: &warnings,
        notices: &outcome.notices,
        workload: outcome.workload.as_ref(),
        target: outcome.target.as_ref(),
        group: outcome.group.as_ref(),
        saved: outcome.saved,
        problem: problem.as_ref(),
        suspended: write == Write::Never,
        change,
        shard: ctx.shard.as_ref().map(|s| s.name()),
        now,
    });
    write_status(tdset, ctx, previous.as_ref(), new_status, events).await?;

    let mut wait = match next {
        Some(n) => (n.at - now).to_std().unwrap_or_default().min(interval),
        None => interval,
    };
    if let Some(retry) = outcome.retry {
        wait = wait.min(retry);
    }
    if outcome.failed {
        // Some writes failed and others landed: reported as a success (the status says what
        // landed), but retried as a failure is, backing off.
        *failed_partly = true;
        let attempt = count_failure(ctx, &format!("{ns}/{}", tdset.name_any()));
        wait = wait.min(backoff::after(attempt, backoff::jitter()));
    }
    debug!(replicas = eval.replicas, window = ?eval.window_label, next = ?next.map(|n| n.at), ?wait, "reconciled");
    Ok(Some(wait))
}
