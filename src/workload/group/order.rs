//! Ordered wake-up and sleep of a group (`scaleTargetSelector.order`), pure: which of a plan's
//! writes go now and which wait for an earlier tier.
//!
//! Waking (some held workload's count rises), tiers go first to last: a tier's rises are sent
//! once every workload of the tiers before it is ready at its count. Going to sleep, last to
//! first: a tier's falls once every workload of the tiers after it has no more ready replicas
//! than its count. A tier not there after the timeout is passed over (and reported). Writes
//! that change no count, falls while waking, and every release (letting go is not scheduling)
//! are never held back.
//!
//! The only state is where the change stands (`Wait`, kept in `status.group.order`): the tier
//! waited on and since when. Lost (a crash before the status was written), the next reconcile
//! starts again from the first tier: those already there are passed at once, so the cost is
//! at most one timeout more for a tier that never gets there, never a count.

use chrono::{DateTime, Duration, Utc};

use super::{Member, Place, Value, Why, Write};
use crate::api::{DEFAULT_TIER_TIMEOUT, OrderDirection, ScaleTargetSelector};

/// How long a tier of `sel` is waited for (a value validation refused: the default).
pub fn timeout(sel: &ScaleTargetSelector) -> Duration {
    sel.tier_timeout
        .as_deref()
        .and_then(crate::schedule::parse_duration)
        .filter(|d| *d >= Duration::seconds(1) && *d <= Duration::hours(1))
        .unwrap_or(DEFAULT_TIER_TIMEOUT)
}

/// Where an ordered change stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub direction: OrderDirection,
    /// The tier waited on (0: the first of `order`).
    pub tier: usize,
    /// When the wait on it began.
    pub since: DateTime<Utc>,
    /// When the change's first write landed.
    pub started: Option<DateTime<Utc>>,
}

/// What the gate knows of a group beyond its plan.
pub struct Tiers<'a> {
    /// How many tiers there are (`order`'s, plus one for the workloads in none).
    pub count: usize,
    /// Each member's tier.
    pub of: &'a [usize],
    /// Each member's ready replicas; `None`: its kind reports none (not waited on).
    pub ready: &'a [Option<i32>],
    pub timeout: Duration,
}

/// Which of a plan's writes go now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// Indexes into the plan's writes: to send now.
    pub now: Vec<usize>,
    /// Indexes into the plan's writes: held back for an earlier tier.
    pub held: Vec<usize>,
    /// Where the change stands after this reconcile; `None` when nothing is held back.
    pub wait: Option<Wait>,
    /// What the tier waited on waits for, in a few words.
    pub waiting_for: Option<String>,
    /// Tiers passed over in this reconcile for their timeout, and what each still waited for.
    pub timed_out: Vec<(usize, String)>,
    /// This reconcile goes on with a change an earlier one started (a write of it landed).
    pub continuing: bool,
    /// Which way the change goes; `None` when the plan changes no held count.
    pub direction: Option<OrderDirection>,
}

/// Which way a write moves a held workload's count, if it is ordered at all.
fn direction(w: &Write, members: &[Member]) -> Option<OrderDirection> {
    if matches!(w.why, Why::Left(_)) || members[w.member].place != Place::Held {
        return None;
    }
    let (from, to) = (w.from.replicas(), w.to.replicas());
    match to.cmp(&from) {
        std::cmp::Ordering::Greater => Some(OrderDirection::Waking),
        std::cmp::Ordering::Less => Some(OrderDirection::Sleeping),
        std::cmp::Ordering::Equal => None,
    }
}

/// Which of `writes` (a plan for `members`) go now, given where the change stood before
/// (`previous`, from the last status) and the instant.
pub fn gate(
    tiers: &Tiers<'_>,
    members: &[Member],
    writes: &[Write],
    previous: Option<&Wait>,
    now: DateTime<Utc>,
) -> Gate {
    let dirs: Vec<Option<OrderDirection>> = writes.iter().map(|w| direction(w, members)).collect();
    let all = |direction| Gate {
        now: (0..writes.len()).collect(),
        direction,
        ..Gate::default()
    };
    // Rises order the change; while waking, a fall (a level between two counts, each
    // workload's own) is not held back.
    let dir = if dirs.contains(&Some(OrderDirection::Waking)) {
        OrderDirection::Waking
    } else if dirs.contains(&Some(OrderDirection::Sleeping)) {
        OrderDirection::Sleeping
    } else {
        return all(None);
    };
    let n = tiers.count.max(1);
    if n == 1 {
        return all(Some(dir));
    }
    let seq: Vec<usize> = match dir {
        OrderDirection::Waking => (0..n).collect(),
        OrderDirection::Sleeping => (0..n).rev().collect(),
    };
    let previous = previous.filter(|p| p.direction == dir && p.tier < n);
    let (mut pos, mut since) = previous
        .and_then(|p| Some((seq.iter().position(|t| *t == p.tier)?, p.since)))
        .unwrap_or((0, now));
    let tier_of = |i: usize| tiers.of.get(i).copied().unwrap_or(n - 1).min(n - 1);
    // What each member is to run once its write of this change lands.
    let mut planned: Vec<Value> = members.iter().map(|m| m.value).collect();
    let mut pending = vec![false; members.len()];
    for (w, d) in writes.iter().zip(&dirs) {
        if *d == Some(dir) {
            planned[w.member] = w.to;
            pending[w.member] = true;
        }
    }
    let mut out = Gate {
        direction: Some(dir),
        ..Gate::default()
    };
    loop {
        let t = seq[pos];
        let unsettled = (0..members.len())
            .filter(|i| tier_of(*i) == t && members[*i].place == Place::Held)
            .find_map(|i| {
                unsettled(
                    &members[i],
                    planned[i],
                    tiers.ready.get(i).copied().flatten(),
                    pending[i],
                    dir,
                )
            });
        let Some(what) = unsettled else {
            if pos + 1 == n {
                pos = n;
                break;
            }
            (pos, since) = (pos + 1, now);
            continue;
        };
        if now - since >= tiers.timeout {
            out.timed_out.push((t, what));
            if pos + 1 == n {
                pos = n;
                break;
            }
            (pos, since) = (pos + 1, now);
            continue;
        }
        out.waiting_for = Some(what);
        break;
    }
    let released = &seq[..pos.min(n - 1) + 1];
    for (k, (w, d)) in writes.iter().zip(&dirs).enumerate() {
        if *d == Some(dir) && !released.contains(&tier_of(w.member)) {
            out.held.push(k);
        } else {
            out.now.push(k);
        }
    }
    out.continuing = previous.is_some_and(|p| p.started.is_some());
    if out.held.is_empty() {
        out.waiting_for = None;
    } else {
        out.wait = Some(Wait {
            direction: dir,
            tier: seq[pos.min(n - 1)],
            since,
            started: previous.and_then(|p| p.started),
        });
    }
    out
}

/// Why a held member of the tier waited on is not yet where the change takes it, if it is not.
fn unsettled(
    m: &Member,
    planned: Value,
    ready: Option<i32>,
    pending: bool,
    dir: OrderDirection,
) -> Option<String> {
    // An HPA counts through its workload.
    if m.floor_of.is_some() {
        return pending.then(|| format!("{} {}: its floor to be written", m.kind, m.name));
    }
    let to = planned.replicas();
    // A CronJob has nothing to be ready; a kind that reports no readiness is not waited on
    // beyond its write.
    let ready = match (planned, ready) {
        (Value::Suspended(_), _) => Some(to),
        (_, r) => r,
    };
    let there = match (dir, ready) {
        (_, None) => !pending,
        (OrderDirection::Waking, Some(r)) => !pending && r >= to,
        (OrderDirection::Sleeping, Some(r)) => !pending && r <= to,
    };
    if there {
        return None;
    }
    let what = format!("{} {}", m.kind, m.name);
    Some(match (dir, ready) {
        (OrderDirection::Waking, Some(r)) => format!("{what}: {} of {to} ready", r.min(to)),
        (OrderDirection::Sleeping, Some(r)) => format!("{what}: {r} ready, going to {to}"),
        (_, None) => format!("{what}: its write to {to}"),
    })
}

#[cfg(test)]
mod tests;
