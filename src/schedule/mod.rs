//! The schedule: which replica count applies at an instant, and when it changes next.
//!
//! Pure functions of a spec and an instant; no client, no clock. Windows are wall-clock times
//! in the spec's zone, so the answer at an instant depends only on the local (date, time) at
//! that instant. That makes DST fall out of the conversion: a repeated local hour is simply
//! visited twice, and a boundary inside a skipped hour has been passed when the gap ends.
//!
//! Two quantities (see the contract): the **level** `L(t)` (the first active override, else
//! the first active window, with holidays deciding which windows start on a date, else
//! `defaultReplica`) and the **count** `R(t)`, which equals `L(t)` unless a ramp spreads a
//! change of level over steps (`ramp.rs`). Holidays and overrides live in `calendar.rs`; the
//! schema's rules, checked again for manifests that never met an API server, in `validate.rs`;
//! when a rise is written ahead of its transition (`warmUp`), in `lead.rs`.

mod calendar;
pub mod ics;
pub mod idle;
mod lead;
mod ramp;
mod validate;
pub mod wake;

use std::fmt;

use chrono::{
    DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike,
    Utc,
};
use chrono_tz::Tz;

use crate::api::{Day, TDSetSpec};
use calendar::{CompiledOverride, Holidays};
use ramp::{CompiledRamp, LevelChange};

pub use calendar::{MAX_HOLIDAYS, MAX_OVERRIDES, SharedHolidays, holiday_days, unreadable};
pub use lead::{Led, LedTransition, MAX_LEAD, lead_of, rises};
pub use ramp::{RampPhase, parse_duration, parse_short_duration};
pub use validate::validate;

/// How far ahead `next_transition` looks before it concludes that the count never changes.
/// The weekly pattern is periodic in local time, so two weeks see every local (weekday,
/// minute) at least once even if a DST gap hides some of them in one week; holidays and
/// overrides extend the look-ahead to a day past the last of them.
const HORIZON: Duration = Duration::days(15);
/// The furthest a holiday or override can push the look-ahead.
const MAX_LOOKAHEAD: Duration = Duration::days(800);
/// The longest a ramp may take from the lowest to the highest level of a spec.
pub const MAX_RAMP: Duration = Duration::days(7);
/// Bit of `CompiledWindow::days` for `Hol`.
const HOL: u8 = 1 << 7;

/// The level `own` (group form only: each workload runs its own count), as the engine holds
/// it. Levels are only compared inside the engine, never added to, except by a ramp, which is
/// never combined with `own` (`validate`); outside the engine it is read as [`Count::Own`].
pub const OWN: i32 = -1;

/// What the schedule gives a workload: a count, or its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Count {
    Own,
    Replicas(i32),
}

impl Count {
    pub fn of(replicas: i32) -> Count {
        if replicas == OWN {
            Count::Own
        } else {
            Count::Replicas(replicas)
        }
    }

    /// The number, unless it is `own`.
    pub fn replicas(self) -> Option<i32> {
        match self {
            Count::Own => None,
            Count::Replicas(n) => Some(n),
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Own => f.write_str("own"),
            Count::Replicas(n) => write!(f, "{n}"),
        }
    }
}

/// A spec compiled for evaluation: the zone resolved, times in minutes, days as a bitmask.
#[derive(Clone, Debug)]
pub struct Schedule {
    tz: Tz,
    windows: Vec<CompiledWindow>,
    default_replicas: i32,
    /// `defaultMaxReplica`.
    default_ceiling: Option<i32>,
    /// Sorted, deduplicated minutes of the day at which some window starts or ends, always
    /// including 0 so that day-filtered windows (and holidays) are re-evaluated at midnight.
    boundaries: Vec<u16>,
    holidays: Holidays,
    overrides: Vec<CompiledOverride>,
    ramp: Option<CompiledRamp>,
    /// How far from a level change its ramp reaches (zero without a ramp).
    reach: Duration,
    /// Where the look-ahead for a change may stop (see `HORIZON`).
    lookahead_until: Option<DateTime<Utc>>,
    /// A wake-up by a request (`status.requestWake`), added by `with_request_wake`.
    woken: Option<wake::Woken>,
    /// Idleness (`spec.idle`, quiet since an instant), added by `with_idle`.
    idle: Option<idle::Idled>,
}

#[derive(Clone, Debug)]
struct CompiledWindow {
    start: u16,
    end: u16,
    replicas: i32,
    /// `maxReplica`: an HPA's ceiling while the window is active.
    ceiling: Option<i32>,
    /// Bit `d` set when the window may start on weekday `d` (0 = Monday); `HOL` when it may
    /// start on a holiday. A window without `days` has every bit.
    days: u8,
    label: String,
}

impl CompiledWindow {
    /// `days` as a bitmask: every bit when absent.
    fn days_of(days: Option<&[crate::api::Day]>) -> u8 {
        match days {
            None => u8::MAX,
            Some(days) => days.iter().fold(0u8, |m, d| m | 1 << d.index()),
        }
    }
}

/// What the schedule says at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The count the operator sets, `R(t)`; [`OWN`] only in the group form (read it through
    /// `count`).
    pub replicas: i32,
    /// The level the schedule asks for, `L(t)`; differs from `replicas` only mid-ramp.
    pub level: i32,
    /// Index into `schedulingConfig` of the window that applies, if any.
    pub window: Option<usize>,
    /// That window's label (its name or "HH:MM-HH:MM").
    pub window_label: Option<String>,
    /// The active override's label (its reason, or "start-end"), if any.
    pub override_label: Option<String>,
    /// Whether the local date is a holiday.
    pub holiday: bool,
    /// Mid-ramp (`replicas != level`): which way it is going.
    pub ramp: Option<RampPhase>,
    /// The HPA's ceiling the level's source sets (`maxReplica`, `defaultMaxReplica`); `None`:
    /// the HPA's own `maxReplicas`.
    pub ceiling: Option<i32>,
    /// The rise `replicas` is written ahead of (`warmUp`, see `lead.rs`): then `replicas` is
    /// that transition's count, not yet the schedule's.
    pub ahead_of: Option<Transition>,
    /// Woken by a request until this instant (`spec.wakeOnRequest`): the schedule had the
    /// workloads asleep, and `level` is the count the request wakes them to.
    pub woken_until: Option<DateTime<Utc>>,
    /// Asleep by idleness (`spec.idle`): no traffic since this instant.
    pub idle_since: Option<DateTime<Utc>>,
    /// The count the schedule sets at this instant, `R(t)`: `replicas` before a rise written
    /// ahead replaced it (`ahead_of`). What follows the schedule rather than the lead reads
    /// it (a group's CronJobs: their suspend is no capacity to warm up).
    pub scheduled: i32,
}

impl Evaluation {
    /// The count the operator sets, or `own`.
    pub fn count(&self) -> Count {
        Count::of(self.replicas)
    }

    /// The count the schedule sets now, or `own`, whatever a lead writes ahead.
    pub fn scheduled_count(&self) -> Count {
        Count::of(self.scheduled)
    }

    /// Why the count is what it is, in a few words (for Events and preview).
    pub fn why(&self) -> String {
        let default = if self.level == OWN {
            "each workload runs its own count"
        } else {
            "defaultReplica applies"
        };
        let level = match (&self.override_label, &self.window_label) {
            _ if self.idle_since.is_some() => format!(
                "idle: no traffic since {}",
                self.idle_since
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default()
            ),
            _ if self.woken_until.is_some() => format!(
                "woken by a request until {}",
                self.woken_until
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default()
            ),
            (Some(o), _) => format!("override {o} is active"),
            (None, Some(w)) => format!("window {w} is active"),
            (None, None) if self.holiday => format!("a holiday, no window starts: {default}"),
            (None, None) => format!("no window is active, {default}"),
        };
        let why = match self.ramp {
            Some(RampPhase::Up { toward }) => {
                format!(
                    "ramping up toward {toward} (now: {level}, {} replicas)",
                    self.level
                )
            }
            Some(RampPhase::Down) => format!("ramping down toward {} ({level})", self.level),
            None => level,
        };
        match self.ahead_of {
            Some(t) => format!(
                "{why}; {} from {} is written ahead, to be ready by then (warmUp)",
                t.count(),
                t.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            None => why,
        }
    }
}

/// A change of the replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub at: DateTime<Utc>,
    /// [`OWN`] only in the group form (read it through `count`).
    pub replicas: i32,
    /// The HPA's ceiling from then on (see `Evaluation::ceiling`). A transition may change the
    /// ceiling alone.
    pub ceiling: Option<i32>,
}

impl Transition {
    pub fn count(&self) -> Count {
        Count::of(self.replicas)
    }
}

pub use crate::error::SpecError;

/// Something worth telling the user that does not stop the schedule from working.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// Two windows are active at the same local time; the earlier in the list wins there.
    Overlap {
        first: usize,
        first_label: String,
        second: usize,
        second_label: String,
        example: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Overlap {
                first,
                first_label,
                second,
                second_label,
                example,
            } => write!(
                f,
                "windows schedulingConfig[{first}] ({first_label}) and schedulingConfig[{second}] ({second_label}) overlap \
                 (e.g. {example}); schedulingConfig[{first}] wins there"
            ),
        }
    }
}

/// The level at an instant and where it comes from.
#[derive(Clone, Copy, Debug)]
struct Level {
    replicas: i32,
    ceiling: Option<i32>,
    window: Option<usize>,
    override_: Option<usize>,
    holiday: bool,
    /// Woken by a request: the wake-up's end.
    woken_until: Option<DateTime<Utc>>,
    /// Asleep by idleness: quiet since then.
    idle_since: Option<DateTime<Utc>>,
}

impl Schedule {
    /// Compiles a spec, checking everything the schema checks plus what it cannot (the zone,
    /// real dates, the length of a ramp). Every problem is returned, not just the first.
    pub fn compile(spec: &TDSetSpec) -> Result<Schedule, Vec<SpecError>> {
        Schedule::compile_with(spec, &[])
    }

    /// As `compile`, with the holidays of the calendars the spec names (those found).
    pub fn compile_with(
        spec: &TDSetSpec,
        calendars: &[SharedHolidays<'_>],
    ) -> Result<Schedule, Vec<SpecError>> {
        let mut errors = validate(spec);
        let tz = match spec.time_zone_name().parse::<Tz>() {
            Ok(tz) => Some(tz),
            Err(_) => {
                errors.push(SpecError {
                    field: "spec.timeZone".into(),
                    message: format!(
                        "unknown time zone {:?}; use an IANA name such as \"Europe/Berlin\" or \"America/New_York\"",
                        spec.time_zone_name()
                    ),
                });
                None
            }
        };
        let holidays = Holidays::compile(spec, calendars, &mut errors);
        let overrides = calendar::compile_overrides(spec, &mut errors);
        let ramp = match spec.ramp.as_ref().map(CompiledRamp::compile) {
            Some(Ok(r)) => Some(r),
            Some(Err(message)) => {
                errors.push(SpecError {
                    field: "spec.ramp".into(),
                    message,
                });
                None
            }
            None => None,
        };
        let levels = spec
            .scheduling_config
            .iter()
            .map(|w| w.replica)
            .chain(spec.overrides.iter().map(|o| o.replica.unwrap_or(OWN)))
            .chain([spec.default_replica.unwrap_or(OWN)]);
        let (min, max) = levels.fold((i32::MAX, i32::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
        let reach = ramp.map_or(Duration::zero(), |r| r.reach(min, max));
        if reach > MAX_RAMP {
            errors.push(SpecError {
                field: "spec.ramp".into(),
                message: format!(
                    "from {min} to {max} replicas this ramp takes {} h, longer than the 7 days allowed; raise step or shorten every",
                    reach.num_hours()
                ),
            });
        }
        let Some(tz) = tz.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        let windows: Vec<CompiledWindow> = spec
            .scheduling_config
            .iter()
            .map(|w| CompiledWindow {
                start: w.start_time.minute_of_day(),
                end: w.end_time.minute_of_day(),
                replicas: w.replica,
                ceiling: w.max_replica,
                days: CompiledWindow::days_of(w.days.as_deref()),
                label: w.label(),
            })
            .collect();
        let mut boundaries: Vec<u16> = windows
            .iter()
            .flat_map(|w| [w.start, w.end])
            .chain([0])
            .collect();
        boundaries.sort_unstable();
        boundaries.dedup();
        let last_holiday = holidays.last().and_then(|d| {
            let next_day = d.succ_opt()?.and_time(NaiveTime::MIN);
            tz.from_local_datetime(&next_day)
                .latest()
                .map(|t| t.with_timezone(&Utc))
        });
        let lookahead_until = overrides
            .iter()
            .map(|o| o.end)
            .chain(last_holiday)
            .max()
            .map(|t| t + Duration::days(1) + reach);
        Ok(Schedule {
            tz,
            windows,
            default_replicas: spec.default_replica.unwrap_or(OWN),
            default_ceiling: spec.default_max_replica,
            boundaries,
            holidays,
            overrides,
            ramp,
            reach,
            lookahead_until,
            woken: None,
            idle: None,
        })
    }

    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The count, the level and where they come from at `at`.
    pub fn evaluate(&self, at: DateTime<Utc>) -> Evaluation {
        let level = self.level_at(at);
        let (replicas, phase) = match &self.ramp {
            Some(ramp) => ramp.count_and_phase(
                at,
                level.replicas,
                &self.level_changes(at - self.reach, at + self.reach),
            ),
            None => (level.replicas, None),
        };
        Evaluation {
            replicas,
            level: level.replicas,
            window: level.window,
            window_label: level.window.map(|i| self.windows[i].label.clone()),
            override_label: level.override_.map(|i| self.overrides[i].label.clone()),
            holiday: level.holiday,
            ramp: phase,
            ceiling: level.ceiling,
            ahead_of: None,
            woken_until: level.woken_until,
            idle_since: level.idle_since,
            scheduled: replicas,
        }
    }

    fn level_at(&self, at: DateTime<Utc>) -> Level {
        let level = self.unidled_level_at(at);
        match &self.idle {
            Some(idle) => self.idled(idle, level, at, self.last_rise(idle.since, at)),
            None => level,
        }
    }

    /// The level with a request wake-up, before idleness.
    fn unidled_level_at(&self, at: DateTime<Utc>) -> Level {
        let level = self.scheduled_level_at(at);
        match &self.woken {
            Some(w) if w.covers(at) && level.override_.is_none() && level.replicas == 0 => Level {
                replicas: w.replicas,
                window: None,
                woken_until: Some(w.end),
                ..level
            },
            _ => level,
        }
    }

    /// The level the spec alone gives at `at` (no request wake-up).
    fn scheduled_level_at(&self, at: DateTime<Utc>) -> Level {
        let local = at.with_timezone(&self.tz).naive_local();
        let holiday = self.holidays.contains(local.date());
        let window = self.active_at_local(local);
        let ceiling = window.map_or(self.default_ceiling, |i| self.windows[i].ceiling);
        if let Some(i) = self
            .overrides
            .iter()
            .position(|o| o.start <= at && at < o.end)
        {
            return Level {
                replicas: self.overrides[i].replicas,
                // An override without a ceiling (a boost from the plugin) keeps the one in
                // force; the HPA plan raises it to the override's floor where it is lower.
                ceiling: self.overrides[i].ceiling.or(ceiling),
                window: None,
                override_: Some(i),
                holiday,
                woken_until: None,
                idle_since: None,
            };
        }
        Level {
            replicas: window.map_or(self.default_replicas, |i| self.windows[i].replicas),
            ceiling,
            window,
            override_: None,
            holiday,
            woken_until: None,
            idle_since: None,
        }
    }

    /// Whether window `w` starts on `date` (its `days`, with holidays deciding on holidays).
    fn starts_on(&self, w: &CompiledWindow, date: NaiveDate) -> bool {
        let bit = if self.holidays.contains(date) {
            HOL
        } else {
            1 << date.weekday().num_days_from_monday()
        };
        w.days & bit != 0
    }

    /// First window in list order that is active at this local wall-clock time.
    fn active_at_local(&self, local: NaiveDateTime) -> Option<usize> {
        self.active_in(&self.windows, local)
    }

    /// First of `windows` in list order that is active at this local wall-clock time.
    fn active_in(&self, windows: &[CompiledWindow], local: NaiveDateTime) -> Option<usize> {
        let minute = (local.hour() * 60 + local.minute()) as u16;
        let today = local.date();
        let yesterday = today.pred_opt().unwrap_or(NaiveDate::MIN);
        windows.iter().position(|w| {
            if w.start < w.end {
                w.start <= minute && minute < w.end && self.starts_on(w, today)
            } else {
                // Wraps midnight: the evening part belongs to today's start, the morning part
                // to yesterday's, because `days` names the day a window starts on.
                (minute >= w.start && self.starts_on(w, today))
                    || (minute < w.end && self.starts_on(w, yesterday))
            }
        })
    }

    /// Whether the level (and the ceiling) can never change.
    fn level_is_constant(&self) -> bool {
        self.idle.is_none() && self.spec_level_is_constant()
    }

    /// Whether the level before idleness can never change.
    fn spec_level_is_constant(&self) -> bool {
        self.woken.is_none()
            && self
                .windows
                .iter()
                .map(|w| (w.replicas, w.ceiling))
                .chain(self.overrides.iter().map(|o| (o.replicas, o.ceiling)))
                .all(|r| r == (self.default_replicas, self.default_ceiling))
    }

    /// The earliest instant strictly after `now` at which the count changes, and the count
    /// from then on; `None` when it never changes. Every ramp step is a change.
    pub fn next_transition(&self, now: DateTime<Utc>) -> Option<Transition> {
        match &self.ramp {
            None => self.next_level_change(now).map(|c| Transition {
                at: c.at,
                replicas: c.after,
                ceiling: c.ceiling,
            }),
            Some(ramp) => RampWalk::new(self, ramp, now).next(),
        }
    }

    /// Every change of the level in `(from, to]`.
    fn level_changes(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<LevelChange> {
        let mut out = Vec::new();
        let mut t = from;
        while let Some(c) = self.next_level_change(t) {
            if c.at > to {
                break;
            }
            out.push(c);
            t = c.at;
        }
        out
    }

    /// The next change of the level `L` after `now`.
    ///
    /// Walks forward through the only instants where the level can change: local times that
    /// hit a window boundary (midnight included, for days and holidays), instants where the
    /// zone's UTC offset changes (DST), which can jump local time over a boundary or back
    /// before one, and the starts and ends of overrides.
    fn next_level_change(&self, now: DateTime<Utc>) -> Option<LevelChange> {
        self.next_change(now, self.idle.as_ref(), None)
    }

    /// The next change after `now` of the level before idleness, up to `until` at most.
    fn next_change_unidled(&self, now: DateTime<Utc>, until: DateTime<Utc>) -> Option<LevelChange> {
        self.next_change(now, None, Some(until))
    }

    /// The next change of the level after `now`, with `idle` (then its own edges are walked
    /// too: the instant a quiet has lasted `after`), up to `until` when given. The schedule's
    /// last rise is carried along the walk rather than looked for at each instant.
    fn next_change(
        &self,
        now: DateTime<Utc>,
        idle: Option<&idle::Idled>,
        until: Option<DateTime<Utc>>,
    ) -> Option<LevelChange> {
        if self.spec_level_is_constant() && idle.is_none() {
            return None;
        }
        let mut rise = idle.map(|i| self.last_rise(i.since, now));
        let level_of =
            |unidled: Level, t: DateTime<Utc>, rise: Option<DateTime<Utc>>| match (idle, rise) {
                (Some(i), Some(r)) => self.idled(i, unidled, t, r),
                _ => unidled,
            };
        let mut before = self.unidled_level_at(now);
        let now_level = level_of(before, now, rise);
        let current = now_level.replicas;
        let limit = match self.lookahead_until {
            Some(until) => (now + HORIZON).max(until.min(now + MAX_LOOKAHEAD)),
            None => now + HORIZON,
        };
        let limit = until.map_or(limit, |u| limit.min(u));
        let mut t = now;
        while t < limit {
            let local = t.with_timezone(&self.tz).naive_local();
            // Same offset assumed until the next offset change, which is checked below.
            let boundary_instant = t + (self.next_boundary_after(local) - local);
            let mut next = match self.offset_change_in(t, boundary_instant) {
                Some(change) => change,
                None => boundary_instant,
            };
            let idle_edge = (idle.zip(rise))
                .filter(|(i, r)| i.began(*r))
                .map(|(i, r)| i.sleep_from(r));
            if let Some(edge) = self
                .overrides
                .iter()
                .flat_map(|o| [o.start, o.end])
                .chain(self.woken.iter().flat_map(|w| [w.start, w.end]))
                .chain(idle_edge)
                .filter(|&e| e > t)
                .min()
            {
                next = next.min(edge);
            }
            t = next;
            if until.is_some_and(|u| t > u) {
                return None;
            }
            let unidled = self.unidled_level_at(t);
            if idle::rises(before.replicas, unidled.replicas) {
                rise = rise.map(|r| r.max(t));
            }
            before = unidled;
            let level = level_of(unidled, t, rise);
            // A ceiling changes what the HPA form writes, as a count does.
            if level.replicas != current || level.ceiling != now_level.ceiling {
                return Some(LevelChange {
                    at: t,
                    before: current,
                    after: level.replicas,
                    ceiling: level.ceiling,
                });
            }
        }
        None
    }
    /// The first boundary local time strictly after `local` (today's, or tomorrow's first).
    fn next_boundary_after(&self, local: NaiveDateTime) -> NaiveDateTime {
        let date = local.date();
        for &m in &self.boundaries {
            let candidate = date.and_time(minute_to_time(m));
            if candidate > local {
                return candidate;
            }
        }
        let tomorrow = date.succ_opt().unwrap_or(NaiveDate::MAX);
        tomorrow.and_time(minute_to_time(self.boundaries[0]))
    }

    /// The first whole second in `(from, to]` at which the UTC offset differs from the one at
    /// `from`. Probes hourly so two changes close together are not mistaken for none, then
    /// bisects to the second.
    fn offset_change_in(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let offset_at = |t: DateTime<Utc>| self.tz.offset_from_utc_datetime(&t.naive_utc()).fix();
        let base = offset_at(from);
        let mut lo = from;
        while lo < to {
            let hi = (lo + Duration::hours(1)).min(to);
            if offset_at(hi) != base {
                // Invariant: offset(lo) == base, offset(hi) != base; narrow to whole seconds.
                let mut lo_s = lo.timestamp();
                let mut hi_s = hi.timestamp();
                if hi.timestamp_subsec_nanos() != 0 {
                    hi_s += 1; // offsets change on whole seconds; hi's second start may still be base
                }
                while hi_s - lo_s > 1 {
                    let mid = lo_s + (hi_s - lo_s) / 2;
                    let mid_t = DateTime::from_timestamp(mid, 0)?;
                    if offset_at(mid_t) == base {
                        lo_s = mid;
                    } else {
                        hi_s = mid;
                    }
                }
                let change = DateTime::from_timestamp(hi_s, 0)?;
                return (change > from).then_some(change);
            }
            lo = hi;
        }
        None
    }

    /// Every change of the replica count in `(from, to]`, in order.
    pub fn transitions(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Transition> {
        let until = |t: &Transition| t.at <= to;
        match &self.ramp {
            // One walk: the level changes around each stretch are found once, not per step.
            Some(ramp) => RampWalk::new(self, ramp, from).take_while(until).collect(),
            None => {
                std::iter::successors(self.next_transition(from), |t| self.next_transition(t.at))
                    .take_while(until)
                    .collect()
            }
        }
    }

    /// Pairs of windows that are active at the same local time somewhere in the week, each
    /// with the first such minute of the week (Monday 00:00 first).
    pub fn warnings(&self) -> Vec<Warning> {
        const WEEK: u32 = 7 * 1440;
        // Each window as at most 8 intervals of minutes of the week (one per day it starts
        // on, the one that wraps Sunday night split in two).
        let spans: Vec<Vec<(u32, u32)>> = self
            .windows
            .iter()
            .map(|w| {
                let (start, end) = (u32::from(w.start), u32::from(w.end));
                let len = if start < end {
                    end - start
                } else {
                    1440 - start + end
                };
                let mut out = Vec::with_capacity(8);
                for d in (0..7u32).filter(|d| w.days & (1 << d) != 0) {
                    let (a, b) = (d * 1440 + start, d * 1440 + start + len);
                    if b > WEEK {
                        out.extend([(a, WEEK), (0, b - WEEK)]);
                    } else {
                        out.push((a, b));
                    }
                }
                out
            })
            .collect();
        let first_common = |x: &[(u32, u32)], y: &[(u32, u32)]| {
            x.iter()
                .flat_map(|&(a1, b1)| y.iter().map(move |&(a2, b2)| (a1.max(a2), b1.min(b2))))
                .filter(|(a, b)| a < b)
                .map(|(a, _)| a)
                .min()
        };
        let mut out = Vec::new();
        for i in 0..self.windows.len() {
            for j in i + 1..self.windows.len() {
                if let Some(m) = first_common(&spans[i], &spans[j]) {
                    out.push(Warning::Overlap {
                        first: i,
                        first_label: self.windows[i].label.clone(),
                        second: j,
                        second_label: self.windows[j].label.clone(),
                        example: format!(
                            "{} {:02}:{:02}",
                            Day::ALL[(m / 1440) as usize],
                            (m % 1440) / 60,
                            m % 60
                        ),
                    });
                }
            }
        }
        out
    }
}

/// The changes of a ramped count after an instant, in order. The time after `t` is taken in
/// stretches of at least a day (and at least the ramp's reach) that end one reach past a
/// change of level; the level changes that can matter in a stretch are listed once, and each
/// change of the count in it costs one pass over them (`CompiledRamp::first_change`).
struct RampWalk<'a> {
    schedule: &'a Schedule,
    ramp: &'a CompiledRamp,
    /// The last change found (or the start), and the count from then on.
    t: DateTime<Utc>,
    count: i32,
    /// The current stretch: where it ends, its level changes, and whether the level is
    /// constant after it.
    stretch: Option<(DateTime<Utc>, Vec<LevelChange>, bool)>,
    /// Past this the walk gives up, as `next_level_change` does.
    limit: DateTime<Utc>,
}

impl<'a> RampWalk<'a> {
    fn new(schedule: &'a Schedule, ramp: &'a CompiledRamp, from: DateTime<Utc>) -> Self {
        RampWalk {
            schedule,
            ramp,
            t: from,
            count: schedule.evaluate(from).replicas,
            stretch: None,
            limit: from + MAX_LOOKAHEAD + HORIZON,
        }
    }
}

impl Iterator for RampWalk<'_> {
    type Item = Transition;

    fn next(&mut self) -> Option<Transition> {
        let s = self.schedule;
        if s.level_is_constant() {
            return None;
        }
        loop {
            if self.stretch.is_none() {
                if self.t > self.limit {
                    return None;
                }
                let next_level = s.next_level_change(self.t);
                let span = s.reach.max(Duration::days(1));
                let end = next_level.map_or(self.t, |c| c.at.max(self.t)) + span;
                let changes = s.level_changes(self.t - s.reach, end + s.reach);
                self.stretch = Some((end, changes, next_level.is_none()));
            }
            let (end, changes, last) = self.stretch.as_ref()?;
            let level0 = s.level_at(self.t).replicas;
            match self
                .ramp
                .first_change(self.count, level0, changes, self.t, *end)
            {
                Some(at) => {
                    let replicas = self.ramp.count_at(at, s.level_at(at).replicas, changes);
                    (self.t, self.count) = (at, replicas);
                    // A ramp and a ceiling do not combine (refused at admission).
                    return Some(Transition {
                        at,
                        replicas,
                        ceiling: None,
                    });
                }
                // The level is constant after this stretch and every step has been taken.
                None if *last => return None,
                None => {
                    self.t = *end;
                    self.stretch = None;
                }
            }
        }
    }
}

fn minute_to_time(m: u16) -> NaiveTime {
    NaiveTime::from_hms_opt(u32::from(m / 60), u32::from(m % 60), 0).unwrap_or(NaiveTime::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerSpec, TimeOfDay, Window};

    fn spec(tz: &str, windows: Vec<Window>, default: i32) -> TDSetSpec {
        TDSetSpec {
            container: Some(ContainerSpec {
                image: "nginx".into(),
                port: 80,
            }),
            template: None,
            scale_target_ref: None,
            on_delete: None,
            service: None,
            scheduling_config: windows,
            default_replica: Some(default),
            interval_mint: None,
            time_zone: Some(tz.into()),
            ..TDSetSpec::default()
        }
    }

    fn w(start: &str, end: &str, replica: i32) -> Window {
        Window {
            name: None,
            start_time: TimeOfDay::parse_hhmm(start).unwrap(),
            end_time: TimeOfDay::parse_hhmm(end).unwrap(),
            replica,
            max_replica: None,
            days: None,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// `windows` over HPA web (UTC), `default` under the default ceiling `default_max`.
    fn hpa_spec(windows: Vec<Window>, default: i32, default_max: i32) -> TDSetSpec {
        let mut s = spec("UTC", windows, default);
        s.container = None;
        s.scale_target_ref = Some(crate::api::ScaleTargetRef {
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            name: "web".into(),
        });
        s.default_max_replica = Some(default_max);
        s
    }

    #[test]
    fn a_ceiling_follows_its_source_and_a_change_of_ceiling_alone_is_a_transition() {
        // By day floor 10 under a ceiling of 50, in the evening floor 10 under 20, at night
        // floor 2 under the default ceiling 5.
        let mut day = w("08:00", "18:00", 10);
        day.max_replica = Some(50);
        let mut evening = w("18:00", "22:00", 10);
        evening.max_replica = Some(20);
        let s = hpa_spec(vec![day, evening], 2, 5);
        let schedule = Schedule::compile(&s).unwrap();
        assert_eq!(
            schedule.evaluate(at("2026-05-01T12:00:00Z")).ceiling,
            Some(50)
        );
        assert_eq!(
            schedule.evaluate(at("2026-05-01T03:00:00Z")).ceiling,
            Some(5)
        );
        let got: Vec<(DateTime<Utc>, i32, Option<i32>)> = schedule
            .transitions(at("2026-05-01T07:00:00Z"), at("2026-05-01T23:00:00Z"))
            .into_iter()
            .map(|t| (t.at, t.replicas, t.ceiling))
            .collect();
        assert_eq!(
            got,
            [
                (at("2026-05-01T08:00:00Z"), 10, Some(50)),
                // The count stays 10; only the ceiling changes, and the HPA is written for it.
                (at("2026-05-01T18:00:00Z"), 10, Some(20)),
                (at("2026-05-01T22:00:00Z"), 2, Some(5)),
            ]
        );
        // Without ceilings nothing changes: no transition where the count stays.
        let plain = Schedule::compile(&spec(
            "UTC",
            vec![w("08:00", "18:00", 10), w("18:00", "22:00", 10)],
            2,
        ))
        .unwrap();
        assert_eq!(
            plain
                .transitions(at("2026-05-01T07:00:00Z"), at("2026-05-01T23:00:00Z"))
                .len(),
            2
        );
    }

    #[test]
    fn an_override_without_a_ceiling_keeps_the_one_in_force() {
        // Night floor 2 under the default ceiling 5; a boost to 8 from 01:00 to 03:00 names
        // no ceiling (the plugin's never do): 5 stays in force (the HPA plan raises it to the
        // boost's floor), rather than the HPA's own for the length of the boost.
        let mut s = hpa_spec(vec![w("08:00", "18:00", 10)], 2, 5);
        let boost = |max: Option<i32>| crate::api::Override {
            start: "2026-05-01T01:00:00Z".into(),
            end: "2026-05-01T03:00:00Z".into(),
            replica: Some(8),
            max_replica: max,
            reason: None,
        };
        s.overrides = vec![boost(None)];
        let schedule = Schedule::compile(&s).unwrap();
        let e = schedule.evaluate(at("2026-05-01T02:00:00Z"));
        assert_eq!((e.replicas, e.ceiling), (8, Some(5)));
        // One that names a ceiling sets it.
        s.overrides = vec![boost(Some(40))];
        let schedule = Schedule::compile(&s).unwrap();
        assert_eq!(
            schedule.evaluate(at("2026-05-01T02:00:00Z")).ceiling,
            Some(40)
        );
    }

    #[test]
    fn a_shared_calendars_date_is_read_in_each_tdsets_own_zone() {
        // Weekdays 09:00-17:00 at 5; the calendar makes 2026-12-24 (a Thursday) a holiday.
        let weekdays = |tz: &str| {
            let mut window = w("09:00", "17:00", 5);
            window.days = Some(vec![Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri]);
            spec(tz, vec![window], 1)
        };
        let dates = [crate::api::Holiday("2026-12-24".into())];
        let shared = [SharedHolidays {
            calendar: "company",
            holidays: &dates,
        }];
        let berlin = Schedule::compile_with(&weekdays("Europe/Berlin"), &shared).unwrap();
        let tokyo = Schedule::compile_with(&weekdays("Asia/Tokyo"), &shared).unwrap();
        let plain = Schedule::compile(&weekdays("Europe/Berlin")).unwrap();
        // 10:00 local on the 24th in each zone: no window; the day after, the window.
        assert_eq!(berlin.evaluate(at("2026-12-24T09:00:00Z")).replicas, 1);
        assert_eq!(tokyo.evaluate(at("2026-12-24T01:00:00Z")).replicas, 1);
        assert_eq!(plain.evaluate(at("2026-12-24T09:00:00Z")).replicas, 5);
        assert_eq!(berlin.evaluate(at("2026-12-25T09:00:00Z")).replicas, 5);
        // 10:00 in Berlin on the 24th is already the 24th's evening in Tokyo, past its window;
        // 10:00 in Tokyo on the 25th is the 25th, not a holiday there.
        assert_eq!(tokyo.evaluate(at("2026-12-25T01:00:00Z")).replicas, 5);
    }

    #[test]
    fn spring_forward_boundary_in_gap_takes_effect_when_gap_ends() {
        // New York 2026-03-08 02:00 EST -> 03:00 EDT; 02:30 does not exist.
        let s =
            Schedule::compile(&spec("America/New_York", vec![w("02:30", "05:00", 7)], 1)).unwrap();
        assert_eq!(s.evaluate(at("2026-03-08T06:59:59Z")).replicas, 1);
        assert_eq!(s.evaluate(at("2026-03-08T07:00:00Z")).replicas, 7);
        let next = s.next_transition(at("2026-03-08T05:00:00Z")).unwrap();
        assert_eq!(
            next,
            Transition {
                at: at("2026-03-08T07:00:00Z"),
                replicas: 7,
                ceiling: None
            }
        );
    }

    #[test]
    fn fall_back_repeated_hour_is_active_twice() {
        // Berlin 2026-10-25 repeats 02:00-03:00 local (00:00Z-01:00Z CEST, 01:00Z-02:00Z CET).
        let s = Schedule::compile(&spec("Europe/Berlin", vec![w("02:00", "02:30", 4)], 1)).unwrap();
        let got = s.transitions(at("2026-10-24T23:00:00Z"), at("2026-10-25T03:00:00Z"));
        let want = [
            ("2026-10-25T00:00:00Z", 4),
            ("2026-10-25T00:30:00Z", 1),
            ("2026-10-25T01:00:00Z", 4),
            ("2026-10-25T01:30:00Z", 1),
        ];
        assert_eq!(
            got,
            want.map(|(t, r)| Transition {
                at: at(t),
                replicas: r,
                ceiling: None
            })
            .to_vec()
        );
    }

    #[test]
    fn seed_manifest_hours() {
        let windows = vec![
            w("09:00", "17:00", 5),
            w("17:00", "19:00", 3),
            w("19:00", "00:00", 2),
            w("01:00", "07:00", 2),
            w("07:00", "09:00", 3),
        ];
        let s = Schedule::compile(&spec("UTC", windows, 3)).unwrap();
        assert_eq!(s.evaluate(at("2026-05-01T12:00:00Z")).replicas, 5);
        assert_eq!(s.evaluate(at("2026-05-01T23:59:59Z")).replicas, 2);
        assert_eq!(s.evaluate(at("2026-05-02T00:30:00Z")).replicas, 3); // gap 00:00-01:00: default
        assert_eq!(s.evaluate(at("2026-05-02T00:30:00Z")).window, None);
        let next = s.next_transition(at("2026-05-01T18:59:59Z")).unwrap();
        assert_eq!(
            next,
            Transition {
                at: at("2026-05-01T19:00:00Z"),
                replicas: 2,
                ceiling: None
            }
        );
        // 19:00-00:00 (2) then 00:00-01:00 default (3).
        assert_eq!(
            s.next_transition(at("2026-05-01T19:00:00Z")).unwrap().at,
            at("2026-05-02T00:00:00Z")
        );
    }

    #[test]
    fn days_filter_by_start_day() {
        let mut win = w("22:00", "06:00", 9);
        win.days = Some(vec![Day::Fri]);
        let s = Schedule::compile(&spec("UTC", vec![win], 0)).unwrap();
        // 2026-11-20 is a Friday.
        assert_eq!(s.evaluate(at("2026-11-20T23:00:00Z")).replicas, 9);
        assert_eq!(s.evaluate(at("2026-11-21T05:59:00Z")).replicas, 9); // Saturday morning
        assert_eq!(s.evaluate(at("2026-11-21T23:00:00Z")).replicas, 0); // Saturday night
        assert_eq!(s.evaluate(at("2026-11-23T01:00:00Z")).replicas, 0); // Monday morning
        let next = s.next_transition(at("2026-11-21T06:00:00Z")).unwrap();
        assert_eq!(next.at, at("2026-11-27T22:00:00Z"));
    }

    #[test]
    fn never_changes() {
        let s = Schedule::compile(&spec("UTC", vec![], 2)).unwrap();
        assert_eq!(s.next_transition(at("2026-01-01T00:00:00Z")), None);
        let s = Schedule::compile(&spec(
            "UTC",
            vec![w("00:00", "12:00", 5), w("12:00", "00:00", 5)],
            3,
        ))
        .unwrap();
        assert_eq!(s.evaluate(at("2026-01-01T13:00:00Z")).replicas, 5);
        assert_eq!(s.next_transition(at("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn overlap_is_a_warning_and_first_wins() {
        let s = Schedule::compile(&spec(
            "UTC",
            vec![w("09:00", "17:00", 5), w("16:00", "18:00", 2)],
            1,
        ))
        .unwrap();
        assert_eq!(s.evaluate(at("2026-01-01T16:30:00Z")).replicas, 5);
        let warnings = s.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].to_string().contains("schedulingConfig[0]"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn unknown_zone_is_a_spec_error_naming_the_field() {
        let err = Schedule::compile(&spec("Mars/Olympus_Mons", vec![], 1)).unwrap_err();
        assert_eq!(err[0].field, "spec.timeZone");
    }
}
