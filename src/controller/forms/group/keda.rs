//! What KEDA made of the ScaledObjects a group holds. KEDA answers only in a ScaledObject's
//! status and does not watch the workload, and nothing watches ScaledObjects: each one the
//! group holds, or has just given back while a workload of its is still asleep on record, is
//! read back live when due, and checked and put right as the `scaleTargetRef` form does (see
//! `scaled_object::checked`).

use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;

use crate::api::ScaleTargetRef;
use crate::controller::io::keda::{self as io, ScaledObjectRead};
use crate::controller::io::target::resolve_and_read;
use crate::controller::kinds::scaled_object::{self, Checked, SOON, part};
use crate::controller::lane::{EventNote, EventType, Events, note};
use crate::controller::state::Context;
use crate::error::Result;
use crate::status::Problem;
use crate::workload::contest::Verdict;
use crate::workload::group::{self, Member, Value, Why};
use crate::workload::keda;

use super::found::{Group, SCALED_OBJECT_LOOK};
use super::observe::{
    Keep, Kind, is_floor_kind, is_scaled_object, keda_idle, keda_paused, observe,
};
use super::write::{Sent, apply_body};

/// The most ScaledObjects one reconcile reads back (two reads each: it and its workload), of
/// those due: one read back waits its turn again, so the rest come next.
const MAX_CHECKED: usize = 32;
/// Read-backs in flight at once.
const IN_FLIGHT: usize = 8;

/// What the checks came to.
#[derive(Default)]
pub(super) struct Checks {
    pub(super) problems: Vec<Problem>,
    pub(super) retry: Option<Duration>,
}

/// Looked at again after `wait`: soon while KEDA is expected to act, otherwise at the group's
/// pace (a look lists the whole group, not one object as the form's does).
fn pace(wait: Duration) -> Duration {
    match wait > SOON {
        true => wait.max(SCALED_OBJECT_LOOK),
        false => wait,
    }
}

impl Checks {
    fn retry_in(&mut self, wait: Duration) {
        self.retry = Some(self.retry.map_or(wait, |r| r.min(wait)));
    }
}

/// The records of each member once `done` landed.
fn after<'a>(members: &'a [Member], done: &'a [group::Write]) -> Vec<Option<&'a group::Record>> {
    let mut out: Vec<Option<&group::Record>> = members.iter().map(|m| m.record.as_ref()).collect();
    for w in done {
        out[w.member] = w.record.as_ref();
    }
    out
}

/// The ScaledObjects to watch over (whether or not a look is due): those that carry this
/// group's record once this round's writes landed, those written this round, and those whose
/// workload is still asleep on this group's record (given back, KEDA not yet seen running it).
pub(super) fn watched(me: &str, members: &[Member], done: &[group::Write]) -> Vec<usize> {
    let records = after(members, done);
    let mine = |i: usize| records[i].is_some_and(|r| r.holder == me);
    (members.iter().enumerate())
        .filter(|(_, m)| m.kind == keda::KIND && m.floor_of.is_some())
        .filter(|(i, so)| {
            mine(*i)
                || done.iter().any(|w| w.member == *i)
                || (members.iter().enumerate()).any(|(w, m)| {
                    m.keda
                        && so.is_floor_of(m)
                        && records[w].is_some_and(|r| r.holder == me && r.scheduled.replicas() == 0)
                })
        })
        .map(|(i, _)| i)
        .collect()
}

/// Reads back each watched ScaledObject whose look is due (one written this round always).
pub(super) async fn check_all(
    g: &Group<'_>,
    done: &[group::Write],
    events: &mut Events,
) -> Result<Checks> {
    let me = g.tdset.name_any();
    let now = tokio::time::Instant::now();
    let mut out = Checks::default();
    let mut due = Vec::new();
    for i in watched(&me, g.members, done) {
        let key_base = key_base(g, &g.members[i]);
        let written = done.iter().any(|w| w.member == i);
        // KEDA is given its grace from the group's own write, as from the form's.
        if written {
            (g.ctx).contest(&part::SCHEDULE.key(&key_base), |c| c.wrote(0, now));
        }
        let look = part::LOOK.key(&key_base);
        if written || off_course(g.members, i) || g.ctx.contest(&look, |c| c.look_due(now)) {
            due.push((i, key_base));
        } else {
            out.retry_in(SCALED_OBJECT_LOOK);
        }
    }
    let past = due.len().saturating_sub(MAX_CHECKED);
    due.truncate(MAX_CHECKED);
    if past > 0 {
        out.retry_in(SOON);
    }
    let looks = due.into_iter().map(|(i, key_base)| async move {
        let written = done.iter().any(|w| w.member == i);
        let found = check_one(g, (i, written), &key_base).await;
        (i, key_base, found)
    });
    let found: Vec<_> = futures::stream::iter(looks)
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for (i, key_base, found) in found {
        let (problem, wait, said) = found.unwrap_or_else(|e| {
            let m = &g.members[i];
            let p = Problem::ApiError(format!(
                "reading back ScaledObject {} (what KEDA made of it): {e}",
                m.name
            ));
            (Some(p), SCALED_OBJECT_LOOK, None)
        });
        let wait = pace(wait);
        let look = part::LOOK.key(&key_base);
        g.ctx.contest(&look, |c| c.looked(wait, now));
        out.problems.extend(problem);
        out.retry_in(wait);
        events.extend(said);
    }
    Ok(out)
}

/// Whether the list shows ScaledObject `i`'s workload where KEDA would not keep it: running
/// under the operator's pause (a Helm upgrade), or at 0 with the pause off. Read back at once
/// then, whenever its look is due (what it leads to is paced by its own contests).
fn off_course(members: &[Member], i: usize) -> bool {
    let so = &members[i];
    let paused = matches!(so.value, Value::Keda { paused: true, .. });
    (members.iter()).any(|w| w.keda && so.is_floor_of(w) && (w.value.replicas() > 0) == paused)
}

/// The keys of a ScaledObject's checks in the group's name.
fn key_base(g: &Group<'_>, m: &Member) -> String {
    format!("{}/{}/{}/{}", g.ns, g.tdset.name_any(), m.kind, m.name)
}

/// One ScaledObject read back and checked: what to say, when to look again, and an Event.
async fn check_one(
    g: &Group<'_>,
    (i, written): (usize, bool),
    key_base: &str,
) -> Result<(Option<Problem>, Duration, Option<EventNote>)> {
    let m = &g.members[i];
    let r = ScaleTargetRef {
        api_version: m.api_version.clone(),
        kind: m.kind.clone(),
        name: m.name.clone(),
    };
    let so = match io::read(g.ctx, g.ns, &r).await? {
        Ok(so) => so,
        // Gone since it was listed: the next reconcile lists without it.
        Err(Problem::TargetNotFound(_)) => return Ok((None, SOON, None)),
        Err(p) => return Ok((Some(p), SCALED_OBJECT_LOOK, None)),
    };
    // Replaced, or pointed at another workload, since it was listed: listed again first.
    let target = m.floor_of.as_ref().map(|(w, _)| w.as_str());
    if so.view.uid.as_deref() != Some(m.uid.as_str()) || target != Some(&so.view.target.name) {
        return Ok((None, SOON, None));
    }
    let workload = match resolve_and_read(g.ctx, g.ns, &so.view.target).await? {
        Ok((_, view)) => view,
        Err(Problem::TargetNotFound(_)) => return Ok((None, SOON, None)),
        Err(p) => return Ok((Some(p), SCALED_OBJECT_LOOK, None)),
    };
    let replicas = workload.spec_replicas;
    Ok(
        match scaled_object::checked(g.ctx, g.ns, key_base, &r, &so, replicas) {
            Checked::Fine(after) => (None, after, None),
            Checked::Said(p, after) => (Some(p), after, None),
            // Only over the group's own pause, by the live record (another TDSet may have
            // taken it since it was listed), and not over a write of this round's.
            Checked::Drifted(_)
                if written || so.held_by.as_deref() != Some(&g.tdset.name_any()) =>
            {
                (None, SOON, None)
            }
            Checked::Drifted(replicas) => drift(g, i, &so, replicas, key_base).await?,
            Checked::StillPaused => {
                let [.., unpause_key, _] = scaled_object::keys(key_base);
                let (problem, after) =
                    scaled_object::unpause_stuck(g.ctx, g.ns, &r, &so, &unpause_key).await?;
                (problem, after, None)
            }
        },
    )
}

/// The workload runs `replicas` while the group's pause holds it at 0 (a Helm upgrade; KEDA
/// does not watch it): KEDA is made to reconcile the ScaledObject, and scale it back, by the
/// pause spelt the other way (`true` / `True`, the same to KEDA). Written by the group's own
/// apply, with the record read back and the floor, so that the morning's apply, which leaves
/// the pause out, takes it off.
async fn drift(
    g: &Group<'_>,
    i: usize,
    so: &ScaledObjectRead,
    replicas: i32,
    key_base: &str,
) -> Result<(Option<Problem>, Duration, Option<EventNote>)> {
    let m = &g.members[i];
    let drift_key = part::DRIFT.key(key_base);
    let now = tokio::time::Instant::now();
    let what = format!("{} (KEDA scales it)", so.view.target);
    if let Verdict::Wait(until) = g.ctx.contest(&drift_key, |c| c.decide(0, now)) {
        let fight = Problem::ConflictingWriter(format!(
            "{what} keeps being set to {replicas} replicas while ScaledObject {} is paused at 0 \
             by the schedule; the operator has KEDA put it back less and less often. Stop \
             whatever sets its spec.replicas",
            m.name
        ));
        return Ok((Some(fight), until.duration_since(now), None));
    }
    let value = Value::Keda {
        floor: so.view.min(),
        paused: true,
    };
    // Guarded by the revision just read: the record written back is the one read with it.
    let member = Member {
        value,
        resource_version: so.view.resource_version.clone(),
        ..m.clone()
    };
    let Some(record) = (m.record.clone()).filter(|r| Some(&r.holder) == so.held_by.as_ref()) else {
        return Ok((None, SOON, None));
    };
    let write = group::Write {
        member: i,
        from: value,
        to: value,
        record: Some(record),
        why: Why::Schedule,
    };
    let mut body = write.body(&member, g.uid);
    if let Some(spelt) = keda::turned(&so.view.pause).paused {
        body["metadata"]["annotations"][keda::PAUSED] = spelt.into();
    }
    let kind = &g.kinds[g.listed[i].0];
    match apply_body(g.ctx, g.ns, kind, &member, &body).await? {
        Sent::Done => {}
        Sent::Problem(p) => return Ok((Some(p), SCALED_OBJECT_LOOK, None)),
        // Changed or gone meanwhile: the next reconcile reads it again.
        Sent::Stale(_) | Sent::Gone(_) => return Ok((None, SOON, None)),
    }
    g.ctx.contest(&drift_key, |c| c.wrote(0, now));
    let said = note(
        g.tdset,
        EventType::Normal,
        "DriftCorrected",
        format!(
            "{what} was set to {replicas} replicas while ScaledObject {} is paused at 0 by the \
             group; KEDA was made to put it back",
            m.name
        ),
    );
    Ok((None, SOON, Some(said)))
}

// Letting go of the group (see `release`): where KEDA is waited for.

/// What a release's wait for KEDA keeps: since its first wait, since it first saw a pause
/// given back.
pub(super) fn wait_key(ns: &str, name: &str) -> [String; 2] {
    ["keda-release", "keda-release-unpaused"].map(|part| format!("{ns}/{name}/{part}"))
}

/// Forgets a release's wait for KEDA: over, or the TDSet holds its group again.
pub(super) fn forget_keda_wait(ctx: &Context, ns: &str, name: &str) {
    for key in wait_key(ns, name) {
        ctx.forget_contest(&key);
    }
}

/// How long the release has waited for KEDA, `so` as read now (its timers start here).
pub(super) fn waited(
    ctx: &Context,
    [first, unpaused]: &[String; 2],
    so: &group::KedaSeen,
) -> group::KedaWaited {
    let now = tokio::time::Instant::now();
    let since_first = ctx.contest(first, |c| c.seen_for(now));
    let given_back = !matches!(so.value, Value::Keda { paused: true, .. });
    let since_unpaused = given_back.then(|| ctx.contest(unpaused, |c| c.seen_for(now)));
    group::KedaWaited {
        since_first,
        since_unpaused,
    }
}

/// A workload's kind, as a ScaledObject names its target: group, kind, name.
pub(super) type Target = (String, String, String);

pub(super) fn target_of(kind: &Kind, m: &group::Member) -> Target {
    let r = &kind.resource;
    (r.group.clone(), r.kind.clone(), m.name.clone())
}

/// The namespace's ScaledObjects, read where a workload sleeps on this TDSet's record (its
/// ScaledObject may no longer carry the TDSet's label: given back in an earlier round or
/// reconcile).
pub(super) struct Kedas {
    /// The uids of the workloads asleep on record.
    asleep: Vec<String>,
    /// Each ScaledObject's target and what a release reads of it; `None`: not listed whole.
    scaled: Option<Vec<(Target, group::KedaSeen)>>,
}

impl Kedas {
    /// For a workload asleep on record that a ScaledObject scales, that ScaledObject
    /// (`Some(None)`: whether one does is not known).
    pub(super) fn scaling(
        &self,
        kind: &Kind,
        m: &group::Member,
    ) -> Option<Option<&group::KedaSeen>> {
        if !self.asleep.contains(&m.uid) {
            return None;
        }
        let target = target_of(kind, m);
        match &self.scaled {
            None => Some(None),
            Some(scaled) => (scaled.iter())
                .find(|(t, _)| *t == target)
                .map(|(_, so)| Some(so)),
        }
    }
}

/// `None` where KEDA is not installed or nothing sleeps on this TDSet's record.
pub(super) async fn kedas_of_asleep(
    ctx: &Context,
    ns: &str,
    me: &str,
    kinds: &[Kind],
    members: &[(usize, group::Member)],
) -> Result<Option<Kedas>> {
    let Some(k) = kinds.iter().position(is_scaled_object) else {
        return Ok(None);
    };
    let asleep: Vec<String> = (members.iter())
        .filter(|(kind, m)| !is_floor_kind(&kinds[*kind]) && group::asleep_on_record(me, m))
        .map(|(_, m)| m.uid.clone())
        .collect();
    if asleep.is_empty() {
        return Ok(None);
    }
    let keep = Keep::new(ctx, ns, me, None, Vec::new());
    let everything = |kind: &Kind| match is_scaled_object(kind) {
        true => vec![String::new()],
        false => Vec::new(),
    };
    let mut problems = Vec::new();
    let (found, listed) = observe(ctx, ns, kinds, everything, &keep, &mut problems).await?;
    let scaled = listed[k].then(|| {
        (found.iter())
            .filter(|(kind, ..)| *kind == k)
            .map(|(_, o, value)| {
                let t = keda::target_of(&o.data);
                let seen = group::KedaSeen {
                    value: *value,
                    holder: group::Record::read(o.annotations(), *value).map(|r| r.holder),
                    keda_paused: keda_paused(o),
                    idle: keda_idle(o),
                };
                ((t.group().to_string(), t.kind.clone(), t.name), seen)
            })
            .collect()
    });
    Ok(Some(Kedas { asleep, scaled }))
}
