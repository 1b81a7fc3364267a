//! `scaleTargetRef` to an HPA: the schedule is its floor (see `workload::hpa`); a floor of 0
//! puts the HPA's target to sleep (an HPA cannot hold 0).

use kube::ResourceExt;
use tracing::debug;

use super::Part;
use super::Turn;
use super::claims;
use super::events::record_scale;
use super::hold::{Held, LetGo, Letting};
use super::record::{
    Record, Unread, ensure_durable, problem_outcome, wake_asleep, wake_left, wake_left_behind,
};
use crate::api::{Asleep, ScaleTargetRef, TargetStatus};
use crate::controller::io::target::{
    HpaRead, read_hpa, resolve_and_read, write, write_if_unchanged, write_max_replicas,
    write_min_replicas,
};
use crate::controller::lane::{EventType, note};
use crate::controller::state::{Answer, Context, Outcome, Resolved, Scaled, Write};
use crate::error::Result;
use crate::status::{Notice, Observed, Problem};
use crate::workload::contest::Verdict;
use crate::workload::gitops;
use crate::workload::hpa::{self, HpaView};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::{Requests, Saved};

/// The field this form sets.
const FIELD: &str = "spec.minReplicas";

/// An HPA's ceiling, contested apart from its floor.
pub(crate) const CEILING: Part = Part("maxReplicas");

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

/// An HPA (`hold::<Hpa>`): the schedule is its floor (see `workload::hpa`).
pub(crate) struct Hpa;

impl Held for Hpa {
    const FIELD: &'static str = FIELD;
    type Read = HpaRead;

    async fn read(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
    ) -> Result<std::result::Result<HpaRead, Unread>> {
        Ok(read_hpa(turn.ctx, turn.ns, r).await?.map_err(Unread::from))
    }

    fn observed(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
        (hpa, uid, _): &HpaRead,
    ) -> (i32, Option<String>) {
        // A group's floor on it is not its own (see `group::own_floor`), nor another TDSet's.
        let (tdset, ctx, ns) = (turn.tdset, turn.ctx, turn.ns);
        let own = claims::own_count(tdset, ctx, ns, r, uid.as_deref(), hpa.min(), hpa.own_min);
        (own, uid.clone())
    }

    /// KEDA makes this HPA and keeps its floor at its ScaledObject's minReplicaCount: a floor
    /// written here would be put back at once, again and again. Refused, nothing written to
    /// it; a workload this TDSet put to sleep through it before KEDA took it is woken first
    /// (an HPA does not scale up from 0, and nobody else would).
    async fn refused(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        (hpa, ..): &HpaRead,
        record: &Record,
    ) -> Result<Option<Outcome>> {
        let Some(owner) = &hpa.scaled_object else {
            return Ok(None);
        };
        if let Some(left) = &record.status.asleep {
            let to = record.status.original_replicas.unwrap_or(1).max(1);
            let why = format!(
                "ScaledObject {owner} manages HorizontalPodAutoscaler {}",
                r.name
            );
            wake_left(turn, left, to, why).await?;
        }
        let p = managed_by_keda(r, owner);
        Ok(Some(claims::held_outcome(turn.tdset, turn.ctx, p, r)))
    }

    async fn apply(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        read: HpaRead,
        mut record: Record,
    ) -> Result<Outcome> {
        let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
        let hpa = &read.0;
        let target = read_target(ctx, ns, hpa.target.clone()).await?;
        // The HPA points at another workload than the one this TDSet put to sleep through it
        // (or that one was replaced): it is woken to the HPA's own floor first, suspended or
        // not (letting go is not scheduling); nobody else would.
        let why = format!("HorizontalPodAutoscaler {} no longer scales it", r.name);
        let now = (&target.reference, target.uid.as_deref());
        wake_left_behind(turn, &mut record, now, why).await?;
        // The HPA's own ceiling: as recorded; or, while the ceiling on the HPA is one this
        // operator wrote, as the TDSet that set it records it (a younger claim that held the
        // HPA until this one came; its record says nothing once the owner set another since);
        // else the one it has.
        let uid = read.1.as_deref();
        let own = (record.status.original_max_replicas)
            .or_else(|| {
                (hpa.max_by_operator)
                    .then(|| claims::own_max_elsewhere(tdset, ctx, ns, r, uid))
                    .flatten()
            })
            .unwrap_or(hpa.max_replicas);
        let ahead = eval.ahead_of.map(|t| t.ceiling);
        let ceiling = Ceiling {
            in_force: hpa::ceiling_in_force(eval.ceiling, ahead, own),
            own,
        };
        let mut plan = hpa::plan(
            eval.replicas,
            ceiling.in_force,
            Some(own),
            hpa,
            target.replicas,
        );
        if turn.write == Write::Never {
            plan.min_replicas = None;
            plan.max_replicas = None;
            plan.scale_target = None;
        }
        apply(turn, r, read, record, target, plan, ceiling).await
    }

    /// A workload put to sleep through the HPA is woken first, to the HPA's own floor,
    /// whatever became of the HPA since (deleted, pointed at another workload); then its own
    /// ceiling (and with `restore` its own floor) is given back.
    async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo> {
        let (ctx, ns, recorded) = (letting.ctx, letting.ns, letting.recorded);
        let woke = match &recorded.asleep {
            Some(asleep) => {
                let to = recorded.original_replicas.unwrap_or(1).max(1);
                letting.refused(wake_asleep(ctx, ns, asleep, to).await)?
            }
            None => Ok(None),
        };
        let restore = recorded.original_replicas.filter(|_| letting.restore);
        let result = match letting.refused(give_back(ctx, ns, r, recorded, restore).await)? {
            // Restore without a record of the own floor: what could be done is, and the
            // floor's is said to have failed.
            Ok(done) if letting.restore && restore.is_none() => {
                Err(Problem::TargetNotFound(format!(
                    "no original count of {r} was recorded{}",
                    done.map_or_else(String::new, |d| format!(" ({d})"))
                )))
            }
            result => result,
        };
        Ok(with_asleep_woken(woke, result, r).map(LetGo::done))
    }
}

/// What letting go of an HPA came to, with the workload asleep through it woken first: an HPA
/// that is gone leaves nothing more to do once that workload is awake.
fn with_asleep_woken(
    woke: std::result::Result<Option<String>, Problem>,
    result: std::result::Result<Option<String>, Problem>,
    r: &ScaleTargetRef,
) -> std::result::Result<Option<String>, Problem> {
    match (woke, result) {
        (Ok(None), result) => result,
        (Ok(Some(woke)), Err(Problem::TargetNotFound(_))) => {
            Ok(Some(format!("{woke} ({r} is gone)")))
        }
        (Ok(Some(woke)), Ok(Some(done))) => Ok(Some(format!("{woke}; {done}"))),
        (Ok(Some(woke)), Ok(None)) => Ok(Some(woke)),
        (Ok(Some(_)), Err(p)) | (Err(p), _) => Err(p),
    }
}

/// The workload the HPA scales, as read now (or why it cannot be read).
async fn read_target(ctx: &Context, ns: &str, reference: ScaleTargetRef) -> Result<HpaTarget> {
    Ok(match resolve_and_read(ctx, ns, &reference).await? {
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
    })
}

/// The HPA's `maxReplicas` as this TDSet sees it.
#[derive(Clone, Copy)]
struct Ceiling {
    /// The schedule's ceiling in force (`hpa::ceiling_in_force`); `None`: the HPA's own.
    in_force: Option<i32>,
    /// The HPA's own.
    own: i32,
}

/// Writes what the plan asks for (the floor, then the target's count), the HPA's own floor
/// made durable first.
#[allow(clippy::too_many_arguments)]
async fn apply(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    (mut hpa, uid, max_setter): HpaRead,
    mut record: Record,
    mut target: HpaTarget,
    mut plan: hpa::FloorPlan,
    ceiling: Ceiling,
) -> Result<Outcome> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    // Someone keeps setting maxReplicas back (a GitOps tool's self-heal): the ceiling is put
    // back less and less often, as a count is, rather than at watch speed.
    let key = CEILING.key(&format!("{ns}/{}", tdset.name_any()));
    let now = tokio::time::Instant::now();
    let mut retry = None;
    if let Some(max) = plan.max_replicas
        && let Verdict::Wait(until) = ctx.contest(&key, |c| c.decide(max, now))
    {
        retry = Some(until.duration_since(now));
        plan = plan.without_ceiling(&hpa);
    }
    if to_record(&mut record, &plan, &target, ceiling) {
        ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
    }
    let (floor_before, target_before) = (hpa.min(), target.replicas);
    let hpa_writes = HpaWrites {
        r,
        uid: uid.as_deref(),
        plan: &plan,
        ceiling,
    };
    if let Err(p) = hpa_writes.send(turn, &mut hpa).await? {
        return Ok(problem_outcome(p, r, record.status));
    }
    if plan.max_replicas.is_some() {
        ctx.contest(&key, |c| c.wrote(hpa.max_replicas, now));
    }
    if ceiling.in_force.is_none() && hpa.max_replicas == ceiling.own {
        // The HPA's own ceiling is back: nothing of it is this TDSet's to give back any more.
        record.status.original_max_replicas = None;
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
    let scaled = change(&plan, floor_before, target_before);
    let fight = ctx.contest(&key, |c| {
        c.saw(max_setter);
        c.fight(now)
            .map(|_| c.setter().and_then(|s| s.tool.clone()))
    });
    let mut out = outcome(r, &hpa, record, target, &plan, scaled);
    if let Some(tool) = fight
        && out.problem.is_none()
    {
        out.problem = Some(conflicting_ceiling_writer(r, tool.as_ref()));
    }
    out.retry = out.retry.or(retry);
    out.ceiling = ceiling.in_force.map(|c| c.max(eval.replicas).max(1));
    Ok(out)
}

/// What must be on record, durable, before the plan's writes: which workload this TDSet puts
/// to sleep (whatever happens to the HPA then, deleted or pointed elsewhere, it is woken), and
/// the HPA's own ceiling before the first of the schedule's replaces it. Whether anything is
/// to be written at all (then the record is made durable first).
fn to_record(
    record: &mut Record,
    plan: &hpa::FloorPlan,
    target: &HpaTarget,
    ceiling: Ceiling,
) -> bool {
    if plan.scale_target == Some(0) {
        let asleep = Some(Asleep {
            target: target.reference.clone(),
            uid: target.uid.clone(),
        });
        if record.status.asleep != asleep {
            record.status.asleep = asleep;
            record.durable = false;
        }
    }
    if plan.max_replicas.is_some()
        && ceiling.in_force.is_some()
        && record.status.original_max_replicas.is_none()
    {
        record.status.original_max_replicas = Some(ceiling.own);
        record.durable = false;
    }
    plan.min_replicas.is_some() || plan.scale_target.is_some() || plan.max_replicas.is_some()
}

/// The plan's writes to the HPA itself: its floor and its ceiling, in the order that keeps
/// `minReplicas <= maxReplicas` at every step.
struct HpaWrites<'a> {
    r: &'a ScaleTargetRef,
    uid: Option<&'a str>,
    plan: &'a hpa::FloorPlan,
    ceiling: Ceiling,
}

impl HpaWrites<'_> {
    /// Sends them; `hpa` follows what was written. A refusal is the problem to report.
    async fn send(&self, turn: &mut Turn<'_>, hpa: &mut HpaView) -> Answer<()> {
        let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
        let (r, uid, plan, ceiling) = (self.r, self.uid, self.plan, self.ceiling);
        let max_first = plan.max_first(hpa);
        if max_first && let Err(p) = set_ceiling(turn, r, hpa, uid, plan, ceiling, None).await? {
            return Ok(Err(p));
        }
        let mut lowered = None;
        if let Some(min) = plan.min_replicas {
            if let Err(p) = write_min_replicas(ctx, ns, r, uid, min).await? {
                return Ok(Err(p));
            }
            if plan.floor > 0 {
                let change = format!("set HorizontalPodAutoscaler {} minReplicas", r.name);
                turn.events
                    .push(record_scale(ctx, tdset, &change, hpa.min(), min, eval));
            } else {
                // Asleep: lowered under the ceiling that follows, not a change of count.
                lowered = Some(hpa.min());
            }
            hpa.min_replicas = Some(min);
        }
        if !max_first && let Err(p) = set_ceiling(turn, r, hpa, uid, plan, ceiling, lowered).await?
        {
            return Ok(Err(p));
        }
        Ok(Ok(()))
    }
}

/// The change of count the plan's writes made, for `status.history`. The count before: the
/// target's when it was put to sleep or woken, else the floor's. The count after: the floor in
/// force, what the workload can reach (a count above the HPA's ceiling is clamped to it), not
/// the count the schedule asked for: a scale-up is ready, and timed, once that many are.
fn change(plan: &hpa::FloorPlan, floor_before: i32, target_before: Option<i32>) -> Option<Scaled> {
    let from = plan
        .scale_target
        .map(|_| target_before.unwrap_or(0))
        .or(plan
            .min_replicas
            .filter(|_| plan.floor > 0)
            .map(|_| floor_before))?;
    Some(Scaled {
        to: Some(plan.floor),
        ..Scaled::from_count(from)
    })
}

/// The HPA is KEDA's: ScaledObject `owner` owns it.
fn managed_by_keda(r: &ScaleTargetRef, owner: &str) -> Problem {
    Problem::ManagedByKeda(format!(
        "HorizontalPodAutoscaler {} is managed by KEDA: ScaledObject {owner} (keda.sh) owns it \
         and sets its minReplicas from its minReplicaCount, so a floor written here would be \
         put back at once; the operator writes nothing to it. Set spec.scaleTargetRef to \
         {{apiVersion: keda.sh/v1alpha1, kind: ScaledObject, name: {owner}}}: the schedule then \
         pauses it at night and sets its minReplicaCount by day",
        r.name
    ))
}

/// Another writer keeps setting `maxReplicas` back (a GitOps tool: then the fix it needs).
fn conflicting_ceiling_writer(
    r: &ScaleTargetRef,
    gitops: Option<&(gitops::Writer, gitops::Object)>,
) -> Problem {
    if let Some((writer, object)) = gitops {
        return Problem::GitOpsConflict(gitops::conflict_message(
            writer,
            object,
            "spec.maxReplicas",
            &["/spec/maxReplicas"],
            FIELD_MANAGER,
        ));
    }
    Problem::ConflictingWriter(format!(
        "spec.maxReplicas of HorizontalPodAutoscaler {} keeps being set back by another writer; \
         the operator now puts the schedule's ceiling back less and less often instead of \
         fighting it. Stop that writer from managing maxReplicas (a server-side apply that \
         leaves the field out, or have it ignore the field)",
        r.name
    ))
}

/// Writes the plan's `maxReplicas`, if any, with its Event (`lowered`: the floor it had, when
/// it was lowered under this ceiling while the target sleeps).
async fn set_ceiling(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    hpa: &mut HpaView,
    uid: Option<&str>,
    plan: &hpa::FloorPlan,
    ceiling: Ceiling,
    lowered: Option<i32>,
) -> Answer<()> {
    let Some(max) = plan.max_replicas else {
        return Ok(Ok(()));
    };
    if let Err(p) = write_max_replicas(turn.ctx, turn.ns, r, uid, max).await? {
        return Ok(Err(p));
    }
    let mut why = match ceiling.in_force {
        Some(_) => "the schedule's ceiling".to_string(),
        None => "its own, given back".to_string(),
    };
    if let Some(from) = lowered {
        why.push_str(&format!(
            "; minReplicas lowered from {from} to {} under it while its target sleeps",
            hpa.min()
        ));
    }
    turn.events.push(note(
        turn.tdset,
        EventType::Normal,
        "CeilingSet",
        format!(
            "set HorizontalPodAutoscaler {} maxReplicas from {} to {max} ({why})",
            r.name, hpa.max_replicas
        ),
    ));
    hpa.max_replicas = max;
    Ok(Ok(()))
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
            what: format!("HorizontalPodAutoscaler {}", r.name),
            field: "spec.maxReplicas",
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

/// Lets go of an HPA as its status records it (`recorded`), only on the object it was
/// recorded from: its own `maxReplicas` given back whatever `onDelete` says (a ceiling left
/// behind would cap its scaling for good); with `restore` (`onDelete: Restore`, the own
/// floor recorded) its floor put back; both in the order the API server accepts (see
/// `hpa::released`); and a target the schedule put to 0 woken to the floor that stays, the
/// HPA would not wake it. What was done, if anything.
async fn give_back(
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    recorded: &TargetStatus,
    restore: Option<i32>,
) -> Answer<Option<String>> {
    let (mut hpa, seen, _) = match read_hpa(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => return Ok(Err(p)),
    };
    if let (Some(a), Some(b)) = (recorded.uid.as_deref(), seen.as_deref())
        && a != b
    {
        return Ok(Err(Problem::TargetNotFound(format!(
            "{r} was deleted and created again since its count was recorded; the new object is \
             left as it is"
        ))));
    }
    // A ceiling the owner set since this TDSet's is the owner's: it stays.
    let own_max = recorded
        .original_max_replicas
        .filter(|_| hpa.max_by_operator);
    let plan = hpa::released(&hpa, own_max, restore);
    let mut done = Vec::new();
    let max_first = plan.max_first(&hpa);
    for step in [max_first, !max_first, max_first] {
        // max, then min (or min, then max): the first and last passes write the ceiling.
        match (step, plan.max_replicas, plan.min_replicas) {
            (true, Some(max), _) if hpa.max_replicas != max => {
                if let Err(p) = write_max_replicas(ctx, ns, r, seen.as_deref(), max).await? {
                    return Ok(Err(p));
                }
                let raised = match own_max {
                    Some(own) if own < max => {
                        format!("; its own {own} is below the floor it keeps")
                    }
                    _ => String::new(),
                };
                done.push(format!(
                    "gave HorizontalPodAutoscaler {} its own maxReplicas back ({} -> {max}{raised})",
                    r.name, hpa.max_replicas
                ));
                hpa.max_replicas = max;
            }
            (false, _, Some(min)) if hpa.min() != min => {
                if let Err(p) = write_min_replicas(ctx, ns, r, seen.as_deref(), min).await? {
                    return Ok(Err(p));
                }
                done.push(format!(
                    "restored HorizontalPodAutoscaler {} minReplicas to {min}",
                    r.name
                ));
                hpa.min_replicas = Some(min);
            }
            _ => {}
        }
    }
    if let Ok((res, view)) = resolve_and_read(ctx, ns, &hpa.target).await?
        && view.spec_replicas == 0
    {
        let to = hpa.min().max(1);
        let read_at = view.resource_version.as_deref();
        if let Err(p) = write_if_unchanged(ctx, ns, &hpa.target, &res, to, read_at).await? {
            return Ok(Err(p));
        }
        done.push(format!(
            "woke {} to {to} replicas, the floor of HorizontalPodAutoscaler {}",
            hpa.target, r.name
        ));
    }
    Ok(Ok((!done.is_empty()).then(|| done.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::hpa::plan;

    fn hpa(min: i32, max: i32) -> HpaView {
        HpaView {
            name: "web".into(),
            min_replicas: Some(min),
            max_replicas: max,
            target: ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
            },
            current_replicas: Some(min),
            own_min: min,
            max_by_operator: false,
            scaled_object: None,
        }
    }

    #[test]
    fn a_rise_clamped_by_the_hpas_ceiling_goes_to_what_the_workload_can_reach() {
        // 10 asked, maxReplicas 5: the floor, and the change, go from 2 to 5.
        let h = hpa(2, 5);
        let p = plan(10, None, None, &h, Some(2));
        assert_eq!(p.clamped_from, Some(10));
        let c = change(&p, h.min(), Some(2)).unwrap();
        assert_eq!((c.from, c.to, c.landed), (2, Some(5), true));
        // Woken from 0 under the same ceiling: from the target's 0 to 5.
        let c = change(&plan(10, None, None, &h, Some(0)), h.min(), Some(0)).unwrap();
        assert_eq!((c.from, c.to), (0, Some(5)));
        // Put to sleep: from the target's count to 0.
        let c = change(&plan(0, None, None, &h, Some(4)), h.min(), Some(4)).unwrap();
        assert_eq!((c.from, c.to), (4, Some(0)));
        // Already at the clamped floor: no write, no change.
        let at = hpa(5, 5);
        assert_eq!(
            change(&plan(10, None, None, &at, Some(5)), 5, Some(5)),
            None
        );
    }
}
