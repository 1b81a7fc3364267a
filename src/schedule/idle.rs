//! Asleep when idle (`spec.idle`) as the schedule sees it: a level like the others. Quiet
//! since an instant (what the signals said, never a guess), the workloads sleep from `after`
//! later, counted from that instant or from the schedule's last rise if it is later (a
//! window's start, a request wake-up, the end of an override asleep), wherever `during` lets
//! idleness decide: never under an override (`kubectl tdset wake --for` is one), never where
//! the schedule has them asleep already.
//!
//! Pure, and level-based given the instant the quiet began: what the level is at any instant
//! follows from the spec, that instant and the instant asked about, so a restart or a late
//! reconcile computes the same sleep.

use chrono::{DateTime, Duration, Utc};

use super::{CompiledWindow, Level, Schedule, parse_duration};
use crate::api::{DEFAULT_IDLE_AFTER, Idle, IdleDuring, TDSetSpec};

/// How far back the schedule's last rise is looked for, and the most level changes looked
/// through: a bounded cost for every spec and every quiet, however old.
const LOOKBACK: Duration = Duration::days(8);
const MAX_CHANGES: usize = 512;

/// Where idleness may sleep, compiled.
#[derive(Clone, Debug)]
pub(super) enum During {
    RequestWakeUps,
    OutsideWindows,
    Always,
    /// Request wake-ups, and inside these stretches of the day.
    Windows(Vec<CompiledWindow>),
}

/// Idleness compiled into a schedule (`with_idle`).
#[derive(Clone, Debug)]
pub(super) struct Idled {
    after: Duration,
    during: During,
    /// Since when no signal has seen traffic.
    pub(super) since: DateTime<Utc>,
    /// Since when a signal cannot answer: a sleep begun by then holds, none begins after.
    pub(super) blind_from: Option<DateTime<Utc>>,
}

/// `after`, or its default (the schema bounds it; an unreadable one is the default).
pub fn after(idle: &Idle) -> Duration {
    parse_duration(&idle.after).unwrap_or(DEFAULT_IDLE_AFTER)
}

fn during(idle: &Idle) -> During {
    match idle.during.unwrap_or_default() {
        IdleDuring::RequestWakeUps => During::RequestWakeUps,
        IdleDuring::OutsideWindows => During::OutsideWindows,
        IdleDuring::Always => During::Always,
        IdleDuring::Windows => During::Windows(
            (idle.windows.iter().flatten())
                .map(|w| CompiledWindow {
                    start: w.start_time.minute_of_day(),
                    end: w.end_time.minute_of_day(),
                    replicas: 0,
                    ceiling: None,
                    days: CompiledWindow::days_of(w.days.as_deref()),
                    label: String::new(),
                })
                .collect(),
        ),
    }
}

impl Schedule {
    /// This schedule with the idleness the signals read (`status::idle::idleness`): quiet
    /// since an instant, and since when a signal cannot answer (then the workloads stay as they
    /// were: a sleep begun by then holds, none begins after); `None`: traffic now, or blind
    /// with no quiet, so never idle. Without `spec.idle` it is the schedule as it was.
    pub fn with_idle(
        mut self,
        spec: &TDSetSpec,
        idleness: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    ) -> Schedule {
        let (Some(idle), Some((since, blind_from))) = (&spec.idle, idleness) else {
            return self;
        };
        let during = during(idle);
        // Where idleness may start or stop sleeping inside the day is a boundary to walk.
        if let During::Windows(windows) = &during {
            self.boundaries
                .extend(windows.iter().flat_map(|w| [w.start, w.end]));
            self.boundaries.sort_unstable();
            self.boundaries.dedup();
        }
        self.idle = Some(Idled {
            after: after(idle),
            during,
            since,
            blind_from,
        });
        self
    }

    /// `level` (the schedule's at `at`, a request wake-up included) as idleness leaves it: 0
    /// where the workloads have been quiet for `after`, counted from the later of the quiet's
    /// start and `rise` (the schedule's last rise before `at`), and `during` lets idleness
    /// decide.
    pub(super) fn idled(
        &self,
        idle: &Idled,
        level: Level,
        at: DateTime<Utc>,
        rise: DateTime<Utc>,
    ) -> Level {
        if let Some(b) = idle.blind_from.filter(|b| at > *b) {
            return self.held(idle, b, level, at);
        }
        let due = at >= idle.sleep_from(rise) && self.lets_sleep(idle, &level, at);
        idle.asleep_if(due, level)
    }

    /// `level` at `at`, the signals blind since `b`: asleep only if idleness had the workloads
    /// asleep at `b` and the sleep has gone on unbroken since (the level idleness would give,
    /// had the signals answered, unchanged through `(b, at]`): the TDSet stays as it was, no
    /// sleep begins blind.
    fn held(&self, idle: &Idled, b: DateTime<Utc>, level: Level, at: DateTime<Utc>) -> Level {
        let seeing = Idled {
            blind_from: None,
            ..idle.clone()
        };
        let then = self.idled(
            &seeing,
            self.unidled_level_at(b),
            b,
            self.last_rise(idle.since, b),
        );
        let unbroken =
            then.idle_since.is_some() && self.next_change(b, Some(&seeing), Some(at)).is_none();
        idle.asleep_if(unbroken, level)
    }

    /// Whether `during` lets idleness decide at `at`, where the schedule gives `level`.
    fn lets_sleep(&self, idle: &Idled, level: &Level, at: DateTime<Utc>) -> bool {
        let woken = level.woken_until.is_some();
        match &idle.during {
            During::RequestWakeUps => woken,
            During::OutsideWindows => woken || level.window.is_none(),
            During::Always => true,
            During::Windows(windows) => {
                woken || {
                    let local = at.with_timezone(&self.tz).naive_local();
                    self.active_in(windows, local).is_some()
                }
            }
        }
    }

    /// The last instant in `(since, at]` at which the level before idleness rose (someone is
    /// expected again from then), `since` when there is none; looked for at most `LOOKBACK`
    /// back, through at most `MAX_CHANGES` changes.
    pub(super) fn last_rise(&self, since: DateTime<Utc>, at: DateTime<Utc>) -> DateTime<Utc> {
        let mut t = since.max(at - LOOKBACK);
        let mut last = since;
        for _ in 0..MAX_CHANGES {
            let Some(change) = self.next_change_unidled(t, at) else {
                break;
            };
            if rises(change.before, change.after) {
                last = change.at;
            }
            t = change.at;
        }
        last
    }

    /// The first instant from `now` at which idleness has the workloads asleep if nothing
    /// comes (`status.idle.sleepsAt`), within the schedule's look-ahead: `now`'s own sleep's
    /// start when they are asleep by idleness already.
    pub fn idle_sleeps_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let idle = self.idle.as_ref()?;
        if self.level_at(now).idle_since.is_some() {
            return Some(idle.sleep_from(self.last_rise(idle.since, now)));
        }
        let mut t = now;
        for _ in 0..MAX_CHANGES {
            let change = self.next_level_change(t)?;
            if self.level_at(change.at).idle_since.is_some() {
                return Some(change.at);
            }
            t = change.at;
        }
        None
    }
}

impl Idled {
    /// The instant from which idleness sleeps, the schedule's last rise being `rise`.
    pub(super) fn sleep_from(&self, rise: DateTime<Utc>) -> DateTime<Utc> {
        self.since.max(rise) + self.after
    }

    /// `level` asleep by this idleness where `sleeps` says so and the level leaves it to
    /// idleness (awake, no override).
    fn asleep_if(&self, sleeps: bool, level: Level) -> Level {
        if sleeps && level.replicas != 0 && level.override_.is_none() {
            Level {
                replicas: 0,
                idle_since: Some(self.since),
                ..level
            }
        } else {
            level
        }
    }

    /// Whether the sleep that follows `rise` may begin: always, unless the signals went blind
    /// before it would have.
    pub(super) fn began(&self, rise: DateTime<Utc>) -> bool {
        self.blind_from.is_none_or(|b| self.sleep_from(rise) <= b)
    }
}

/// Whether a change of the level from `before` to `after` rises: from asleep to anything
/// awake (the level own included), or to a higher count.
pub(super) fn rises(before: i32, after: i32) -> bool {
    before != after && (before == 0 || (before > 0 && after > before))
}

#[cfg(test)]
mod tests;
