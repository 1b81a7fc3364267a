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
        .and_then(crate::schedule::parse_short_duration)
        .unwrap_or(DEFAULT_TIER_TIMEOUT)
}

/// Where an ordered change stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub direction: OrderDirection,
    /// The tier waited on (0: the first of `order`). The last tier (in the change's
    /// direction) means every tier is written: it is waited on only to be seen there.
    pub tier: usize,
    /// When the wait on it began.
    pub since: DateTime<Utc>,
    /// When the change's first write landed.
    pub started: Option<DateTime<Utc>>,
    /// Which change: the level it goes to, and the spec's generation it was planned from.
    pub change: Change,
}

/// What tells one ordered change from the next: a new level is a new change (its own history
/// entry), and an edited spec (another `order`) walks the tiers again from the first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// The level, as `Count` shows it ("own", "5").
    pub level: String,
    pub generation: i64,
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
    /// Where the change stands after this reconcile; `None` when no change is under way.
    pub wait: Option<Wait>,
    /// What the tier waited on waits for, in a few words.
    pub waiting_for: Option<String>,
    /// Tiers passed over in this reconcile for their timeout, and what each still waited for.
    pub timed_out: Vec<(usize, String)>,
    /// This reconcile goes on with a change an earlier one started (a write of it landed).
    pub continuing: bool,
    /// Which way the change goes; `None` when none is under way.
    pub direction: Option<OrderDirection>,
    /// The tier waited on is worth looking at again soon (not yet timed out).
    pub poll: bool,
}

/// Which way a write moves a held workload's count, if it is ordered at all.
fn direction(w: &Write, members: &[Member]) -> Option<OrderDirection> {
    if matches!(w.why, Why::Left(_)) || members[w.member].place != Place::Held {
        return None;
    }
    // A ScaledObject's pause moves its workload whatever its floor (0 included).
    match (w.from, w.to) {
        (Value::Keda { paused: false, .. }, Value::Keda { paused: true, .. }) => {
            return Some(OrderDirection::Sleeping);
        }
        (Value::Keda { paused: true, .. }, Value::Keda { paused: false, .. }) => {
            return Some(OrderDirection::Waking);
        }
        _ => {}
    }
    let (from, to) = (w.from.replicas(), w.to.replicas());
    match to.cmp(&from) {
        std::cmp::Ordering::Greater => Some(OrderDirection::Waking),
        std::cmp::Ordering::Less => Some(OrderDirection::Sleeping),
        std::cmp::Ordering::Equal => None,
    }
}

/// Which of `writes` (a plan for `members`) go now, given where the change stood before
/// (`previous`, from the last status), which change the plan makes, and the instant.
///
/// The tiers are walked from the first in the change's direction. A tier passed before in
/// the same change (there, or over its timeout) is passed again: its writes still to land (a
/// refusal retried, a workload relabelled into it) go, and it is not waited on again, so a
/// tier that never gets there costs one timeout per change, not one per reconcile. The first
/// tier not there is waited on (since when it became the one, kept across reconciles) and
/// the tiers after it are held back; past its timeout it is passed over. Once every tier is
/// written the change stays under way until the last tier is there (or its timeout, or its
/// writes land, whichever is later), and ends then.
pub fn gate(
    tiers: &Tiers<'_>,
    members: &[Member],
    writes: &[Write],
    previous: Option<&Wait>,
    change: &Change,
    now: DateTime<Utc>,
) -> Gate {
    let dirs: Vec<Option<OrderDirection>> = writes.iter().map(|w| direction(w, members)).collect();
    let all = || Gate {
        now: (0..writes.len()).collect(),
        ..Gate::default()
    };
    let n = tiers.count.max(1);
    if n == 1 {
        return all();
    }
    let same = |p: &&Wait| p.change.level == change.level && p.tier < n;
    // Rises order the change; while waking, a fall (a level between two counts, each
    // workload's own) is not held back. With nothing left to write, a change under way is
    // followed to its end.
    let dir = if dirs.contains(&Some(OrderDirection::Waking)) {
        OrderDirection::Waking
    } else if dirs.contains(&Some(OrderDirection::Sleeping)) {
        OrderDirection::Sleeping
    } else if let Some(p) = previous.filter(same) {
        p.direction
    } else {
        return all();
    };
    let seq: Vec<usize> = match dir {
        OrderDirection::Waking => (0..n).collect(),
        OrderDirection::Sleeping => (0..n).rev().collect(),
    };
    let previous = previous.filter(|p| p.direction == dir).filter(same);
    let resumed = previous
        .filter(|p| p.change.generation == change.generation)
        .and_then(|p| Some((seq.iter().position(|t| *t == p.tier)?, p.since)));
    let tier_of = |i: usize| tiers.of.get(i).copied().unwrap_or(n - 1).min(n - 1);
    // What each member is to run once its write of this change lands.
    let mut planned: Vec<Value> = members.iter().map(|m| m.value).collect();
    let mut pending = vec![false; members.len()];
    for (w, d) in writes.iter().zip(&dirs) {
        if *d == Some(dir) {
            planned[w.member] = w.to;
            pending[w.member] = true;
        }
        // A workload KEDA scales: its record of the night now, its ScaledObject's pause (the
        // change) the round after.
        let night = w
            .record
            .as_ref()
            .is_some_and(|r| r.scheduled == Value::Replicas(0));
        if w.why == Why::Record && night && dir == OrderDirection::Sleeping {
            pending[w.member] = true;
        }
    }
    let mut out = Gate {
        direction: Some(dir),
        continuing: previous.is_some_and(|p| p.started.is_some()),
        ..Gate::default()
    };
    let (start, resumed_since) = resumed.map_or((0, None), |(pos, since)| (pos, Some(since)));
    let mut pos = start;
    // The wait on the tier at `pos`; `None` once the change has ended.
    let mut waiting: Option<DateTime<Utc>> = None;
    let mut pending_after_end = false;
    loop {
        let t = seq[pos];
        let since = if pos == start {
            resumed_since.unwrap_or(now)
        } else {
            now
        };
        let blocked = (0..members.len())
            .filter(|i| tier_of(*i) == t && members[*i].place == Place::Held)
            .find_map(|i| {
                let ready = tiers.ready.get(i).copied().flatten();
                unsettled(members, i, &planned, ready, &pending, dir)
            });
        let last = pos + 1 == n;
        let Some(what) = blocked else {
            if last {
                break;
            }
            pos += 1;
            continue;
        };
        let over = now - since >= tiers.timeout;
        if last {
            // Nothing after it to hold back: waited on only to be seen there. Past its timeout
            // the change ends, but is kept (not polled) while its writes have not landed, so
            // that a refused write does not start the walk over.
            if over {
                pending_after_end = pending.iter().any(|p| *p);
            } else {
                out.poll = true;
            }
            if !over || pending_after_end {
                waiting = Some(since);
                out.waiting_for = Some(what);
            }
            break;
        }
        if over {
            out.timed_out.push((t, what));
            pos += 1;
            continue;
        }
        waiting = Some(since);
        out.waiting_for = Some(what);
        out.poll = true;
        break;
    }
    let released = &seq[..=pos];
    for (k, (w, d)) in writes.iter().zip(&dirs).enumerate() {
        if *d == Some(dir) && !released.contains(&tier_of(w.member)) {
            out.held.push(k);
        } else {
            out.now.push(k);
        }
    }
    out.wait = waiting.map(|since| Wait {
        direction: dir,
        tier: seq[pos],
        since,
        started: previous.and_then(|p| p.started),
        change: change.clone(),
    });
    // Ended: a direction only for the timeouts it reports.
    if out.wait.is_none() && out.timed_out.is_empty() {
        out.direction = None;
    }
    out
}

/// Whether the pause of the ScaledObject that scales member `i` is among the planned values.
fn pending_pause_written(members: &[Member], i: usize, planned: &[Value]) -> bool {
    (members.iter().zip(planned))
        .any(|(f, v)| f.is_floor_of(&members[i]) && matches!(v, Value::Keda { paused: true, .. }))
}

/// Why held member `i` of the tier waited on is not yet where the change takes it, if it is
/// not.
fn unsettled(
    members: &[Member],
    i: usize,
    planned: &[Value],
    ready: Option<i32>,
    pending: &[bool],
    dir: OrderDirection,
) -> Option<String> {
    let m = &members[i];
    let what = format!("{} {}", m.kind, m.name);
    if pending[i] {
        if m.floor_of.is_some() {
            return Some(format!("{what}: its floor to be written"));
        }
        if m.keda && dir == OrderDirection::Sleeping && !pending_pause_written(members, i, planned)
        {
            return Some(format!("{what}: its ScaledObject's pause to be written"));
        }
    } else if m.floor_of.is_some() {
        // An HPA counts through its workload.
        return None;
    }
    let mut to = planned[i].replicas();
    // An autoscaled workload woken to a number runs its own count while its HPA's floor
    // takes it to the number: it is there once that many are ready. One KEDA scales is never
    // written: its ScaledObject's pause takes it to 0, its floor up.
    let floor = (members.iter().zip(planned)).find_map(|(f, v)| f.is_floor_of(m).then_some(*v));
    match (dir, floor) {
        (OrderDirection::Sleeping, Some(Value::Keda { paused: true, .. })) => to = 0,
        (OrderDirection::Waking, Some(Value::Floor(f) | Value::Keda { floor: f, .. })) => {
            to = to.max(f)
        }
        _ => {}
    }
    // A CronJob has nothing to be ready; a kind that reports no readiness is not waited on
    // beyond its write.
    let ready = match (planned[i], ready) {
        (Value::Suspended(_), _) => Some(to),
        (_, r) => r,
    };
    let there = !pending[i]
        && match (dir, ready) {
            (_, None) => true,
            (OrderDirection::Waking, Some(r)) => r >= to,
            (OrderDirection::Sleeping, Some(r)) => r <= to,
        };
    if there {
        return None;
    }
    Some(match (dir, ready) {
        (OrderDirection::Waking, Some(r)) => format!("{what}: {} of {to} ready", r.min(to)),
        (OrderDirection::Sleeping, Some(r)) => format!("{what}: {r} ready, going to {to}"),
        (_, None) => format!("{what}: its write to {to}"),
    })
}

#[cfg(test)]
mod tests;
