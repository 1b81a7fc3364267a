//! One writer per workload: which TDSet holds a referenced object. The owner of a
//! Deployment holds it; otherwise the oldest claim does (creationTimestamp, then name, kept
//! in `TargetIndex`). Every other TDSet that references it writes nothing and says who holds it.

use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::record::problem_outcome;
use crate::api::{ScaleTargetRef, TDSet, TargetStatus};
use crate::controller::state::{Context, Outcome};
use crate::error::Result;
use crate::status::{Problem, reason};

/// Another TDSet that holds `r`: one that owns it (it runs that Deployment), or an older
/// claim on it (see `TargetIndex::holder`). Such a TDSet is the only one that writes it.
pub(crate) fn held_elsewhere(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
) -> Option<Problem> {
    let me = tdset.name_any();
    if r.group() == "apps"
        && r.kind == "Deployment"
        && let Some(d) = ctx.deployments.get(&ObjectRef::new(&r.name).within(ns))
        && let Some(owner) = d.owner_references().iter().find(|o| {
            o.controller == Some(true)
                && o.kind == "TDSet"
                && o.api_version.starts_with("schedule.rs/")
                && Some(&o.uid) != tdset.meta().uid.as_ref()
        })
    {
        return Some(Problem::ConflictingTDSet(format!(
            "{r} is run by TDSet {}, which owns it; this TDSet writes nothing to it",
            owner.name
        )));
    }
    match ctx.index.holder(ns, r.group(), &r.kind, &r.name) {
        Some(holder) if holder != me => Some(Problem::ConflictingTDSet(format!(
            "{r} is held by TDSet {holder}, the older claim on it; this TDSet writes nothing to it \
             until {holder} lets go of it (deleted, or pointed elsewhere)"
        ))),
        _ => None,
    }
}

/// An older group TDSet whose selector picks `r` (read with `labels`): the group holds it, as
/// the oldest claim holds any workload. Only the built-in kinds are read with their labels.
pub(crate) fn held_by_group(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<Problem> {
    let me = tdset.name_any();
    let mine = ctx
        .index
        .claims(ns, r.group(), &r.kind, &r.name)
        .into_iter()
        .find(|(_, n)| *n == me)?;
    let ((_, holder), _) = ctx
        .groups
        .in_namespace(ns)
        .into_iter()
        .find(|(c, e)| *c < mine && e.would_hold((r.group(), &r.kind, &r.name), labels))?;
    Some(Problem::ConflictingTDSet(format!(
        "{r} is selected by TDSet {holder} (a group), the older claim on it; this TDSet writes \
         nothing to it until {holder} lets go of it (excludes it, or is deleted)"
    )))
}

/// The index's key of `r`.
fn key<'a>(ns: &'a str, r: &'a ScaleTargetRef) -> (&'a str, &'a str, &'a str, &'a str) {
    (ns, r.group(), &r.kind, &r.name)
}

/// The own count of `r` (object `uid`, running `current`) for this TDSet to record when it
/// takes it over. A group's record on it says it (`by_group`, when it differs from
/// `current`). Else, from another `scaleTargetRef` TDSet that set `current` (a younger claim
/// that held it until this older one came): the original that TDSet recorded. Else the
/// count it runs.
pub(crate) fn own_count(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
    current: i32,
    by_group: i32,
) -> i32 {
    if by_group != current {
        return by_group;
    }
    uid.and_then(|uid| {
        ctx.index
            .original_elsewhere(key(ns, r), uid, &tdset.name_any(), current)
    })
    .map_or(current, |(_, original)| original)
}

/// Another TDSet that holds `r` and has recorded the same own count (`original`, of object
/// `uid`) as this one, and the same own `maxReplicas` where this one recorded one
/// (`original_max`): it gives them back when it lets go, so this TDSet need not (and must
/// not write over it). A holder that has not recorded them, or recorded others, may not:
/// then this TDSet gives them back, a second write rather than a lost count.
pub(crate) fn holder_with_same_original(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
    original: i32,
    original_max: Option<i32>,
) -> Option<String> {
    let holder = ctx.index.holder(ns, r.group(), &r.kind, &r.name)?;
    if holder == tdset.name_any() {
        return None;
    }
    let uid = uid?;
    let same_max =
        original_max.is_none_or(|m| ctx.index.original_max_of(key(ns, r), uid, &holder) == Some(m));
    (ctx.index.original_of(key(ns, r), uid, &holder) == Some(original) && same_max)
        .then_some(holder)
}

/// The HPA `r`'s own `maxReplicas` as another TDSet records it (see
/// `TargetIndex::original_max_elsewhere`).
pub(crate) fn own_max_elsewhere(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    r: &ScaleTargetRef,
    uid: Option<&str>,
) -> Option<i32> {
    ctx.index
        .original_max_elsewhere(key(ns, r), uid?, &tdset.name_any())
}

/// `held_outcome` for a target another TDSet claims, unless the target is not there: then it
/// is missing (one read of its metadata), as its holder says too.
pub(crate) async fn claimed_outcome(
    tdset: &TDSet,
    ctx: &Context,
    ns: &str,
    p: Problem,
    r: &ScaleTargetRef,
) -> Result<Outcome> {
    let p = crate::controller::io::target::missing(ctx, ns, r)
        .await?
        .unwrap_or(p);
    Ok(held_outcome(tdset, ctx, p, r))
}

/// The outcome for a target another TDSet holds: nothing written, and what this TDSet
/// recorded of that same target before (its original count, if it held it once) kept as
/// it was. A record of another target is not kept: it was let go of before (see
/// `release_previous`), and keeping it would let it go again, over its new holder's writes.
/// A target that is not there (`p` says so) is missing rather than held.
pub(crate) fn held_outcome(
    tdset: &TDSet,
    ctx: &Context,
    p: Problem,
    r: &ScaleTargetRef,
) -> Outcome {
    let recorded = ctx
        .statuses
        .current(tdset)
        .and_then(|s| s.target)
        .filter(|t| t.names(r));
    let mut out = problem_outcome(p, r, TargetStatus::default());
    out.target = recorded;
    // It is there; another TDSet schedules it.
    if let Err(missing) = &mut out.workload
        && !matches!(out.problem, Some(Problem::TargetNotFound(_)))
    {
        missing.reason = reason::TARGET_HELD_ELSEWHERE;
        missing.message = out
            .problem
            .as_ref()
            .map(|p| p.message().to_string())
            .unwrap_or_default();
    }
    out
}
