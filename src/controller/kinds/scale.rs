//! `scaleTargetRef` to a kind with `/scale`: the target's replicas follow the schedule, its
//! original count recorded in status first; nothing is written while another TDSet holds it or
//! an HPA scales it.

use std::time::Duration;

use futures::FutureExt;
use kube::ResourceExt;
use tracing::info;

use super::Turn;
use super::claims;
use super::events::record_scale;
use super::hold::{Held, LetGo, Letting};
use super::record::{Record, Unread, ensure_durable, problem_outcome};
use crate::api::ScaleTargetRef;
use crate::controller::io::target::{hpas_in, resolve_and_read, write};
use crate::controller::state::{Answer, Outcome, Resolved, Scaled, Write};
use crate::error::Result;
use crate::status::{Missing, Observed, Problem, reason};
use crate::workload::contest::Verdict;
use crate::workload::gitops;
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::Saved;
use crate::workload::target::{self, ScaleView};

/// A kind with `/scale` (`hold::<Scale>`): replicas follow the schedule, unless an HPA scales
/// the same object (then nothing is written: the two would fight).
pub(crate) struct Scale;

impl Held for Scale {
    const FIELD: &'static str = FIELD;
    type Read = (Resolved, ScaleView);

    async fn read(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
    ) -> Result<std::result::Result<Self::Read, Unread>> {
        // Until the HPA cache holds a full list, a conflicting HPA could be missed: write
        // nothing yet and look again in a moment.
        if turn.ctx.hpas.wait_until_ready().now_or_never().is_none() {
            let missing = Missing {
                reason: reason::TARGET_MISSING,
                message: "waiting for the HorizontalPodAutoscaler cache to sync".into(),
            };
            return Ok(Err(Unread::NotYet(missing, Duration::from_secs(1))));
        }
        Ok(resolve_and_read(turn.ctx, turn.ns, r)
            .await?
            .map_err(Unread::from))
    }

    fn held_by_group(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
        (_, view): &Self::Read,
    ) -> Option<Problem> {
        claims::held_by_group(turn.tdset, turn.ctx, turn.ns, r, &view.labels)
    }

    fn observed(
        turn: &Turn<'_>,
        r: &ScaleTargetRef,
        (_, view): &Self::Read,
    ) -> (i32, Option<String>) {
        let uid = view.uid.as_deref();
        let (spec, own) = (view.spec_replicas, view.own_replicas);
        let count = claims::own_count(turn.tdset, turn.ctx, turn.ns, r, uid, spec, own);
        (count, view.uid.clone())
    }

    async fn refused(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        (_, view): &Self::Read,
        record: &Record,
    ) -> Result<Option<Outcome>> {
        let hpas = hpas_in(turn.ctx, turn.ns);
        let Some(h) = target::conflicting_hpa(r, &hpas) else {
            return Ok(None);
        };
        let p = Problem::ConflictingAutoscaler(format!(
            "HorizontalPodAutoscaler {} also scales {r}; the operator writes nothing rather than fight it. \
             Set spec.scaleTargetRef to {{apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: {}}} \
             to make the schedule the HPA's floor",
            h.name, h.name
        ));
        let mut out = problem_outcome(p, r, record.status.clone());
        out.workload = Ok(Observed::scale(&r.kind, &r.name, view, turn.eval.replicas));
        Ok(Some(out))
    }

    async fn apply(
        turn: &mut Turn<'_>,
        r: &ScaleTargetRef,
        (res, view): Self::Read,
        record: Record,
    ) -> Result<Outcome> {
        apply(turn, r, &res, view, record).await
    }

    /// `onDelete: Restore` puts the recorded count back; otherwise the count is left.
    async fn let_go(letting: &Letting<'_>, r: &ScaleTargetRef) -> Answer<LetGo> {
        if !letting.restore {
            return Ok(Ok(LetGo::default()));
        }
        let Some(original) = letting.recorded.original_replicas else {
            let none = format!("no original count of {r} was recorded");
            return Ok(Err(Problem::TargetNotFound(none)));
        };
        let restored = letting.refused(restore(letting, r, original).await)?;
        Ok(restored.map(LetGo::done))
    }
}

/// Whether `seen` is the object whose count was recorded (`recorded`: its uid then).
fn same_object(
    r: &ScaleTargetRef,
    recorded: Option<&str>,
    seen: Option<&str>,
) -> std::result::Result<(), Problem> {
    match (recorded, seen) {
        (Some(a), Some(b)) if a != b => Err(Problem::TargetNotFound(format!(
            "{r} was deleted and created again since its count was recorded; the new object is left as it is"
        ))),
        _ => Ok(()),
    }
}

/// Puts a target back to `original`, only onto the object it was recorded from (its uid then).
/// `Ok(Err)` says why it could not be done (gone, replaced, forbidden): the caller then lets
/// go rather than block.
async fn restore(
    letting: &Letting<'_>,
    r: &ScaleTargetRef,
    original: i32,
) -> Answer<Option<String>> {
    let (tdset, ctx, ns) = (letting.tdset, letting.ctx, letting.ns);
    let (res, view) = match resolve_and_read(ctx, ns, r).await? {
        Ok(found) => found,
        Err(p) => return Ok(Err(p)),
    };
    if let Err(p) = same_object(r, letting.recorded.uid.as_deref(), view.uid.as_deref()) {
        return Ok(Err(p));
    }
    // An older group took it over while this TDSet waited, and its record on the object says
    // the same own count: it is the group's to write, and the group gives it back.
    if view.own_replicas == original
        && view.own_replicas != view.spec_replicas
        && let Some(p) = claims::held_by_group(tdset, ctx, ns, r, &view.labels)
    {
        info!(problem = %p.message(), "left the target to its holder");
        return Ok(Ok(None));
    }
    if view.spec_replicas != original
        && let Err(p) = write(ctx, ns, r, &res, original).await?
    {
        return Ok(Err(p));
    }
    Ok(Ok(Some(format!("restored {r} to {original} replicas"))))
}

/// The field this form sets.
const FIELD: &str = "spec.replicas";

/// Writes the schedule's count to the target this TDSet holds, the original made durable
/// first; held back while another writer keeps setting it back.
async fn apply(
    turn: &mut Turn<'_>,
    r: &ScaleTargetRef,
    res: &Resolved,
    mut view: ScaleView,
    mut record: Record,
) -> Result<Outcome> {
    let (tdset, ctx, ns, eval) = (turn.tdset, turn.ctx, turn.ns, turn.eval);
    let mut scaled = None;
    let mut retry = None;
    let key = format!("{ns}/{}", tdset.name_any());
    let now = tokio::time::Instant::now();
    if turn.write == Write::IfDifferent
        && let Some(replicas) = target::scale_write(eval.replicas, &view)
    {
        if let Verdict::Wait(until) = ctx.contest(&key, |c| c.decide(replicas, now)) {
            // Someone keeps setting it back: put the schedule's count back later, not now.
            retry = Some(until.duration_since(now));
        } else {
            ensure_durable(tdset, ctx, &mut record, eval.replicas).await?;
            if let Err(p) = write(ctx, ns, r, res, replicas).await? {
                return Ok(problem_outcome(p, r, record.status));
            }
            ctx.contest(&key, |c| c.wrote(replicas, now));
            turn.events.push(record_scale(
                ctx,
                tdset,
                &format!("scaled {r}"),
                view.spec_replicas,
                replicas,
                eval,
            ));
            scaled = Some(Scaled::from_count(view.spec_replicas));
            view.spec_replicas = replicas;
        }
    }
    let at_count =
        turn.write == Write::IfDifferent && scaled.is_none() && view.spec_replicas == eval.replicas;
    let problem = ctx.contest(&key, |c| {
        c.saw(view.replicas_setter.clone());
        c.fight(now).map(|_| conflicting_writer(r, c.setter()))
    });
    let saved = record
        .status
        .original_replicas
        .map(|own| Saved::removed(own, view.spec_replicas, view.requests));
    Ok(Outcome {
        problem,
        target: Some(record.status),
        retry,
        scaled,
        saved,
        at_count,
        ..Outcome::observed(Ok(Observed::scale(&r.kind, &r.name, &view, eval.replicas)))
    })
}

/// Another writer keeps setting the count back (a GitOps tool's self-heal: then the fix it
/// needs).
fn conflicting_writer(r: &ScaleTargetRef, setter: Option<&gitops::Setter>) -> Problem {
    if let Some((writer, object)) = setter.and_then(|s| s.tool.as_ref()) {
        return Problem::GitOpsConflict(gitops::conflict_message(
            writer,
            object,
            "spec.replicas",
            &["/spec/replicas"],
            FIELD_MANAGER,
        ));
    }
    let who = setter.map_or_else(
        || "another writer".to_string(),
        |s| format!("{:?}", s.manager),
    );
    Problem::ConflictingWriter(format!(
        "spec.replicas of {r} keeps being set back by {who}; the operator now puts the \
         schedule's count back less and less often instead of fighting it. Stop {who} from \
         managing spec.replicas (leave it out of its manifest, or have it ignore the field)"
    ))
}
