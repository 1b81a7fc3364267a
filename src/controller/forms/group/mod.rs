//! The group form's edge: lists the selected kinds in the TDSet's namespace (live: what a
//! workload runs and carries decides a write, never a cache), places each workload (held,
//! excluded, held elsewhere), plans with `workload::group`, and sends each write as one
//! server-side apply guarded by the uid and resourceVersion it was planned from.
//!
//! - `observe`: which kinds, and what each listed workload runs and carries;
//! - `place`: whether this TDSet holds a workload, or who else does;
//! - `write`: one planned write sent, and what it came to;
//! - `keda`: what KEDA made of the ScaledObjects it holds;
//! - `order`: which writes wait for an earlier tier (`order`);
//! - `release`: every workload given back (deletion, another form).

mod found;
mod keda;
mod observe;
mod order;
mod place;
mod release;
mod write;

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use tracing::{debug, info, warn};

use crate::api::{GroupKind, GroupStatus, ScaleTargetSelector, TDSet};
use crate::controller::io::target::hpas_in;
use crate::controller::io::tdset::write_group_now;
use crate::controller::kinds::Turn;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::{
    Context, Outcome, Scaled, Write as Mode, backoff_after, claim_of, jitter,
};
use crate::error::{Error, Result};
use crate::schedule::{Count, Evaluation};
use crate::status::{Observed, Problem};
use crate::workload::contest::Verdict;
use crate::workload::gitops;
use crate::workload::group::{self, LeaveReason, Member, Place, Value, Why};
use crate::workload::owned::FIELD_MANAGER;
use crate::workload::savings::Saved;

use found::{Group, SCALED_OBJECT_LOOK};
use observe::{
    Keep, Kind, is_floor_kind, is_hpa, is_scaled_object, kinds, observe, recorded_kinds,
};
use place::{Listed, Placing};
pub(crate) use release::{Release, release_all};
use write::{Sent, WRITES_IN_FLIGHT, send};

/// How soon to drop, once its count is there, what a custom kind's record says of the value
/// before (see `group::Record::previous`).
const TIDY_RETRY: Duration = Duration::from_secs(1);
/// How soon to look again after a write was refused because the workload changed meanwhile.
const STALE_RETRY: Duration = Duration::from_secs(1);

/// What the TDSet holds, and the level applied to it.
pub(crate) async fn reconcile(turn: Turn<'_>, sel: &ScaleTargetSelector) -> Result<Outcome> {
    let Turn {
        tdset,
        ctx,
        ns,
        eval,
        write: mode,
        events,
    } = turn;
    // Held again (another form left and come back before KEDA was waited for): no release is
    // in progress.
    keda::forget_keda_wait(ctx, ns, &tdset.name_any());
    let found = look(tdset, ctx, ns, sel).await?;
    let (kinds, all_listed, listed, members) = (
        &found.kinds,
        &found.all_listed,
        &found.listed,
        &found.members,
    );
    let (name, uid) = (tdset.name_any(), tdset.uid().unwrap_or_default());
    let level = eval.count();
    // A rise written ahead (warmUp) moves the workloads' counts, not a CronJob's suspend.
    let scheduled = eval.scheduled_count();
    let plan = group::plan_within(&name, level, scheduled, members, ctx.group_max_workloads);
    let previous = ctx.statuses.current(tdset);
    let group = Group {
        tdset,
        ctx,
        ns,
        uid: &uid,
        kinds,
        listed,
        members,
    };
    // Suspended, nothing is scheduled, so nothing is ordered.
    let ordered = (mode != Mode::Never).then(|| gate(&group, sel, previous.as_ref(), &plan, level));
    let written = written_and_checked(&group, &plan, mode, ordered.as_ref(), events).await?;
    let previous_level = previous.and_then(|p| p.group.is_some().then_some(p.desired_replicas));
    let done = &written.done;
    said(&group, eval, previous_level, ordered.as_ref(), done, events);
    let (looked, plan) = ((&found.recorded[..], &found.problems[..]), &plan);
    Ok(outcome_of(
        &group,
        all_listed,
        looked,
        plan,
        &written,
        ordered.as_ref(),
        mode,
    ))
}

/// What the round came to, for the report: the group's status, its problems, its change for
/// `status.history`, when to look again, the target kept on record.
fn outcome_of(
    group: &Group<'_>,
    all_listed: &[bool],
    (recorded, problems): (&[String], &[Problem]),
    plan: &group::Plan,
    written: &Written,
    ordered: Option<&order::Ordered>,
    mode: Mode,
) -> Outcome {
    let (tdset, name, members) = (group.tdset, group.tdset.name_any(), group.members);
    let problems = with_write_problems(problems.to_vec(), written, members);
    let done = &written.done;
    let held_kinds = still_held(
        &name,
        group.kinds,
        all_listed,
        recorded,
        group.listed,
        plan,
        done,
    );
    let status = group_status(plan, members, written, ordered, held_kinds);
    let continuing = ordered.is_some_and(|o| o.gate.continuing);
    let unreached = (mode != Mode::Never)
        .then(|| unreached(members, &written.failed))
        .flatten();
    let mut out = outcome(
        tdset,
        group.listed,
        members,
        done,
        status,
        problems,
        written.retry,
    );
    // A later tier of an ordered change is the same change: one history entry, from the
    // group's total before the first tier to its total after the last.
    out.scaled = scaled(members, &plan.writes, done, unreached)
        .filter(|s| !continuing || s.failed.is_some());
    out.failed = written.first_error.is_some();
    looked_again(group, all_listed, done, ordered, &mut out);
    out
}

/// The plan written (in tiers where `order` asks), then what KEDA made of the ScaledObjects
/// the group holds, checked (not while suspended: nothing is written then).
async fn written_and_checked(
    group: &Group<'_>,
    plan: &group::Plan,
    mode: Mode,
    ordered: Option<&order::Ordered>,
    events: &mut Events,
) -> Result<Written> {
    let mut written = write_planned(group, plan, mode, ordered).await?;
    if mode == Mode::IfDifferent {
        let checks = keda::check_all(group, &written.done, events).await?;
        written.problems.extend(checks.problems);
        if let Some(after) = checks.retry {
            written.retry_in(after);
        }
    }
    Ok(written)
}

/// The Events of the round: an ordered change's tiers, and each workload's change. The level
/// unchanged since the last status (`previous_level`, where it held a group): a write of it is
/// a workload joining (unless it is a later tier of an ordered change).
fn said(
    group: &Group<'_>,
    eval: &crate::schedule::Evaluation,
    previous_level: Option<Option<i32>>,
    ordered: Option<&order::Ordered>,
    done: &[group::Write],
    events: &mut Events,
) {
    let (tdset, ctx) = (group.tdset, group.ctx);
    let continuing = ordered.is_some_and(|o| o.gate.continuing);
    if let Some(o) = ordered {
        o.report(tdset, ctx, events);
    }
    let joining = !continuing && previous_level == Some(eval.count().replicas());
    report(tdset, ctx, eval, group.members, done, joining, events);
}

/// When to look again (an ordered change's next tier; a ScaledObject on record, which nothing
/// watches), and the target the TDSet keeps on record.
fn looked_again(
    group: &Group<'_>,
    all_listed: &[bool],
    done: &[group::Write],
    ordered: Option<&order::Ordered>,
    out: &mut Outcome,
) {
    if let Some(retry) = ordered.and_then(|o| o.retry()) {
        out.retry_within(retry);
    }
    let name = group.tdset.name_any();
    if !keda::watched(&name, group.members, done).is_empty() {
        out.retry_within(SCALED_OBJECT_LOOK);
    }
    let (tdset, ctx) = (group.tdset, group.ctx);
    let kinds = (group.kinds, all_listed);
    out.target = left_target(tdset, ctx, kinds, group.listed, group.members, done);
}

/// What one reconcile found of the group: the kinds it looks at (and whether each was listed
/// whole), the workloads listed and placed for the plan, the kinds the last status recorded,
/// and what could not be looked at.
struct Looked {
    kinds: Vec<Kind>,
    all_listed: Vec<bool>,
    listed: Vec<(usize, place::Listed)>,
    members: Vec<group::Member>,
    recorded: Vec<String>,
    problems: Vec<Problem>,
}

/// Lists what the group selects and holds, and places each for the plan.
async fn look(tdset: &TDSet, ctx: &Context, ns: &str, sel: &ScaleTargetSelector) -> Result<Looked> {
    let (selector, tiers) = selectors(sel)?;
    let placing = Placing {
        tdset,
        ctx,
        ns,
        sel,
        // The claim of the spec this reconcile runs on (the index may have moved past it).
        me: claim_of(tdset),
        hpas: &hpas_in(ctx, ns),
    };
    let mut problems = Vec::new();
    let recorded = recorded_kinds(tdset, ctx);
    let kinds = kinds(ctx, sel, &recorded, &mut problems).await?;
    let name = tdset.name_any();
    let uid = tdset.uid().unwrap_or_default();
    let labels = Queries::of(&uid, &selector);
    let queries = |kind: &Kind| queries(kind, &labels);
    let keep = Keep::new(ctx, ns, &name, Some(&selector), tiers);
    let (observed, all_listed) = observe(ctx, ns, &kinds, queries, &keep, &mut problems).await?;
    let whole = |of: fn(&Kind) -> bool| (kinds.iter().zip(&all_listed)).all(|(k, w)| !of(k) || *w);
    let whole = place::Whole {
        hpas: whole(is_hpa),
        scaled_objects: whole(is_scaled_object),
    };
    let (listed, members) = place::all(&placing, &kinds, observed, whole);
    Ok(Looked {
        kinds,
        all_listed,
        listed,
        members,
        recorded,
        problems,
    })
}

/// The group's selector and `order`'s tiers, compiled; one the API server would not parse is
/// the spec's error, with its field.
fn selectors(sel: &ScaleTargetSelector) -> Result<(group::Selector, Vec<group::Selector>)> {
    let invalid = |field: String| {
        move |message| Error::InvalidSpec(vec![crate::schedule::SpecError { field, message }])
    };
    let selector = group::Selector::compile(&sel.selector)
        .map_err(invalid("spec.scaleTargetSelector.selector".into()))?;
    let tiers = (sel.order.iter().enumerate())
        .map(|(i, t)| {
            group::Selector::compile(&t.0)
                .map_err(invalid(format!("spec.scaleTargetSelector.order[{i}]")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((selector, tiers))
}

/// Which of the plan's writes the tiers of `order` let through now (see `order::gate`).
fn gate(
    g: &Group<'_>,
    sel: &ScaleTargetSelector,
    previous: Option<&crate::api::TDSetStatus>,
    plan: &group::Plan,
    level: Count,
) -> order::Ordered {
    let found = order::Found {
        listed: g.listed,
        members: g.members,
        writes: &plan.writes,
    };
    let change = group::order::Change {
        level: level.to_string(),
        generation: g.tdset.metadata.generation.unwrap_or_default(),
    };
    order::gate(sel, previous, found, change, g.ctx.clock.now())
}

/// The group's status: the plan's, less what was not reached (a write that failed, a tier
/// held back), with the kinds it may still hold and the progress of `order`.
fn group_status(
    plan: &group::Plan,
    members: &[Member],
    written: &Written,
    ordered: Option<&order::Ordered>,
    held_kinds: Vec<String>,
) -> GroupStatus {
    let mut status = plan.status.clone();
    group::not_reached(&mut status, members, &written.failed);
    status.held_kinds = held_kinds;
    if let Some(o) = ordered {
        group::not_reached(&mut status, members, &o.held(&plan.writes, members));
        status.order = o.status(&written.done);
    }
    status
}

/// Sends what the plan asks for: suspended, only what the TDSet lets go of (letting go is not
/// scheduling: a workload excluded or no longer selected gets its own count back while
/// suspended too, and those still held are left as they are); otherwise what the tiers of
/// `order` let through.
async fn write_planned(
    group: &Group<'_>,
    plan: &group::Plan,
    mode: Mode,
    ordered: Option<&order::Ordered>,
) -> Result<Written> {
    if mode == Mode::Never {
        let leaving: Vec<group::Write> = (plan.writes.iter())
            .filter(|w| matches!(w.why, Why::Left(_)))
            .cloned()
            .collect();
        let mut written = write_all(group, &leaving).await?;
        written
            .failed
            .extend(Written::suspended(plan, group.members).failed);
        return Ok(written);
    }
    let sending = match ordered {
        Some(o) => o.sending(&plan.writes),
        None => plan.writes.clone(),
    };
    write_all(group, &sending).await
}

/// The target this TDSet recorded in the form it left (`scaleTargetRef`), kept in its status
/// until that workload no longer needs it: until the group's record, carrying the same own
/// count, is on it (or it runs its own count again). A write that failed must not lose the
/// count.
fn left_target(
    tdset: &TDSet,
    ctx: &Context,
    (kinds, all_listed): (&[Kind], &[bool]),
    listed: &[(usize, Listed)],
    members: &[Member],
    done: &[group::Write],
) -> Option<crate::api::TargetStatus> {
    let t = ctx.statuses.current(tdset)?.target?;
    let found = (0..members.len()).find(|i| {
        members[*i].place == Place::Held
            && place::left_record_names(&t, &kinds[listed[*i].0], &members[*i])
    });
    // Not among what was listed: kept while its kind was not listed whole (past
    // --group-max-workloads, or not readable), where it may be.
    let unread = || {
        (kinds.iter().zip(all_listed))
            .any(|(k, whole)| !whole && k.kind.group() == t.group() && k.kind.kind() == t.kind)
    };
    let Some(i) = found else {
        return unread().then_some(t);
    };
    let m = &members[i];
    let recorded = m
        .record
        .as_ref()
        .is_some_and(|r| r.holder == tdset.name_any());
    let settled = recorded || m.value == m.own() || done.iter().any(|w| w.member == i);
    (!settled).then_some(t)
}

/// The label selectors a group lists with: what the TDSet holds (its record's label, by
/// uid); of what it selects, what other groups hold; and all it selects.
struct Queries {
    held: String,
    held_by_others: String,
    selected: String,
}

impl Queries {
    fn of(uid: &str, selector: &group::Selector) -> Queries {
        let selected = selector.to_query();
        let held_by_others = [
            selected.as_str(),
            group::HELD_BY_UID,
            &format!("{}!={uid}", group::HELD_BY_UID),
        ]
        .iter()
        .filter(|q| !q.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(",");
        Queries {
            held: format!("{}={uid}", group::HELD_BY_UID),
            held_by_others,
            selected,
        }
    }
}

/// The label selectors a kind is listed with, in this order: what the TDSet holds; of what it
/// selects, what other groups hold, then all of it; and for the HPAs and the ScaledObjects all
/// of the namespace's (a few: which are floors is known once listed). Past the cap, what another group holds is
/// still read: that group yields it when this one is the older claim, and nobody else would
/// wake it.
fn queries(kind: &Kind, q: &Queries) -> Vec<String> {
    let mut out = vec![q.held.clone()];
    if kind.selected {
        if !is_floor_kind(kind) {
            out.push(q.held_by_others.clone());
        }
        out.push(q.selected.clone());
    }
    if is_floor_kind(kind) {
        out.push(String::new());
    }
    out
}

/// What the writes of one reconcile came to.
#[derive(Default)]
struct Written {
    /// The writes that landed.
    done: Vec<group::Write>,
    /// Held workloads not at their value: which, the value, and why.
    failed: Vec<(usize, Value, String)>,
    /// Workloads another writer keeps setting back, and how often it did.
    fights: Vec<(Member, usize)>,
    /// The GitOps tool that set the first of them back (by kind and name), read before this
    /// reconcile's write took the field over.
    fighter: Option<(gitops::Writer, gitops::Object)>,
    /// Problems to report (a policy's refusal, a kind forbidden).
    problems: Vec<Problem>,
    retry: Option<Duration>,
    /// The first write that failed outright (a 5xx, a webhook down).
    first_error: Option<Error>,
}

impl Written {
    /// Looked at again in `wait` at the latest.
    fn retry_in(&mut self, wait: Duration) {
        self.retry = Some(self.retry.map_or(wait, |r| r.min(wait)));
    }

    /// Suspended: nothing is written; every held workload's write is reported as not made.
    fn suspended(plan: &group::Plan, members: &[Member]) -> Written {
        Written {
            failed: plan
                .writes
                .iter()
                .filter(|w| members[w.member].place == Place::Held)
                .map(|w| (w.member, w.to, "spec.suspend is true".to_string()))
                .collect(),
            ..Written::default()
        }
    }

    /// What one write came to, taken into account.
    fn take(
        &mut self,
        ctx: &Context,
        key: &str,
        m: &Member,
        w: &group::Write,
        result: Result<Sent>,
        now: tokio::time::Instant,
    ) {
        let held = m.place == Place::Held;
        let sent = match result {
            Ok(sent) => sent,
            Err(e) => {
                if held {
                    self.failed.push((w.member, w.to, e.to_string()));
                }
                // From when it failed: a webhook that times out takes longer than the first
                // waits.
                let (error, failed_at) = (e.to_string(), tokio::time::Instant::now());
                let until = ctx.contest(key, |c| {
                    let attempt = c.failures(failed_at).saturating_add(1);
                    let until = failed_at + backoff_after(attempt, jitter());
                    c.failed(w.to.replicas(), until, error);
                    until
                });
                self.retry_in(until.saturating_duration_since(now));
                self.first_error.get_or_insert(e);
                return;
            }
        };
        match sent {
            Sent::Done => {
                // A record that still names the value before its change is tidied by the
                // next reconcile, asked for here: nothing else may come to trigger it.
                // So is the pause of a ScaledObject, once its workload's record landed.
                let asleep_recorded = w.why == Why::Record && w.record.is_some();
                if w.record.as_ref().is_some_and(|r| r.previous.is_some()) || asleep_recorded {
                    self.retry_in(TIDY_RETRY);
                }
                match w.why {
                    Why::ChangedElsewhere { .. } | Why::Schedule => {
                        ctx.contest(key, |c| c.wrote(w.to.replicas(), now));
                    }
                    // Its own count, given back by this TDSet: the sleep that follows is the
                    // schedule's change, not a revert of another writer's.
                    Why::Own | Why::Left(_) => {
                        ctx.contest(key, |c| c.gave_back(w.to.replicas()));
                    }
                    // No count was written.
                    Why::Record => {}
                }
                if let Some(n) = ctx.contest(key, |c| c.fight(now)) {
                    self.fights.push((m.clone(), n));
                }
                self.done.push(w.clone())
            }
            Sent::Stale(why) | Sent::Gone(why) => {
                debug!(%why, "group write refused; looking again");
                self.retry = Some(STALE_RETRY);
                if held {
                    self.failed.push((w.member, w.to, why));
                }
            }
            Sent::Problem(p) => {
                if held {
                    self.failed.push((w.member, w.to, p.message().to_string()));
                }
                self.problems.push(p);
            }
        }
    }
}

/// Sends the plan's writes, at most `WRITES_IN_FLIGHT` at once, each awaited whatever the
/// others came to (one workload's failure must not keep the rest of the group from its
/// count). A workload someone else keeps setting back (a GitOps tool's self-heal) has its
/// value taken as its own each time, and the level applied again less and less often, as
/// for scaleTargetRef.
async fn write_all(g: &Group<'_>, planned: &[group::Write]) -> Result<Written> {
    let (ctx, ns, members) = (g.ctx, g.ns, g.members);
    let name = g.tdset.name_any();
    let mut out = Written::default();
    let now = tokio::time::Instant::now();
    let key = |m: &Member| format!("{ns}/{name}/{}/{}", m.kind, m.name);
    let mut writes = Vec::new();
    for w in planned {
        let m = &members[w.member];
        // Its last write failed outright: the next waits out its backoff, whatever woke this
        // reconcile (another workload's events would otherwise send it at their pace).
        let failing = ctx.contest(&key(m), |c| {
            (c.failing(w.to.replicas(), now)).map(|(until, e)| (until, e.to_string()))
        });
        if let Some((until, error)) = failing {
            out.retry_in(until.duration_since(now));
            if m.place == Place::Held {
                let secs = until.duration_since(now).as_secs();
                out.failed
                    .push((w.member, w.to, format!("{error} (tried again in {secs} s)")));
            }
            out.problems.push(Problem::ApiError(error));
            continue;
        }
        // A writer that replaces the whole object takes the record with it: its reverts
        // are Schedule writes, and held back the same way (a new level never is).
        if matches!(w.why, Why::ChangedElsewhere { .. } | Why::Schedule)
            && let Verdict::Wait(until) = ctx.contest(&key(m), |c| c.decide(w.to.replicas(), now))
        {
            out.retry_in(until.duration_since(now));
            out.failed.push((w.member, w.to, "someone else keeps setting it; the schedule's count is put back less and less often".into()));
            continue;
        }
        writes.push(w);
    }
    // Who sets a workload back is read before the write takes the field over, once per
    // reconcile and only for a revert that makes or continues a fight (the first by kind and
    // name: the one a fight is reported for).
    let fought = (writes.iter())
        .filter(|w| matches!(w.why, Why::ChangedElsewhere { .. } | Why::Schedule))
        .map(|w| &members[w.member])
        .filter(|m| ctx.contest(&key(m), |c| c.has_reverts()))
        .min_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    if let Some(m) = fought {
        out.fighter = observe::gitops_writer(ctx, ns, g.kinds, m).await;
    }
    if !writes.is_empty() {
        let writing: Vec<String> = writes
            .iter()
            .filter(|w| w.record.is_some() && !g.kinds[g.listed[w.member].0].built_in)
            .map(|w| g.kinds[g.listed[w.member].0].kind.to_string())
            .collect();
        write_group_now(g.tdset, ctx, &writing).await?;
    }
    // Boxed: an unboxed future borrowing the plan trips rustc's higher-ranked lifetime
    // check where the controller requires the reconcile to be Send.
    let futures: Vec<BoxFuture<'_, (&group::Write, Result<Sent>)>> = writes
        .into_iter()
        .map(|w| {
            let kind = &g.kinds[g.listed[w.member].0];
            let m = &members[w.member];
            async move { (w, send(ctx, ns, kind, m, w, g.uid).await) }.boxed()
        })
        .collect();
    let sends = futures::stream::iter(futures).buffer_unordered(WRITES_IN_FLIGHT);
    let results: Vec<(&group::Write, Result<Sent>)> = sends.collect().await;
    for (w, result) in results {
        out.take(
            ctx,
            &key(&members[w.member]),
            &members[w.member],
            w,
            result,
            now,
        );
    }
    // Reported by kind and name, whatever order the writes came back in.
    out.fights
        .sort_by(|(a, _), (b, _)| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    Ok(out)
}

/// The reconcile's problems with what its writes came to: refusals after what was found
/// before them, a write that failed outright after those (looked at again with the error
/// policy's backoff; the writes that landed are reported anyway), and another writer that
/// keeps setting workloads back first of all.
/// What the reconcile found and what its writes came to, in the order they are reported: a
/// failure of this TDSet's own first (only the first problem is Degraded's), then a cap
/// reached, then workloads held elsewhere.
fn with_write_problems(
    mut problems: Vec<Problem>,
    written: &Written,
    members: &[Member],
) -> Vec<Problem> {
    problems.extend(written.problems.iter().cloned());
    if let Some(e) = &written.first_error {
        warn!(error = %e, "a group write failed");
        problems.push(Problem::ApiError(e.to_string()));
    }
    let first = written.fights.first().map(|(m, _)| &m.name);
    let fighter = written.fighter.as_ref();
    if let Some((writer, object)) = fighter.filter(|(_, o)| Some(&o.name) == first) {
        let (field, path) = observe::field_of(&written.fights[0].0.value);
        let more = match written.fights.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more workloads)"),
        };
        problems.insert(
            0,
            Problem::GitOpsConflict(gitops::conflict_message(
                writer,
                object,
                &format!("{field}{more}"),
                &[path],
                FIELD_MANAGER,
            )),
        );
    } else if let Some((m, n)) = written.fights.first() {
        problems.insert(
            0,
            Problem::ConflictingWriter(format!(
                "{} {} (and {} more) keep being set back by another writer ({n} times in 10 minutes); \
                 its value is taken as its own count each time and the schedule's put back less and \
                 less often. Stop that writer from managing the count (e.g. Argo CD ignoreDifferences \
                 on /spec/replicas)",
                m.kind,
                m.name,
                written.fights.len() - 1
            )),
        );
    }
    problems.sort_by_key(|p| matches!(p, Problem::TooManyWorkloads(_)));
    problems.extend(conflicts(members));
    problems
}

/// The custom kinds that may still carry this TDSet's record: those where a workload does (or
/// is being given one now), and those recorded before that could not be looked through. A
/// record this reconcile removed (`done`) is gone: the echo of our own write wakes no
/// reconcile, so the status says so now or not until the next boundary.
fn still_held(
    me: &str,
    kinds: &[Kind],
    all_listed: &[bool],
    recorded: &[String],
    listed: &[(usize, Listed)],
    plan: &group::Plan,
    done: &[group::Write],
) -> Vec<String> {
    let unseen = recorded.iter().filter(|r| {
        let r = GroupKind::parse(r);
        kinds
            .iter()
            .position(|k| k.kind.same_kind(&r))
            .is_none_or(|k| !all_listed[k])
    });
    let carrying = listed
        .iter()
        .enumerate()
        .filter(|(i, (k, l))| {
            let removed = done.iter().any(|w| w.member == *i && w.record.is_none());
            !kinds[*k].built_in
                && ((l.member.record.as_ref().is_some_and(|r| r.holder == me) && !removed)
                    || plan
                        .writes
                        .iter()
                        .any(|w| w.member == *i && w.record.is_some()))
        })
        .map(|(_, (k, _))| kinds[*k].kind.to_string());
    let mut held: Vec<String> = unseen.cloned().chain(carrying).collect();
    held.sort();
    held.dedup();
    held
}

/// The workloads another TDSet (or controller) holds, as the problem this TDSet reports.
fn conflicts(members: &[Member]) -> Option<Problem> {
    let held: Vec<String> = members
        .iter()
        .filter_map(|m| match &m.place {
            Place::HeldElsewhere(by) => Some(format!("{} {} (held by {by})", m.kind, m.name)),
            _ => None,
        })
        .collect();
    let first = held.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = match held.len().saturating_sub(5) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    (!held.is_empty()).then(|| {
        Problem::PartlyHeldElsewhere(format!(
            "{} selected workloads are held elsewhere, and this TDSet writes nothing to them: {first}{more}",
            held.len()
        ))
    })
}

/// The Events of a reconcile's writes: one for the scheduled changes together (a boundary of a
/// thousand workloads is one Event), one per workload that left, was restored or was changed
/// by someone else.
fn report(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    members: &[Member],
    done: &[group::Write],
    joining: bool,
    events: &mut Events,
) {
    let mut scheduled = Vec::new();
    let mut restored = Vec::new();
    for w in done {
        let m = &members[w.member];
        let what = format!("{} {}", m.kind, m.name);
        match &w.why {
            Why::Schedule if joining && m.record.is_none() => events.push(note(
                tdset,
                EventType::Normal,
                "Joined",
                format!(
                    "{what} joined the group and was set to {} (its own count {} is recorded on it): {}",
                    w.to,
                    w.from.short(),
                    eval.why()
                ),
            )),
            Why::Schedule => {
                scheduled.push(format!("{what} ({} -> {})", w.from.short(), w.to.short()))
            }
            Why::Own => restored.push(format!("{what} ({})", w.to.short())),
            Why::ChangedElsewhere { to } => events.push(note(
                tdset,
                EventType::Normal,
                "ChangedElsewhere",
                format!(
                    "{what} was set to {to} by someone else while this TDSet held it: that is now its own count; \
                     the schedule's level applies again ({} now: {})",
                    w.to,
                    eval.why()
                ),
            )),
            // Bookkeeping: its ScaledObject's write is the change said.
            Why::Record => {}
            Why::Left(_) if m.keda => {}
            Why::Left(why) => {
                let reason = if matches!(why, LeaveReason::Released) {
                    "Released"
                } else {
                    "Left"
                };
                events.push(note(
                    tdset,
                    EventType::Normal,
                    reason,
                    format!("{what} got its own count back ({}): {why}", w.to),
                ));
            }
        }
    }
    together(tdset, ctx, eval, &scheduled, &restored, events);
}

/// One Event for the workloads set to the schedule's level together, one for those given
/// their own count back.
fn together(
    tdset: &TDSet,
    ctx: &Context,
    eval: &Evaluation,
    scheduled: &[String],
    restored: &[String],
    events: &mut Events,
) {
    let list = |items: &[String]| {
        let shown: Vec<_> = items.iter().take(5).cloned().collect();
        let more = items.len().saturating_sub(shown.len());
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    if !scheduled.is_empty() {
        let (direction, reason) = match eval.count() {
            Count::Replicas(0) => ("down", "ScaledDown"),
            _ => ("up", "Scaled"),
        };
        ctx.metrics
            .scale_operations
            .with_label_values(&[direction])
            .inc_by(scheduled.len() as u64);
        info!(workloads = scheduled.len(), level = %eval.count(), "scaled the group");
        events.push(note(
            tdset,
            EventType::Normal,
            reason,
            format!(
                "set {} workloads to the level {}: {} ({})",
                scheduled.len(),
                eval.count(),
                list(scheduled),
                eval.why()
            ),
        ));
    }
    if !restored.is_empty() {
        info!(
            workloads = restored.len(),
            "gave the group its own counts back"
        );
        events.push(note(
            tdset,
            EventType::Normal,
            "Restored",
            format!(
                "gave {} workloads their own count back: {} ({})",
                restored.len(),
                list(restored),
                eval.why()
            ),
        ));
    }
}

/// The change of the group's total this reconcile made (a scheduled level, own counts given
/// back, someone else's change taken), or tried and could not, for `status.history`: the held
/// workloads' total before and the total the plan asks for (their HPAs not counted), in one
/// unit whether the level is a count or `own`.
fn scaled(
    members: &[Member],
    planned: &[group::Write],
    done: &[group::Write],
    unreached: Option<String>,
) -> Option<Scaled> {
    let landed = done.iter().any(|w| {
        matches!(
            w.why,
            Why::Schedule | Why::Own | Why::ChangedElsewhere { .. }
        )
    });
    let held = |i: &usize| members[*i].place == Place::Held && members[*i].floor_of.is_none();
    let mut after: Vec<Value> = members.iter().map(|m| m.value).collect();
    for w in planned {
        after[w.member] = w.to;
    }
    through_scaled_objects(members, &mut after);
    let from = (0..members.len())
        .filter(held)
        .map(|i| members[i].value.replicas())
        .sum();
    let to = (0..members.len())
        .filter(held)
        .map(|i| after[i].replicas())
        .sum();
    // A write that changed no count (a custom kind's record tidied, an HPA's floor alone) is
    // no change of the group's.
    ((landed && from != to) || unreached.is_some()).then_some(Scaled {
        from,
        to: Some(to),
        failed: unreached,
        landed,
    })
}

/// What each workload KEDA scales is asked to run once `after` is written: 0 under its
/// ScaledObject's pause, else at least the ScaledObject's floor (KEDA scales it up to it).
fn through_scaled_objects(members: &[Member], after: &mut [Value]) {
    for (i, m) in members.iter().enumerate().filter(|(_, m)| m.keda) {
        let Some(f) = members.iter().position(|f| f.is_floor_of(m)) else {
            continue;
        };
        after[i] = match after[f] {
            Value::Keda { paused: true, .. } => Value::Replicas(0),
            Value::Keda { floor, .. } => Value::Replicas(after[i].replicas().max(floor)),
            _ => after[i],
        };
    }
}

/// A held workload's own count, for the savings. One KEDA scales has it on record only while
/// asleep; at least its ScaledObject's own floor.
fn own_count(members: &[Member], i: usize) -> i32 {
    let m = &members[i];
    if !m.keda {
        return m.own().replicas();
    }
    let floor = (members.iter().find(|f| f.is_floor_of(m))).map_or(0, |f| f.own().replicas());
    m.own().replicas().max(floor)
}

/// The held workloads whose writes did not land, in a few words: how many, and the first.
fn unreached(members: &[Member], failed: &[(usize, Value, String)]) -> Option<String> {
    let (first, _, why) = failed.first()?;
    let m = &members[*first];
    let held = members
        .iter()
        .filter(|m| m.place == Place::Held && m.floor_of.is_none());
    Some(format!(
        "{} of {} workloads not at their count; {} {}: {why}",
        failed.len(),
        held.count(),
        m.kind,
        m.name
    ))
}

/// What a held workload counts toward the group's ready replicas: its ready replicas up to
/// what it is asked to run, so that one workload's spare pods (a rollout's surge) never stand
/// for another's missing ones: the group's sum reaches its total only when each is ready.
/// The apps kinds leave `readyReplicas` out at 0; a CronJob has no readiness and counts as
/// ready; a custom kind that reports none makes the group's readiness unknown.
fn ready_toward(member: &Member, listed: &Listed, value: Value) -> Option<i32> {
    let asked = value.replicas();
    match value {
        Value::Suspended(_) => Some(asked),
        _ => order::ready_of(member, listed).map(|r| r.min(asked)),
    }
}

fn outcome(
    tdset: &TDSet,
    listed: &[(usize, Listed)],
    members: &[Member],
    done: &[group::Write],
    status: GroupStatus,
    problems: Vec<Problem>,
    retry: Option<Duration>,
) -> Outcome {
    // After the writes that landed: what each held workload is asked to run.
    let mut value: Vec<Value> = members.iter().map(|m| m.value).collect();
    for w in done {
        value[w.member] = w.to;
    }
    through_scaled_objects(members, &mut value);
    let held: Vec<usize> = (0..members.len())
        .filter(|i| members[*i].place == Place::Held && members[*i].floor_of.is_none())
        .collect();
    let current: i32 = held
        .iter()
        .map(|i| listed[*i].1.running.unwrap_or(value[*i].replicas()))
        .sum();
    let wanted: i32 = held.iter().map(|i| value[*i].replicas()).sum();
    let ready = held
        .iter()
        .map(|i| ready_toward(&members[*i], &listed[*i].1, value[*i]))
        .sum::<Option<i32>>();
    let settled = status.not_at_schedule.is_empty()
        && status.at_schedule == held.len() as i32
        && held.iter().all(|i| {
            listed[*i]
                .1
                .running
                .is_none_or(|r| r == value[*i].replicas())
        });
    // Against each held workload's own count; a CronJob's suspension removes no steady pods.
    let saved = held
        .iter()
        .filter(|i| matches!(members[**i].value, Value::Replicas(_)))
        .map(|i| {
            let own = own_count(members, *i);
            Saved::removed(own, value[*i].replicas(), listed[*i].1.requests)
        })
        .fold(Saved::default(), Saved::plus);
    if !problems.is_empty() {
        warn!(problems = problems.len(), first = %problems[0].message(), "group problems");
    }
    let observed = Observed {
        what: format!("the group's {} workloads", held.len()),
        current,
        ready,
        wanted,
        settled,
        hint: Some(format!(
            "see `kubectl get tdset {} -o jsonpath='{{.status.group}}'`",
            tdset.name_any()
        )),
    };
    Outcome {
        problem: problems.into_iter().next(),
        retry,
        group: Some(status),
        saved: Some(saved),
        ..Outcome::observed(Ok(observed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::group::Record;
    use crate::workload::keda as keda_api;

    /// Found in review: a workload KEDA scales, idle at 0 by day under a floor of 0, saves
    /// nothing; asleep, it saves its count on record.
    #[test]
    fn a_keda_workload_saves_its_count_on_record_and_nothing_while_idle() {
        let mut web = Member::held("apps/v1", "Deployment", "web", Value::Replicas(0));
        (web.autoscaled_by, web.keda) = (Some("web".into()), true);
        let mut so = Member::held(
            "keda.sh/v1alpha1",
            keda_api::KIND,
            "web",
            Value::Keda {
                floor: 0,
                paused: false,
            },
        );
        so.floor_of = Some(("web".into(), 10));
        let mut ms = vec![web, so];
        assert_eq!(own_count(&ms, 0), 0);
        ms[0].record = Some(Record {
            holder: "g".into(),
            own: Value::Replicas(3),
            scheduled: Value::Replicas(0),
            previous: None,
        });
        assert_eq!(own_count(&ms, 0), 3);
    }
}
