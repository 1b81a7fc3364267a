//! Letting go of a ScaledObject (the TDSet deleted, or pointed elsewhere): what the schedule
//! wrote given back once, then KEDA waited for, within a bound, until it runs the workload
//! again (the pure decision is `keda::resume`); past the bound the workload is woken directly.

use tracing::debug;

use super::write::{KEDA_GRACE, SOON, part, write_plan};
use crate::api::{Asleep, KedaPause, ScaleTargetRef, TargetStatus};
use crate::controller::io::keda::{self as io, ScaledObjectRead};
use crate::controller::io::target::resolve_and_read;
use crate::controller::kinds::hold::LetGo;
use crate::controller::kinds::record::{asleep_is, wake_asleep};
use crate::controller::state::{Answer, Context};
use crate::status::Problem;
use crate::workload::keda::{self, Check, Originals, Plan};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::target::ScaleView;

/// Lets go of a ScaledObject as its status records it, only on the object it was recorded
/// from: the user's pause given back (or the operator's taken off), the own ceiling given back,
/// and with `restore` the own floor, written once; then waits, within a bound, for KEDA to run
/// the workload again (`resumed`). `tdset_key`: the TDSet's namespace/name.
pub(crate) async fn let_go(
    ctx: &Context,
    ns: &str,
    tdset_key: &str,
    r: &ScaleTargetRef,
    recorded: &TargetStatus,
    restore: bool,
) -> Answer<LetGo> {
    let out = let_go_once(ctx, ns, tdset_key, r, recorded, restore).await;
    if !matches!(&out, Ok(Ok(LetGo { wait: Some(_), .. }))) {
        // Over (or to be tried afresh): the next let-go starts its bound anew.
        forget_resume(ctx, tdset_key);
    }
    out
}

/// What a let-go in progress keeps in memory (`part::LETTING_GO`).
fn resume_keys(tdset_key: &str) -> [String; 2] {
    part::LETTING_GO.map(|p| p.key(tdset_key))
}

/// Forgets a let-go in progress: it is over (`Held::LETTING_GO` says the other case: the
/// TDSet schedules the ScaledObject again).
fn forget_resume(ctx: &Context, tdset_key: &str) {
    for key in resume_keys(tdset_key) {
        ctx.forget_contest(&key);
    }
}

async fn let_go_once(
    ctx: &Context,
    ns: &str,
    tdset_key: &str,
    r: &ScaleTargetRef,
    recorded: &TargetStatus,
    restore: bool,
) -> Answer<LetGo> {
    let mut so = match io::read(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p @ Problem::TargetNotFound(_)) => {
            return Ok(wake_instead(ctx, ns, r, recorded, p)
                .await?
                .map(LetGo::done));
        }
        Err(p) => return Ok(Err(p)),
    };
    if let (Some(a), Some(b)) = (recorded.uid.as_deref(), so.view.uid.as_deref())
        && a != b
    {
        let replaced = Problem::TargetNotFound(format!(
            "{r} was deleted and created again since its pause and counts were recorded; the \
             new object is left as it is"
        ));
        return Ok(wake_instead(ctx, ns, r, recorded, replaced)
            .await?
            .map(LetGo::done));
    }
    // Pointed elsewhere since: the workload it put to sleep is woken, and the ScaledObject let
    // go whatever that wake came to (its pause left behind would hold the new target at 0).
    let (woke, wake_failed) = match wake_retargeted(ctx, ns, recorded, &so).await? {
        Ok(woke) => (woke, None),
        Err(p) => (None, Some(p)),
    };
    let originals = Originals::of(recorded);
    // Written once: while KEDA is waited for, what a user sets meanwhile stands.
    let [resume_key, _] = resume_keys(tdset_key);
    let now = tokio::time::Instant::now();
    let first = ctx.contest(&resume_key, |c| c.since_write(now)).is_none();
    let plan = match first {
        true => keda::released(&originals, &so.view, restore),
        false => Plan::default(),
    };
    if plan.writes() {
        match write_plan(ctx, ns, r, &so, &plan).await? {
            Ok(rv) => {
                so.view.resource_version = rv.or(so.view.resource_version.take());
                so.view.apply(&plan);
            }
            Err(p) => return Ok(Err(p)),
        }
    }
    if first {
        ctx.contest(&resume_key, |c| c.wrote(0, now));
    }
    if let Some(p) = wake_failed {
        return Ok(Err(p));
    }
    let done = said(r, &plan, woke);
    let mut out = match resumed(ctx, ns, tdset_key, r, &so, recorded).await? {
        Ok(out) => out,
        Err(p) => return Ok(Err(p)),
    };
    out.done = done;
    Ok(Ok(out))
}

/// Wakes the workload a ScaledObject pointed elsewhere since had put to sleep: what it did
/// (nothing when it was not retargeted), or why it could not.
async fn wake_retargeted(
    ctx: &Context,
    ns: &str,
    recorded: &TargetStatus,
    so: &ScaledObjectRead,
) -> Answer<Option<String>> {
    let retargeted = (recorded.asleep.as_ref()).filter(|a| !asleep_is(a, &so.view.target, None));
    let Some(left) = retargeted else {
        return Ok(Ok(None));
    };
    let to = recorded.original_replicas.unwrap_or(1).max(1);
    wake_asleep(ctx, ns, left, to).await
}

/// What a let-go did, for the Event: the workload woken, then what it gave back.
fn said(r: &ScaleTargetRef, plan: &Plan, woke: Option<String>) -> Option<String> {
    let mut done: Vec<String> = woke.into_iter().collect();
    if let Some(p) = &plan.pause {
        done.push(if p.pauses() {
            "gave back its own pause".to_string()
        } else {
            "took the schedule's pause off".to_string()
        });
    }
    if let Some(max) = plan.max {
        done.push(format!("gave back maxReplicaCount {max}"));
    }
    if let Some(min) = plan.min {
        done.push(format!("restored minReplicaCount {min}"));
    }
    match (plan.writes(), done.is_empty()) {
        (true, _) => Some(format!("ScaledObject {}: {}", r.name, done.join(", "))),
        (false, false) => Some(done.join("; ")),
        (false, true) => None,
    }
}

/// Whether KEDA runs the workload of a ScaledObject let go of again (see `keda::resume`):
/// waited for within a bound, KEDA's documented unpause written once where it says Paused with
/// no pause left, and past the bound the workload left at 0 woken directly, so that nothing is
/// left at 0 with nobody watching.
async fn resumed(
    ctx: &Context,
    ns: &str,
    tdset_key: &str,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    recorded: &TargetStatus,
) -> Answer<LetGo> {
    let [key, unpause_key] = resume_keys(tdset_key);
    let workload = match resolve_and_read(ctx, ns, &so.view.target).await? {
        Ok((_, view)) => Some(view),
        Err(_) => None,
    };
    let replicas = workload.as_ref().map(|w| w.spec_replicas);
    let hpa = Some(io::hpa_cached(ctx, ns, &so.view.hpa()));
    let now = tokio::time::Instant::now();
    let seen = ctx.contest(&key, |c| c.seen_for(now));
    let wait = |why: &str| {
        debug!(scaledobject = %r.name, why, "waiting for KEDA to run the workload again");
        Ok(Ok(LetGo {
            wait: Some(SOON),
            ..LetGo::default()
        }))
    };
    match keda::resume(&so.view, replicas, hpa, seen, KEDA_GRACE) {
        keda::Resume::Done if so.view.pause == keda::unpause() && so.view.pause_ours => {
            // KEDA runs it again: the unpause written for it is taken off, as by day.
            let off = KedaPause::default();
            let read_at = so.view.resource_version.as_deref();
            Ok(io::write(
                ctx,
                ns,
                (r, so, read_at),
                FIELD_MANAGER,
                (Some(&off), None, None),
            )
            .await?
            .map(|_| LetGo::default()))
        }
        keda::Resume::Done => Ok(Ok(LetGo::default())),
        keda::Resume::Wait => wait("within the bound"),
        keda::Resume::Unpause if ctx.contest(&unpause_key, |c| c.since_write(now)).is_some() => {
            wait("KEDA still says Paused after paused: \"false\"")
        }
        keda::Resume::Unpause => {
            let unpause = keda::unpause();
            let read_at = so.view.resource_version.as_deref();
            let pause = (Some(&unpause), None, None);
            match io::write(ctx, ns, (r, so, read_at), FIELD_MANAGER, pause).await? {
                Ok(_) => {}
                Err(p @ Problem::TargetNotFound(_)) => {
                    return Ok(wake_instead(ctx, ns, r, recorded, p)
                        .await?
                        .map(LetGo::done));
                }
                Err(p) => return Ok(Err(p)),
            }
            ctx.contest(&unpause_key, |c| c.wrote(1, now));
            wait("KEDA still said Paused: wrote paused: \"false\"")
        }
        keda::Resume::GiveUp(found) => gave_up(ctx, ns, r, so, recorded, workload, found).await,
    }
}

/// KEDA has not run the workload again within twice its grace: the TDSet goes all the same,
/// saying what KEDA did not do, and the workload left at 0 is woken directly.
async fn gave_up(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    recorded: &TargetStatus,
    workload: Option<ScaleView>,
    found: Check,
) -> Answer<LetGo> {
    let what = match found {
        Check::StillPaused => "still says it is paused with no pause annotation left \
             (keda#6982), after autoscaling.keda.sh/paused: \"false\" too"
            .to_string(),
        Check::HpaMissing => format!(
            "says it is not paused, but its HorizontalPodAutoscaler {} does not exist",
            so.view.hpa()
        ),
        _ => format!("has not scaled {} up from 0", so.view.target),
    };
    // The workload this TDSet put to sleep; or, put to sleep before a morning KEDA did not
    // take, the one the ScaledObject scales, where KEDA would run it above 0.
    let idle = so.view.min() == 0 || so.view.idle_replica_count.is_some();
    let left = recorded.asleep.clone().or_else(|| {
        (!idle).then(|| Asleep {
            target: so.view.target.clone(),
            uid: workload.and_then(|w| w.uid),
        })
    });
    let woke = match &left {
        Some(left) => match wake_asleep(ctx, ns, left, so.view.min().max(1)).await {
            Ok(Ok(Some(woke))) => format!("; the operator {woke} itself"),
            Ok(Ok(None)) => String::new(),
            Ok(Err(p)) => format!("; waking it failed: {}", p.message()),
            Err(e) => format!("; waking it failed: {e}"),
        },
        None => String::new(),
    };
    Ok(Ok(LetGo {
        not_resumed: Some((
            "KedaNotResumed",
            format!(
                "KEDA {what} {}s after ScaledObject {} was let go of{woke}. Is KEDA's operator \
                 running? `kubectl describe scaledobject {}`",
                (KEDA_GRACE * 2).as_secs(),
                r.name,
                r.name
            ),
        )),
        ..LetGo::default()
    }))
}

/// Letting go of a ScaledObject that is gone (or was replaced), `problem`: the workload this
/// TDSet put to sleep through it is woken to its own floor instead, if it still sleeps.
async fn wake_instead(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    recorded: &TargetStatus,
    problem: Problem,
) -> Answer<Option<String>> {
    let Some(left) = &recorded.asleep else {
        return Ok(Err(problem));
    };
    let to = recorded.original_replicas.unwrap_or(1).max(1);
    Ok(match wake_asleep(ctx, ns, left, to).await? {
        Ok(Some(woke)) => Ok(Some(format!("{woke} (ScaledObject {} is gone)", r.name))),
        Ok(None) => Err(problem),
        Err(p) => Err(p),
    })
}
