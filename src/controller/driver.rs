//! The reconcile driver: one call per stage, in order (claim, resolve, release, intercept,
//! apply, report), each stage in a room of its own; and the error policy.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use super::lane::{Events, WorkloadTurn};
use super::stages::{apply, claim, intercept, release, report, resolve};
use super::state::{Context, backoff_after, jitter};
use crate::api::TDSet;
use crate::cache::{Cached, tdset_ref_named};
use crate::error::{Error, Result};
use crate::status::Problem;

/// The longest one reconcile may take: a request that hangs (a black-holed connection)
/// holds one TDSet's transitions back for at most this long, then the reconcile is dropped
/// and retried by the error policy.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);

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
    // The next look is kept by `wakeups`, not by kube-runtime's requeue (see state/wakeups.rs); a
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
    count(&ctx, started, &result);
    if let Err(e) = &result {
        // Best effort: make the failure visible on the TDSet, then let the error policy back
        // off. Only Degraded changes: what status said before is still the best knowledge.
        let problem = Problem::ApiError(e.to_string());
        if let Err(e2) = report::failure(&tdset, &ctx, &problem, &mut events).await {
            debug!(error = %e2, "could not record the reconcile error in status");
        }
    }
    ctx.lane.publish_all(events).await;
    result.map(|_| Action::await_change())
}

/// The reconcile's duration and outcome, in the metrics.
fn count(ctx: &Context, started: Instant, result: &Result<Option<Duration>>) {
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(_) => ctx.metrics.reconciles.with_label_values(&["ok"]).inc(),
        Err(e) => {
            ctx.metrics.reconciles.with_label_values(&["error"]).inc();
            ctx.metrics
                .reconcile_errors
                .with_label_values(&[e.metric_label()])
                .inc();
        }
    }
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
    let wait = backoff_after(attempt, jitter());
    warn!(tdset = %key, %error, attempt, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// One more failure of TDSet `key` (namespace/name) in a row; returns how many there have been
/// (a success resets the count).
fn count_failure(ctx: &Context, key: &str) -> u32 {
    ctx.failures.lock().map_or(1, |mut f| {
        f.entry(key.to_string())
            .or_default()
            .fail(std::time::Instant::now())
    })
}

/// One reconcile, one call per stage; what it returns is how long until the TDSet is to be
/// looked at again (none: never, it is going away). `failed_partly`: some writes failed, and
/// the wait is the error policy's next backoff.
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
    if let Some(wait) = claim::claim(tdset, ctx).await {
        return Ok(Some(wait));
    }
    if tdset.meta().deletion_timestamp.is_some() {
        // Owned objects go with the garbage collector; a referenced target may be restored.
        // Kept (looked at again) while letting go is not over: an autoscaler not yet running
        // its workload again.
        return release::on_delete(tdset, ctx, &ns, events).await;
    }
    let resolved = match resolve::resolve(tdset, ctx)? {
        Ok(resolved) => resolved,
        Err(invalid) => {
            report::failure(tdset, ctx, &invalid, events).await?;
            return Ok(Some(tdset.spec.check_interval()));
        }
    };
    // Only a reconcile with a change due (a boundary's) holds statuses and Events back for as
    // long as it takes; a periodic check or a watch event does not (else 10 000 TDSets'
    // 5-minute checks, 33 a second, would keep the lane waiting).
    if resolved.due.is_none() {
        turn.not_due();
    }
    // The lane (status, Events) waits while the workload is written (`turn`, taken when the
    // reconcile began).
    let previous = release::previous(tdset, ctx, &ns, resolved.source, events).await?;
    if let Some(wait) = previous.wait {
        // The previous target is not let go of yet (an autoscaler not yet running its
        // workload again): nothing is written for the new one, nor a status that would lose
        // the record of the old one, until it is.
        return Ok(Some(wait));
    }
    // Before the form's turn: the proxy is in the path before a count goes to 0.
    let intercepted = intercept::intercept(tdset, ctx, &ns, &resolved).await?;
    let hold = intercepted.holds();
    let outcome = apply::apply(tdset, ctx, &ns, &resolved, hold, events).await?;
    drop(turn);
    let (done, unreleased) = ((resolved, outcome), previous.unreleased);
    let next = report::report(tdset, ctx, &ns, done, &intercepted, unreleased, events).await?;
    let mut wait = next.wait;
    if next.failed {
        // Some writes failed and others landed: reported as a success (the status says what
        // landed), but retried as a failure is, backing off.
        *failed_partly = true;
        let attempt = count_failure(ctx, &format!("{ns}/{}", tdset.name_any()));
        wait = wait.min(backoff_after(attempt, jitter()));
    }
    debug!(?wait, "next look");
    Ok(Some(wait))
}

#[cfg(test)]
mod tests {
    /// A reconcile that read the cache before its TDSet's status echo still finds our status
    /// in the memo when it asks, however late within its deadline (`StatusMemo::GRACE`).
    #[test]
    fn the_status_memo_outlives_any_reconcile() {
        assert!(crate::memo::StatusMemo::GRACE > super::RECONCILE_DEADLINE);
    }
}
