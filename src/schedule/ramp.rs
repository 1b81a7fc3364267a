//! Ramps: the count `R(t)` from the level `L(t)` (see the contract):
//!
//! ```text
//! R(t) = max( L(t),
//!             sup over s < t of  L(s) - step * ceil((t - s) / every)   (Both, Down),
//!             sup over s > t of  L(s) - step * ceil((s - t) / every)   (Both, Up) )
//! ```
//!
//! `L` is piecewise constant, so each supremum is reached at a level change: for the level `v`
//! that ended at `b <= t`, at `s` just before `b`, `v - step * (floor((t - b) / every) + 1)`; for
//! the level `v` that starts at `a > t`, at `s = a`, `v - step * ceil((a - t) / every)`. Only
//! changes within `reach` of `t` can matter: further away, a contribution is below every level.

use chrono::{DateTime, Duration, Utc};

use crate::api::{Ramp, RampDirection};

#[derive(Clone, Copy, Debug)]
pub(super) struct CompiledRamp {
    pub step: i32,
    pub every: Duration,
    pub up: bool,
    pub down: bool,
}

/// Which way a ramp is moving the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RampPhase {
    /// Climbing ahead of a rise to `toward`.
    Up { toward: i32 },
    /// Stepping down after a fall, toward the level now.
    Down,
}

/// A change of the level: from `before` to `after` at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LevelChange {
    pub at: DateTime<Utc>,
    pub before: i32,
    pub after: i32,
    /// The ceiling from then on (never set with a ramp: admission refuses both).
    pub ceiling: Option<i32>,
}

impl CompiledRamp {
    pub(super) fn compile(r: &Ramp) -> Result<CompiledRamp, String> {
        let every = parse_duration(&r.every)
            .filter(|d| *d >= Duration::minutes(1) && *d <= Duration::hours(24))
            .ok_or_else(|| {
                format!(
                    "{:?} is not a duration from 1m to 24h, e.g. \"15m\" or \"1h30m\"",
                    r.every
                )
            })?;
        if r.step < 1 {
            return Err(format!("step {} must be at least 1", r.step));
        }
        let direction = r.direction.unwrap_or_default();
        Ok(CompiledRamp {
            step: r.step,
            every,
            up: matches!(direction, RampDirection::Both | RampDirection::Up),
            down: matches!(direction, RampDirection::Both | RampDirection::Down),
        })
    }

    /// The steps from the lowest to the highest level, as time: beyond it a level change has
    /// no effect on the count.
    pub(super) fn reach(&self, min_level: i32, max_level: i32) -> Duration {
        let spread = (max_level - min_level).max(0);
        let steps = (spread + self.step - 1) / self.step;
        self.every * steps
    }

    /// `R(t)` given `L(t)` and every level change within `reach` of `t` (in any order).
    pub(super) fn count_at(&self, t: DateTime<Utc>, level: i32, changes: &[LevelChange]) -> i32 {
        self.count_and_phase(t, level, changes).0
    }

    /// `R(t)`, and when it is above `L(t)`, which way the ramp is going: up toward a level
    /// still to come, or down from one that has passed.
    pub(super) fn count_and_phase(
        &self,
        t: DateTime<Utc>,
        level: i32,
        changes: &[LevelChange],
    ) -> (i32, Option<RampPhase>) {
        let every = self.every.num_milliseconds().max(1);
        let (mut r, mut phase) = (level, None);
        for c in changes {
            if self.down && c.at <= t {
                let k = (t - c.at).num_milliseconds() / every + 1;
                let v = c.before.saturating_sub(self.step.saturating_mul(clamp(k)));
                if v > r {
                    (r, phase) = (v, Some(RampPhase::Down));
                }
            }
            if self.up && c.at > t {
                let k = ((c.at - t).num_milliseconds() + every - 1) / every;
                let v = c.after.saturating_sub(self.step.saturating_mul(clamp(k)));
                if v > r {
                    (r, phase) = (v, Some(RampPhase::Up { toward: c.after }));
                }
            }
        }
        (r.max(0), phase)
    }

    /// The first instant in `(from, to]` at which the count differs from `r0`, the count at
    /// `from`; `level0` is the level at `from` and `changes` every level change in
    /// `(from - reach, to + reach]`, in order.
    ///
    /// The count is the largest of a few terms: the level, one falling term per change that
    /// has happened (Down) and one rising term per change to come (Up). Each term is at
    /// least `r0` on one interval that follows from its formula, so the count rises at the
    /// first instant a term exceeds `r0` and falls at the first instant no term reaches it.
    /// Linear in `changes` (plus a sort) whatever the step: the steps are never enumerated.
    pub(super) fn first_change(
        &self,
        r0: i32,
        level0: i32,
        changes: &[LevelChange],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let ahead = |c: &&LevelChange| c.at > from;
        // Rise: the level itself, or a rising term (it exceeds `r0` once at most `k` steps
        // remain, `k = ceil((after - r0) / step) - 1`).
        let mut rise: Option<DateTime<Utc>> = None;
        for c in changes.iter().filter(ahead).filter(|c| c.after > r0) {
            let k = if self.up {
                (c.after - r0 - 1) / self.step
            } else {
                0
            };
            let at = c.at - self.every * k;
            if at > from && at <= to && rise.is_none_or(|r| at < r) {
                rise = Some(at);
            }
        }
        // Fall: the end of the run of intervals, from `from` on, on which some term is at
        // least `r0`.
        let mut spans: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
        let (mut start, mut level) = (from, level0);
        for c in changes.iter().filter(ahead) {
            if c.at > to {
                break;
            }
            if level >= r0 {
                spans.push((start, c.at));
            }
            (start, level) = (c.at, c.after);
        }
        if level >= r0 {
            spans.push((start, DateTime::<Utc>::MAX_UTC));
        }
        for c in changes {
            if self.down && c.at <= to {
                // At least `r0` for the first `k` steps after the change.
                let k = (c.before - r0).div_euclid(self.step);
                if k >= 1 {
                    spans.push((c.at, c.at + self.every * k));
                }
            }
            if self.up && c.at > from {
                // At least `r0` from `k` steps before the change.
                let k = (c.after - r0).div_euclid(self.step);
                if k >= 1 {
                    spans.push((c.at - self.every * k, c.at));
                }
            }
        }
        spans.sort_unstable_by_key(|s| s.0);
        let mut covered = from;
        for (s, e) in spans {
            if s > covered {
                break;
            }
            covered = covered.max(e);
        }
        // `from` itself is covered: some term is `r0` there.
        debug_assert!(covered > from, "the count at {from} is not {r0}");
        let fall = (covered > from && covered <= to).then_some(covered);
        match (rise, fall) {
            (Some(r), Some(f)) => Some(r.min(f)),
            (r, f) => r.or(f),
        }
    }
}

fn clamp(k: i64) -> i32 {
    i32::try_from(k).unwrap_or(i32::MAX)
}

/// A duration of the warm-up or of a tier's timeout (`parse_duration`), from 1s to 1h.
pub fn parse_short_duration(s: &str) -> Option<Duration> {
    parse_duration(s).filter(|d| *d >= Duration::seconds(1) && *d <= Duration::hours(1))
}

/// A Go-style duration of hours, minutes and seconds: "90s", "15m", "1h30m".
pub fn parse_duration(s: &str) -> Option<Duration> {
    if s.is_empty() {
        return None;
    }
    let mut total = Duration::zero();
    let mut number = String::new();
    let mut last_unit = 0u8;
    for c in s.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let (unit, rank) = match c {
            'h' => (Duration::hours(1), 1),
            'm' => (Duration::minutes(1), 2),
            's' => (Duration::seconds(1), 3),
            _ => return None,
        };
        // Units appear once each, in the order h, m, s.
        if number.is_empty() || rank <= last_unit {
            return None;
        }
        total += unit * number.parse::<i32>().ok()?;
        number.clear();
        last_unit = rank;
    }
    number.is_empty().then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m"), Some(Duration::minutes(15)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::minutes(90)));
        assert_eq!(parse_duration("90s"), Some(Duration::seconds(90)));
        for bad in ["", "15", "m", "1m1h", "1x", "1h1h"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_contract_example() {
        // step 2 every 15m, Both; L = 2, then 10 from 09:00 to 17:00, then 2.
        let ramp = CompiledRamp::compile(&Ramp {
            step: 2,
            every: "15m".into(),
            direction: None,
        })
        .unwrap();
        let changes = [
            LevelChange {
                at: t("2026-05-01T09:00:00Z"),
                before: 2,
                after: 10,
                ceiling: None,
            },
            LevelChange {
                at: t("2026-05-01T17:00:00Z"),
                before: 10,
                after: 2,
                ceiling: None,
            },
        ];
        let level = |s: &str| {
            if (t("2026-05-01T09:00:00Z")..t("2026-05-01T17:00:00Z")).contains(&t(s)) {
                10
            } else {
                2
            }
        };
        let at = |s: &str| ramp.count_at(t(s), level(s), &changes);
        for (s, want) in [
            ("2026-05-01T08:14:59Z", 2),
            ("2026-05-01T08:15:00Z", 4),
            ("2026-05-01T08:30:00Z", 6),
            ("2026-05-01T08:45:00Z", 8),
            ("2026-05-01T08:59:59Z", 8),
            ("2026-05-01T09:00:00Z", 10),
            ("2026-05-01T16:59:59Z", 10),
            ("2026-05-01T17:00:00Z", 8),
            ("2026-05-01T17:15:00Z", 6),
            ("2026-05-01T17:30:00Z", 4),
            ("2026-05-01T17:44:59Z", 4),
            ("2026-05-01T17:45:00Z", 2),
        ] {
            assert_eq!(at(s), want, "{s}");
        }
        assert_eq!(ramp.reach(2, 10), Duration::hours(1));
    }
}
