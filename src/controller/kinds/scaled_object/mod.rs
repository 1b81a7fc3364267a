//! `scaleTargetRef` to a KEDA ScaledObject: asleep through KEDA's pause, awake with the
//! schedule as its floor (and ceiling); then checked, since KEDA says what it took only in
//! the ScaledObject's status and does not watch the workload (see `workload::keda`).

mod let_go;
mod write;

#[cfg(test)]
pub(crate) use write::PARTS;
use write::write_plan;
pub(crate) use write::{CHECK_EVERY, KEDA_GRACE, SOON, part};

use std::time::Duration;

use kube::ResourceExt;

use super::events::record_scale;
use super::hold::{Held, LetGo, Letting};
use super::record::{Record, Unread, asleep_is, ensure_durable, problem_outcome, wake_left_behind};
use super::{Part, Turn};
use crate::api::{Asleep, KedaPause, ScaleTargetRef, TargetStatus};
use crate::controller::io::keda::{self as io, ScaledObjectRead};
use crate::controller::io::target::resolve_and_read;
use crate::controller::lane::{EventType, note};
use crate::controller::state::{Answer, Context, Outcome, Scaled, Write};
use crate::error::Result;
use crate::status::{Notice, Observed, Problem};
use crate::workload::contest::Verdict;
use crate::workload::gitops;
use crate::workload::hpa;
use crate::workload::keda::{self, Check, Originals, Plan};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::target::ScaleView;

/// The field recorded as the original count: the ScaledObject's own floor.
const FIELD: &str = "spec.minReplicaCount";

/// The keys of the TDSet's contests (see `workload::contest`): the schedule's writes, the
/// turns that make KEDA put a drifted count right, the unpause of a ScaledObject KEDA left
/// paused, how long KEDA's HPA has been seen missing.
pub(crate) fn keys(tdset_key: &str) -> [String; 4] {
    [part::SCHEDULE, part::DRIFT, part::UNPAUSE, part::HPA].map(|p| p.key(tdset_key))
}

/// A KEDA ScaledObject (`hold::<ScaledObject>`): paused at night, floored by day, checked.
pub(crate) struct ScaledObject;

impl Held for ScaledObject {
    const FIELD: &'static str = FIELD;
    type Read = ScaledObjectRead;

    /// Scheduled again (a retarget undone before it was over): no let-go is in progress.
    const LETTING_GO: &'static [Part] = &part::LETTING_GO;

    /// Gone, KEDA's finalizer leaves the workload at the paused count.
    const WAKE_WHEN_GONE: bool = true;

    async fn read(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
    ) -> Result<std::result::Result<ScaledObjectRead, Unread>> {
        Ok(io::read(turn.ctx, turn.ns, r).await?.map_err(Unread::from))
    }

    fn observed(_: &Turn<'_>, _: &ScaleTargetRef, so: &ScaledObjectRead) -> (i32, Option<String>) {
        (so.view.min(), so.view.uid.clone())
    }

    /// The workload read beside it (for the checks and the record of a pause at the current
    /// count; the schedule's writes do not wait for it, a give-back in the morning least of
    /// all), the plan written, KEDA checked.
    async fn apply(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        mut so: ScaledObjectRead,
        mut record: Record,
    ) -> Result<Outcome> {
        let workload = resolve_and_read(turn.ctx, turn.ns, &so.view.target)
            .await?
            .map(|(_, view)| view)
            .map_err(|p| {
                Problem::TargetNotFound(format!(
                    "the workload of ScaledObject {}: {}",
                    r.name,
                    p.message()
                ))
            });
        // Pointed at another workload than the one this TDSet put to sleep through it (or
        // that one was replaced): that one is woken to the own floor it was put to sleep from.
        let workload_uid = workload.as_ref().ok().and_then(|w| w.uid.as_deref());
        let why = format!("ScaledObject {} no longer scales it", r.name);
        wake_left_behind(turn, &mut record, (&so.view.target, workload_uid), why).await?;
        let replicas = workload.as_ref().ok().map(|w| w.spec_replicas);
        let (plan, ceiling) = match planned(turn, r, &so, &record, replicas) {
            Ok(planned) => planned,
            Err(p) => return Ok(problem_outcome(p, r, record.status)),
        };
        let workload = match workload {
            Ok(w) => w,
            Err(p) => {
                // Written as planned; reported, and looked at again, until the workload can
                // be read.
                let mut out = apply(turn, r, &mut so, record, plan, None).await?;
                let target = out.target.take().unwrap_or_default();
                return Ok(Outcome {
                    scaled: out.scaled,
                    ..problem_outcome(p, r, target)
                });
            }
        };
        let mut out = apply(turn, r, &mut so, record, plan, Some(&workload)).await?;
        out.ceiling = ceiling.map(|c| c.max(turn.eval.replicas).max(1));
        if out.problem.is_none() && turn.write == Write::IfDifferent {
            let (problem, retry) = check(turn, r, &so, &workload).await?;
            out.problem = problem;
            out.retry = out.retry.min(Some(retry)).or(Some(retry));
        }
        Ok(out)
    }

    /// What the schedule wrote given back once, then KEDA waited for (see `let_go`).
    async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo> {
        let (ctx, ns) = (letting.ctx, letting.ns);
        let key = format!("{ns}/{}", letting.tdset.name_any());
        let released = let_go::let_go(ctx, ns, &key, r, letting.recorded, letting.restore);
        letting.refused(released.await)
    }
}

/// The schedule's plan for the ScaledObject (nothing written where the turn may not write),
/// and the ceiling in force; refused where the user's own pause, to be recorded, is too long
/// to record.
fn planned(
    turn: &Turn<'_>,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    record: &Record,
    replicas: Option<i32>,
) -> std::result::Result<(Plan, Option<i32>), Problem> {
    let recorded = Originals::of(&record.status);
    let eval = turn.eval;
    let own_max = recorded.max.unwrap_or(so.view.max());
    // While a rise is written ahead of its window (`warmUp`), the higher of the two ceilings.
    let ceiling = hpa::ceiling_in_force(eval.ceiling, eval.ahead_of.map(|t| t.ceiling), own_max);
    let plan = keda::plan(eval.replicas, ceiling, &recorded, &so.view, replicas);
    let records_pause = (plan.record.as_ref()).is_some_and(|r| r.pause != recorded.pause);
    if records_pause && so.view.pause.too_long() {
        return Err(Problem::InvalidSpec(format!(
            "ScaledObject {} has a pause annotation longer than {} characters; the operator \
             records the user's own pause to give it back, and writes nothing over one it \
             cannot record",
            r.name,
            keda::MAX_RECORDED
        )));
    }
    if turn.write == Write::Never {
        let floor = plan.floor;
        let masked = Plan {
            floor,
            after: recorded,
            ..Plan::default()
        };
        return Ok((masked, ceiling));
    }
    Ok((plan, ceiling))
}

/// Writes what the plan asks for, its record made durable first.
async fn apply(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    so: &mut ScaledObjectRead,
    mut record: Record,
    mut plan: Plan,
    workload: Option<&ScaleView>,
) -> Result<Outcome> {
    let tdset_key = format!("{}/{}", turn.ns, turn.tdset.name_any());
    let [key, ..] = keys(&tdset_key);
    let ceiling_key = part::CEILING.key(&tdset_key);
    let now = tokio::time::Instant::now();
    let (held, retry) = contested(turn.ctx, (&key, &ceiling_key), &record, so, &mut plan, now);
    let mut scaled = None;
    if plan.writes() && !held {
        if let Err(p) = write(turn, r, so, &mut record, &plan, workload).await? {
            return Ok(problem_outcome(p, r, record.status));
        }
        let ctx = turn.ctx;
        if plan.pause.is_some() || plan.min.is_some() {
            ctx.contest(&key, |c| c.wrote(plan.floor, now));
        }
        if let Some(max) = plan.max {
            ctx.contest(&ceiling_key, |c| c.wrote(max, now));
        }
        let before = if so.view.pause.pauses() {
            0
        } else {
            so.view.min()
        };
        scaled = changed(&plan, so, workload.map_or(0, |w| w.spec_replicas));
        events(turn, r, &plan, so, before);
        so.view.apply(&plan);
        set_record(&mut record.status, &plan.after);
    } else if !held {
        set_record(&mut record.status, &plan.after);
    }
    asleep_on_record(&mut record, so, &plan, held, workload);
    let problem = fought(turn.ctx, (&key, &ceiling_key), r, so, now);
    let notices = (plan.clamped_from)
        .map(|asked| Notice::Clamped {
            what: format!("ScaledObject {}", r.name),
            field: "spec.maxReplicaCount",
            asked,
            max: so.view.max(),
        })
        .into_iter()
        .collect();
    Ok(Outcome {
        problem,
        notices,
        target: Some(record.status),
        retry,
        scaled,
        at_count: turn.write == Write::IfDifferent && !plan.writes(),
        ..Outcome::observed(Ok(observed(
            r,
            &so.view,
            plan.floor,
            workload.cloned().unwrap_or_default(),
        )))
    })
}

/// Someone keeps setting it back: the schedule goes back later, not now. The pause and the
/// floor are one contest, the ceiling another (a tool that sets only `maxReplicaCount` back
/// holds back only the ceiling, and is named for it). Whether the floor's writes are held
/// back (then nothing is written), and how soon to look again; a ceiling held back is taken
/// out of `plan`.
fn contested(
    ctx: &Context,
    (key, ceiling_key): (&str, &str),
    record: &Record,
    so: &ScaledObjectRead,
    plan: &mut Plan,
    now: tokio::time::Instant,
) -> (bool, Option<Duration>) {
    let mut retry = None;
    let floor_writes = plan.pause.is_some() || plan.min.is_some();
    let verdict = match floor_writes {
        true => ctx.contest(key, |c| c.decide(plan.floor, now)),
        false => Verdict::Write,
    };
    if let Verdict::Wait(until) = verdict {
        retry = Some(until.duration_since(now));
    }
    if let Some(max) = plan.max
        && let Verdict::Wait(until) = ctx.contest(ceiling_key, |c| c.decide(max, now))
    {
        let later = until.duration_since(now);
        retry = Some(retry.map_or(later, |r: Duration| r.min(later)));
        let recorded = Originals::of(&record.status);
        *plan = std::mem::take(plan).without_ceiling(&recorded, &so.view);
    }
    (verdict != Verdict::Write, retry)
}

/// The plan's writes, the record made durable first (with the workload it puts to sleep, to
/// be woken whatever becomes of the ScaledObject). The checks that follow in this reconcile
/// write from the revision this leaves.
async fn write(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    so: &mut ScaledObjectRead,
    record: &mut Record,
    plan: &Plan,
    workload: Option<&ScaleView>,
) -> Answer<()> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    if let Some(rec) = &plan.record {
        set_record(&mut record.status, rec);
        record.durable = false;
    }
    if plan.pause.as_ref().is_some_and(KedaPause::is_night) {
        let asleep = Some(Asleep {
            target: so.view.target.clone(),
            uid: workload.and_then(|w| w.uid.clone()),
        });
        if record.status.asleep != asleep {
            record.status.asleep = asleep;
            record.durable = false;
        }
        warn_if_old(turn, r, &so.view);
    }
    ensure_durable(tdset, ctx, record, eval.replicas).await?;
    Ok(write_plan(ctx, ns, r, so, plan).await?.map(|rv| {
        so.view.resource_version = rv.or(so.view.resource_version.take());
    }))
}

/// The operator's own night pause holds whatever the ScaledObject targets now at 0 (after a
/// retarget, a workload replaced, a pause written by an older version): that one is on
/// record, to be woken if the ScaledObject goes. Once KEDA runs it again (or the user's own
/// pause does), nothing of this TDSet's keeps it at 0.
fn asleep_on_record(
    record: &mut Record,
    so: &ScaledObjectRead,
    plan: &Plan,
    held: bool,
    workload: Option<&ScaleView>,
) {
    let ours_at_night = so.view.pause.is_night() && so.view.pause_ours;
    if ours_at_night && !held {
        let asleep = Asleep {
            target: so.view.target.clone(),
            uid: workload.and_then(|w| w.uid.clone()),
        };
        let known = (record.status.asleep.as_ref())
            .is_some_and(|a| asleep_is(a, &asleep.target, asleep.uid.as_deref()));
        if !known {
            record.status.asleep = Some(asleep);
        }
    } else if plan.floor > 0 && !ours_at_night {
        record.status.asleep = None;
    }
}

/// Another writer keeps setting the floor (or the pause), else the ceiling, back: named.
fn fought(
    ctx: &Context,
    (key, ceiling_key): (&str, &str),
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    now: tokio::time::Instant,
) -> Option<Problem> {
    let floor = ctx.contest(key, |c| {
        c.saw(so.min_setter.clone());
        c.fight(now)
            .map(|_| conflicting_writer(r, c.setter(), false))
    });
    floor.or_else(|| {
        ctx.contest(ceiling_key, |c| {
            c.saw(so.max_setter.clone());
            c.fight(now)
                .map(|_| conflicting_writer(r, c.setter(), true))
        })
    })
}

/// The record's KEDA fields set from `originals`.
fn set_record(status: &mut TargetStatus, originals: &Originals) {
    status.original_pause = originals.pause.clone();
    status.original_max_replicas = originals.max;
    if originals.min.is_some() {
        status.original_replicas = originals.min;
    }
}

/// The change of count the writes made, for `status.history`: put to sleep (from the
/// workload's count), woken, or a new floor.
fn changed(plan: &Plan, so: &ScaledObjectRead, replicas: i32) -> Option<Scaled> {
    let asleep = so.view.pause.is_night();
    match (&plan.pause, plan.min) {
        (Some(p), _) if p.is_night() => Some(Scaled {
            to: Some(0),
            ..Scaled::from_count(replicas)
        }),
        (Some(_), _) if asleep => Some(Scaled {
            to: Some(plan.floor),
            ..Scaled::from_count(replicas)
        }),
        (_, Some(min)) if plan.floor > 0 => Some(Scaled {
            to: Some(min),
            ..Scaled::from_count(so.view.min())
        }),
        _ => None,
    }
}

/// The Events of the plan's writes.
fn events(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    plan: &Plan,
    so: &ScaledObjectRead,
    before: i32,
) {
    let (tdset, ctx, eval) = (turn.tdset, turn.ctx, turn.eval);
    if let Some(p) = &plan.pause {
        let what = if p.is_night() {
            format!("paused ScaledObject {} at 0 replicas", r.name)
        } else if p.pauses() {
            format!("gave ScaledObject {} its own pause back", r.name)
        } else {
            format!("unpaused ScaledObject {}", r.name)
        };
        let to = if p.is_night() { 0 } else { plan.floor };
        turn.events
            .push(record_scale(ctx, tdset, &what, before, to, eval));
    } else if let Some(min) = plan.min.filter(|_| plan.floor > 0) {
        let what = format!("set ScaledObject {} minReplicaCount", r.name);
        turn.events
            .push(record_scale(ctx, tdset, &what, so.view.min(), min, eval));
    }
    if let Some(max) = plan.max {
        let why = if eval.ceiling.is_some() {
            "the schedule's ceiling"
        } else {
            "its own, given back"
        };
        turn.events.push(note(
            tdset,
            EventType::Normal,
            "CeilingSet",
            format!(
                "set ScaledObject {} maxReplicaCount from {} to {max} ({why})",
                r.name,
                so.view.max()
            ),
        ));
    }
}

/// Before the first pause, a KEDA older than the one that applies a pause in one step (its
/// version from the HPA it made) is said in a Warning: its pause may not take.
fn warn_if_old(turn: &mut Turn<'_>, r: &ScaleTargetRef, so: &keda::ScaledObjectView) {
    let Some(version) = so
        .hpa_name
        .as_deref()
        .and_then(|h| io::version(turn.ctx, turn.ns, h))
    else {
        return;
    };
    if version < keda::ONE_STEP_PAUSE {
        let (major, minor) = version;
        let (want_major, want_minor) = keda::ONE_STEP_PAUSE;
        turn.events.push(note(
            turn.tdset,
            EventType::Warning,
            "KedaTooOld",
            format!(
                "KEDA {major}.{minor} runs ScaledObject {}: before {want_major}.{want_minor} KEDA \
                 often did not apply a pause (keda PR #7214), so the workload may not sleep; \
                 the operator checks and reports it. Upgrade KEDA to {want_major}.{want_minor} or later",
                r.name
            ),
        ));
    }
}

/// What a check of a ScaledObject found, and what to do about it (`checked`).
pub(crate) enum Checked {
    /// Nothing to do; look again after this.
    Fine(Duration),
    /// Say this; look again after that.
    Said(Problem, Duration),
    /// The workload runs this count while the schedule's pause holds it at 0: make KEDA put
    /// it back.
    Drifted(i32),
    /// KEDA still says Paused with no pause left, past the grace (keda#6982).
    StillPaused,
}

/// Whether KEDA took what was written to ScaledObject `r`, with the workload it scales read
/// (`replicas`), and how long each finding has lasted, kept under `key_base` (a TDSet's
/// namespace/name; a group's, with the ScaledObject's kind and name).
pub(crate) fn checked(
    ctx: &Context,
    ns: &str,
    key_base: &str,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    replicas: i32,
) -> Checked {
    let [key, drift_key, unpause_key, hpa_key] = keys(key_base);
    let now = tokio::time::Instant::now();
    let since = |k: &str| ctx.contest(k, |c| c.since_write(now));
    let waited = since(&key).is_none_or(|d| d >= KEDA_GRACE);
    let hpa = so.view.hpa();
    let hpa_there = io::hpa_cached(ctx, ns, &hpa);
    let found = keda::check(&so.view, Some(replicas), Some(hpa_there));
    // How long the operator has seen `found` so (0 when not): KEDA's status may lag behind
    // annotations someone else took off, and the cache behind KEDA's new HPA, so both are
    // counted from when first seen, not from the operator's last write (none, after a restart).
    let seen_for = |k: &str, so: bool| {
        ctx.contest(k, |c| {
            if so {
                c.seen_for(now)
            } else {
                c.unseen();
                Duration::ZERO
            }
        })
    };
    let still_for = seen_for(&unpause_key, found == Check::StillPaused);
    let missing_for = seen_for(&hpa_key, found == Check::HpaMissing);
    // A pause not taken yet is waited on from the operator's last write of it; with none
    // remembered (a restart, a new leader just after the pause was written) from when it is
    // first seen not taken, so KEDA gets its grace either way. (`key`'s own wait, free.)
    let not_paused_for = seen_for(&key, found == Check::NotPaused);
    let pause_waited = since(&key).map_or(not_paused_for >= KEDA_GRACE, |d| d >= KEDA_GRACE);
    match found {
        Check::Taken => Checked::Fine(CHECK_EVERY),
        Check::NotPaused if !pause_waited => Checked::Fine(SOON),
        Check::NotPaused => Checked::Said(
            Problem::KedaPauseNotApplied(format!(
                "ScaledObject {} carries the schedule's pause (paused-replicas 0), but KEDA has \
                 not paused it (its Paused condition is not True) and {} still runs {replicas} \
                 replicas: is KEDA's operator running, and at 2.20 or later?",
                r.name, so.view.target
            )),
            CHECK_EVERY,
        ),
        // KEDA is still scaling to the pause (or to the last turn) just written: it says it
        // is done when its status shows the paused count.
        Check::Drifted { .. }
            if (!waited && so.view.paused_replica_count != Some(0))
                || since(&drift_key).is_some_and(|d| d < KEDA_GRACE) =>
        {
            Checked::Fine(SOON)
        }
        Check::Drifted { replicas } => Checked::Drifted(replicas),
        Check::StillPaused if !waited || still_for < KEDA_GRACE => Checked::Fine(SOON),
        Check::StillPaused => Checked::StillPaused,
        Check::HpaMissing if !waited || missing_for < KEDA_GRACE => Checked::Fine(SOON),
        Check::HpaMissing => Checked::Said(
            Problem::KedaHpaMissing(format!(
                "KEDA says ScaledObject {} is not paused, but the HorizontalPodAutoscaler {hpa} \
                 it scales {} with does not exist: nothing scales the workload. Is KEDA's \
                 operator running? It makes the HPA again when it reconciles the ScaledObject",
                r.name, so.view.target
            )),
            CHECK_EVERY,
        ),
    }
}

/// Whether KEDA took what was written, and a drift put right or a stuck pause taken off.
async fn check(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    workload: &ScaleView,
) -> Result<(Option<Problem>, Duration)> {
    let key_base = format!("{}/{}", turn.ns, turn.tdset.name_any());
    let [_, drift_key, unpause_key, _] = keys(&key_base);
    let replicas = workload.spec_replicas;
    Ok(
        match checked(turn.ctx, turn.ns, &key_base, r, so, replicas) {
            Checked::Fine(after) => (None, after),
            Checked::Said(p, after) => (Some(p), after),
            Checked::Drifted(replicas) => {
                put_drift_right(turn, r, so, replicas, &drift_key).await?
            }
            Checked::StillPaused => unpause_stuck(turn.ctx, turn.ns, r, so, &unpause_key).await?,
        },
    )
}

/// KEDA does not watch the workload: the pause's spelling is turned so it reconciles the
/// ScaledObject and scales the workload back to 0; a drift that keeps coming back (a GitOps
/// tool, a script, another TDSet on the workload itself) is said, and put right less and less
/// often.
async fn put_drift_right(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    replicas: i32,
    drift_key: &str,
) -> Result<(Option<Problem>, Duration)> {
    let (tdset, ctx, ns) = (turn.tdset, turn.ctx, turn.ns);
    let now = tokio::time::Instant::now();
    if let Verdict::Wait(until) = ctx.contest(drift_key, |c| c.decide(0, now)) {
        let fight = Problem::ConflictingWriter(format!(
            "{} keeps being set to {replicas} replicas while ScaledObject {} is paused \
             at 0 by the schedule; the operator has KEDA put it back less and less often. \
             Stop whatever sets spec.replicas of {} (KEDA scales it)",
            so.view.target, r.name, so.view.target
        ));
        return Ok((Some(fight), until.duration_since(now)));
    }
    let turned = keda::turned(&so.view.pause);
    let read_at = so.view.resource_version.as_deref();
    let turn_it = io::write(
        ctx,
        ns,
        (r, so, read_at),
        FIELD_MANAGER,
        (Some(&turned), None, None),
    );
    if let Err(p) = turn_it.await? {
        return Ok((Some(p), CHECK_EVERY));
    }
    ctx.contest(drift_key, |c| c.wrote(0, now));
    turn.events.push(note(
        tdset,
        EventType::Normal,
        "DriftCorrected",
        format!(
            "{} was set to {replicas} replicas while ScaledObject {} is paused at 0 \
             (KEDA does not watch it); KEDA was made to put it back",
            so.view.target, r.name
        ),
    ));
    Ok((None, SOON))
}

/// KEDA says Paused with no pause annotation left (keda#6982): `paused: "false"`, as KEDA's
/// documentation allows, three times at once, then less and less often.
pub(crate) async fn unpause_stuck(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    so: &ScaledObjectRead,
    unpause_key: &str,
) -> Result<(Option<Problem>, Duration)> {
    let now = tokio::time::Instant::now();
    let problem = Problem::KedaStillPaused(format!(
        "ScaledObject {} has no pause annotation left, but KEDA still says it is paused \
         (keda#6982); the operator sets autoscaling.keda.sh/paused: \"false\", as KEDA's \
         documentation allows, less and less often",
        r.name
    ));
    if let Verdict::Write = ctx.contest(unpause_key, |c| c.decide(1, now)) {
        let unpause = keda::unpause();
        let read_at = so.view.resource_version.as_deref();
        let pause = (Some(&unpause), None, None);
        let sent = io::write(ctx, ns, (r, so, read_at), FIELD_MANAGER, pause);
        if let Err(p) = sent.await? {
            return Ok((Some(p), CHECK_EVERY));
        }
        ctx.contest(unpause_key, |c| c.wrote(1, now));
    }
    Ok((Some(problem), CHECK_EVERY))
}

/// The workload as KEDA runs it for the schedule.
fn observed(
    r: &ScaleTargetRef,
    so: &keda::ScaledObjectView,
    floor: i32,
    workload: ScaleView,
) -> Observed {
    Observed {
        what: format!("ScaledObject {} ({})", r.name, so.target),
        current: workload.status_replicas,
        ready: workload.ready_replicas,
        wanted: floor,
        settled: if floor == 0 {
            so.paused == Some(true) && workload.spec_replicas == 0 && workload.status_replicas == 0
        } else {
            so.min_replica_count == Some(floor) && workload.status_replicas >= floor
        },
        hint: Some(format!("see `kubectl describe scaledobject {}`", r.name)),
    }
}

/// Another writer keeps setting the pause and `minReplicaCount` back, or (`ceiling`) only
/// `maxReplicaCount` (a GitOps tool: then the fix it needs, for what it sets back).
fn conflicting_writer(
    r: &ScaleTargetRef,
    setter: Option<&gitops::Setter>,
    ceiling: bool,
) -> Problem {
    let (what, paths): (&str, &[&str]) = if ceiling {
        ("spec.maxReplicaCount", &["/spec/maxReplicaCount"])
    } else {
        (
            "the pause annotations, spec.minReplicaCount and spec.maxReplicaCount",
            &[
                "/metadata/annotations/autoscaling.keda.sh~1paused-replicas",
                "/metadata/annotations/autoscaling.keda.sh~1paused",
                "/spec/minReplicaCount",
                "/spec/maxReplicaCount",
            ],
        )
    };
    if let Some((writer, object)) = setter.and_then(|s| s.tool.as_ref()) {
        return Problem::GitOpsConflict(gitops::conflict_message(
            writer,
            object,
            what,
            paths,
            FIELD_MANAGER,
        ));
    }
    Problem::ConflictingWriter(format!(
        "ScaledObject {} keeps being set back by another writer; the operator now puts the \
         schedule back less and less often instead of fighting it. Stop that writer from \
         managing {what}",
        r.name
    ))
}
