//! The group form's ordered wake-up and sleep (`scaleTargetSelector.order`): what the pure gate
//! (`workload::group::order`) needs from what was listed and the last status, and what it
//! decided, for the writes, the status, the Events and the next look.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use super::place::Listed;
use crate::api::{OrderDirection, OrderStatus, ScaleTargetSelector, TDSet, TDSetStatus};
use crate::controller::lane::{EventType, Events, note};
use crate::controller::state::Context;
use crate::preview::parse_rfc3339;
use crate::status::reason::TIER_TIMED_OUT;
use crate::workload::group::order::{self, Change, Gate, Tiers, Wait};
use crate::workload::group::{Member, Value, Write};

/// How often a tier waited on is looked at, at first and at most: a group is not woken by its
/// workloads' readiness (see `report`), so it looks, each wait a fifth of the time waited.
const POLL: Duration = Duration::from_secs(2);
const POLL_MAX: Duration = Duration::from_secs(15);

/// What the gate decided for one reconcile.
pub(super) struct Ordered {
    pub(super) gate: Gate,
    tiers: usize,
    timeout: chrono::Duration,
    now: DateTime<Utc>,
}

/// The ready replicas a workload reports: the apps kinds leave `readyReplicas` out at 0; a
/// kind that reports none is `None`.
pub(super) fn ready_of(member: &Member, listed: &Listed) -> Option<i32> {
    match member.api_version.as_str() {
        "apps/v1" => Some(listed.ready.unwrap_or(0)),
        _ => listed.ready,
    }
}

/// What a tier waits for of a workload: its available replicas (ready for `minReadySeconds`)
/// where the kind reports them, else its ready ones; `None`: not waited on beyond its write.
fn available_of(member: &Member, listed: &Listed) -> Option<i32> {
    match member.api_version.as_str() {
        "apps/v1" => Some(listed.available.unwrap_or(0)),
        _ => listed.available.or(listed.ready),
    }
}

/// What the group is found as, for the gate.
pub(super) struct Found<'a> {
    pub(super) listed: &'a [(usize, Listed)],
    pub(super) members: &'a [Member],
    pub(super) writes: &'a [Write],
}

/// Which of the plan's writes go now, for a group whose last status is `previous`, making
/// `change`.
pub(super) fn gate(
    sel: &ScaleTargetSelector,
    previous: Option<&TDSetStatus>,
    found: Found<'_>,
    change: Change,
    now: DateTime<Utc>,
) -> Ordered {
    let Found {
        listed,
        members,
        writes,
    } = found;
    let of: Vec<usize> = listed.iter().map(|(_, l)| l.tier).collect();
    let ready: Vec<Option<i32>> = (members.iter().zip(listed))
        .map(|(m, (_, l))| available_of(m, l))
        .collect();
    let tiers = sel.order.len() + 1;
    let timeout = order::timeout(sel);
    let wait = previous
        .and_then(|p| p.group.as_ref())
        .and_then(|g| g.order.as_ref())
        .and_then(wait_of);
    let gate = order::gate(
        &Tiers {
            count: tiers,
            of: &of,
            ready: &ready,
            timeout,
        },
        members,
        writes,
        wait.as_ref(),
        &change,
        now,
    );
    Ordered {
        gate,
        tiers,
        timeout,
        now,
    }
}

/// The wait a status recorded (a value that cannot be read: none, and the order starts again).
fn wait_of(s: &OrderStatus) -> Option<Wait> {
    Some(Wait {
        direction: s.direction,
        tier: usize::try_from(s.tier).ok()?.checked_sub(1)?,
        since: parse_rfc3339(&s.since)?,
        started: s.started.as_deref().and_then(parse_rfc3339),
        change: Change {
            level: s.level.clone(),
            generation: s.generation,
        },
    })
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Ordered {
    /// The writes to send now.
    pub(super) fn sending(&self, writes: &[Write]) -> Vec<Write> {
        self.gate.now.iter().map(|k| writes[*k].clone()).collect()
    }

    /// The writes held back, as workloads not at their count: which, the value, and why (an
    /// HPA's floor is said through its workload).
    pub(super) fn held(&self, writes: &[Write], members: &[Member]) -> Vec<(usize, Value, String)> {
        let Some(w) = &self.gate.wait else {
            return Vec::new();
        };
        let why = format!(
            "{} after tier {} of {}: {}",
            match w.direction {
                OrderDirection::Waking => "woken",
                OrderDirection::Sleeping => "put to sleep",
            },
            w.tier + 1,
            self.tiers,
            self.gate.waiting_for.as_deref().unwrap_or("its writes")
        );
        (self.gate.held.iter())
            .map(|k| &writes[*k])
            .filter(|w| members[w.member].floor_of.is_none())
            .map(|w| (w.member, w.to, why.clone()))
            .collect()
    }

    /// Where the change stands once this reconcile's writes landed (`done`), for the status.
    pub(super) fn status(&self, done: &[Write]) -> Option<OrderStatus> {
        let w = self.gate.wait.as_ref()?;
        let landed = done.iter().any(|d| {
            let (from, to) = (d.from.replicas(), d.to.replicas());
            match w.direction {
                OrderDirection::Waking => to > from,
                OrderDirection::Sleeping => to < from,
            }
        });
        let started = w.started.or(landed.then_some(self.now));
        Some(OrderStatus {
            direction: w.direction,
            tier: i32::try_from(w.tier + 1).unwrap_or(i32::MAX),
            tiers: i32::try_from(self.tiers).unwrap_or(i32::MAX),
            since: rfc3339(w.since),
            started: started.map(rfc3339),
            waiting_for: crate::status::clipped(
                self.gate.waiting_for.as_deref().unwrap_or("its writes"),
            ),
            level: w.change.level.clone(),
            generation: w.change.generation,
        })
    }

    /// The tiers passed over for their timeout: a Warning each, and the metric.
    pub(super) fn report(&self, tdset: &TDSet, ctx: &Context, events: &mut Events) {
        let Some(direction) = self.gate.direction else {
            return;
        };
        let dir = match direction {
            OrderDirection::Waking => "waking",
            OrderDirection::Sleeping => "going to sleep",
        };
        for (tier, what) in &self.gate.timed_out {
            ctx.metrics
                .tier_timeouts
                .with_label_values(&[&format!("{direction:?}")])
                .inc();
            tracing::warn!(tier = tier + 1, waiting_for = %what, "a tier timed out; the next goes anyway");
            events.push(note(
                tdset,
                EventType::Warning,
                TIER_TIMED_OUT,
                format!(
                    "{dir}, tier {} of {} was not there after spec.scaleTargetSelector.tierTimeout ({}): \
                     {what}; the next tier is written anyway",
                    tier + 1,
                    self.tiers,
                    crate::status::warm_up::duration(self.timeout),
                ),
            ));
        }
    }

    /// How soon to look again while a tier is waited on: a fifth of the time waited, from 2 s
    /// to 15 s, and no later than its timeout.
    pub(super) fn retry(&self) -> Option<Duration> {
        let w = self.gate.wait.as_ref().filter(|_| self.gate.poll)?;
        let waited = (self.now - w.since).to_std().unwrap_or_default();
        let left = (w.since + self.timeout - self.now)
            .to_std()
            .unwrap_or_default()
            .max(Duration::from_secs(1));
        Some((waited / 5).clamp(POLL, POLL_MAX).min(left))
    }
}
