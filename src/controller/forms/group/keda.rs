//! What KEDA made of the ScaledObjects a group holds. KEDA answers only in a ScaledObject's
//! status and does not watch the workload, and nothing watches ScaledObjects: each held one is
//! read back live, and checked and put right as the `scaleTargetRef` form does (see
//! `scaled_object::checked`).

use std::time::Duration;

use kube::ResourceExt;

use crate::api::ScaleTargetRef;
use crate::controller::forms::scaled_object::{self, Checked};
use crate::controller::io::keda::{self as io, ScaledObjectRead};
use crate::controller::io::target::resolve_and_read;
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::ContestPart;
use crate::error::Result;
use crate::status::Problem;
use crate::workload::contest::Verdict;
use crate::workload::group::{self, Member, Place, Value, Why};
use crate::workload::keda;

use super::write::{Sent, apply_body};
use super::{Group, SCALED_OBJECT_LOOK};

/// The most ScaledObjects one reconcile reads back (two reads each: it and its workload): the
/// first by name; those past it are written as the others, but not read back.
const MAX_CHECKED: usize = 32;

/// What the checks came to.
#[derive(Default)]
pub(super) struct Checks {
    pub(super) problems: Vec<Problem>,
    pub(super) retry: Option<Duration>,
}

impl Checks {
    /// Looked at again after `wait`: soon while KEDA is expected to act, otherwise at the
    /// group's pace (a look lists the whole group, not one object as the form's does).
    fn retry_in(&mut self, wait: Duration) {
        let wait = match wait > scaled_object::SOON {
            true => wait.max(SCALED_OBJECT_LOOK),
            false => wait,
        };
        self.retry = Some(self.retry.map_or(wait, |r| r.min(wait)));
    }
}

/// The ScaledObjects this group holds once `done` landed, each with the record it carries.
fn held<'a>(g: &'a Group<'_>, done: &'a [group::Write]) -> Vec<(usize, group::Record)> {
    let me = g.tdset.name_any();
    let mut out: Vec<(usize, group::Record)> = (g.members.iter().enumerate())
        .filter(|(_, m)| m.kind == keda::KIND && m.floor_of.is_some() && m.place == Place::Held)
        .filter_map(|(i, m)| {
            let written = done.iter().rev().find(|w| w.member == i);
            let record = match written {
                Some(w) => w.record.clone(),
                None => m.record.clone(),
            };
            Some((i, record.filter(|r| r.holder == me)?))
        })
        .collect();
    out.sort_by(|(a, _), (b, _)| g.members[*a].name.cmp(&g.members[*b].name));
    out.truncate(MAX_CHECKED);
    out
}

/// Reads back each ScaledObject the group holds, and what KEDA made of it.
pub(super) async fn check_all(
    g: &Group<'_>,
    done: &[group::Write],
    events: &mut Events,
) -> Result<Checks> {
    let mut out = Checks::default();
    let now = tokio::time::Instant::now();
    for (i, record) in held(g, done) {
        let m = &g.members[i];
        let key_base = format!("{}/{}/{}/{}", g.ns, g.tdset.name_any(), m.kind, m.name);
        // KEDA is given its grace from the group's own write, as from the form's.
        if done.iter().any(|w| w.member == i) {
            g.ctx
                .contest(&ContestPart::Keda.key(&key_base), |c| c.wrote(0, now));
        }
        let r = ScaleTargetRef {
            api_version: m.api_version.clone(),
            kind: m.kind.clone(),
            name: m.name.clone(),
        };
        let so = match io::read(g.ctx, g.ns, &r).await? {
            Ok(so) if so.view.uid.as_deref() == Some(m.uid.as_str()) => so,
            // Gone or replaced since it was listed: the next reconcile lists it again.
            _ => continue,
        };
        let workload = match resolve_and_read(g.ctx, g.ns, &so.view.target).await? {
            Ok((_, view)) => view,
            Err(_) => continue,
        };
        let replicas = workload.spec_replicas;
        match scaled_object::checked(g.ctx, g.ns, &key_base, &r, &so, replicas) {
            Checked::Fine(after) => out.retry_in(after),
            Checked::Said(p, after) => {
                out.problems.push(p);
                out.retry_in(after);
            }
            Checked::Drifted(replicas) => {
                let (problem, after) =
                    drift(g, (i, &record), &so, replicas, &key_base, events).await?;
                out.problems.extend(problem);
                out.retry_in(after);
            }
            Checked::StillPaused => {
                let [.., unpause_key, _] = scaled_object::keys(&key_base);
                let (problem, after) =
                    scaled_object::unpause_stuck(g.ctx, g.ns, &r, &so, &unpause_key).await?;
                out.problems.extend(problem);
                out.retry_in(after);
            }
        }
    }
    Ok(out)
}

/// The workload runs `replicas` while the group's pause holds it at 0 (a Helm upgrade; KEDA
/// does not watch it): KEDA is made to reconcile the ScaledObject, and scale it back, by the
/// pause spelt the other way (`true` / `True`, the same to KEDA). Written by the group's own
/// apply, with its record and floor, so that the morning's apply, which leaves the pause out,
/// takes it off.
async fn drift(
    g: &Group<'_>,
    (i, record): (usize, &group::Record),
    so: &ScaledObjectRead,
    replicas: i32,
    key_base: &str,
    events: &mut Events,
) -> Result<(Option<Problem>, Duration)> {
    let m = &g.members[i];
    let drift_key = ContestPart::KedaDrift.key(key_base);
    let now = tokio::time::Instant::now();
    let what = format!("{} (KEDA scales it)", so.view.target);
    if let Verdict::Wait(until) = g.ctx.contest(&drift_key, |c| c.decide(0, now)) {
        let fight = Problem::ConflictingWriter(format!(
            "{what} keeps being set to {replicas} replicas while ScaledObject {} is paused at 0 \
             by the schedule; the operator has KEDA put it back less and less often. Stop \
             whatever sets its spec.replicas",
            m.name
        ));
        return Ok((Some(fight), until.duration_since(now)));
    }
    let value = Value::Keda {
        floor: so.view.min(),
        paused: true,
    };
    // Guarded by the revision just read (the group's own writes this round moved it).
    let member = Member {
        value,
        resource_version: so.view.resource_version.clone(),
        ..m.clone()
    };
    let write = group::Write {
        member: i,
        from: value,
        to: value,
        record: Some(record.clone()),
        why: Why::Schedule,
    };
    let mut body = write.body(&member, g.uid);
    if let Some(spelt) = keda::turned(&so.view.pause).paused {
        body["metadata"]["annotations"][keda::PAUSED] = spelt.into();
    }
    let kind = &g.kinds[g.listed[i].0];
    match apply_body(g.ctx, g.ns, kind, &member, &body).await? {
        Sent::Done => {}
        Sent::Problem(p) => return Ok((Some(p), scaled_object::CHECK_EVERY)),
        // Changed or gone meanwhile: the next reconcile reads it again.
        Sent::Stale(_) | Sent::Gone(_) => return Ok((None, scaled_object::SOON)),
    }
    g.ctx.contest(&drift_key, |c| c.wrote(0, now));
    events.push(note(
        g.tdset,
        EventType::Normal,
        "DriftCorrected",
        format!(
            "{what} was set to {replicas} replicas while ScaledObject {} is paused at 0 by the \
             group; KEDA was made to put it back",
            m.name
        ),
    ));
    Ok((None, scaled_object::SOON))
}
