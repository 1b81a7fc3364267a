//! Scale-ups written ahead of their transition (`spec.warmUp`), so that the higher count is
//! serving at the transition instead of starting then.
//!
//! Pure: a schedule, an instant and a lead in; what to write, and when, out. The schedule
//! itself is untouched: a lead never changes what it says at any instant, only when a rise is
//! written. A transition at T that raises the count is written at T - lead, but never before
//! the transition before it (a dip between two windows is shortened, never skipped over
//! backwards); a transition that lowers the count is written at T exactly.

use chrono::{DateTime, Duration, Utc};

use super::{Count, Schedule, Transition};
use crate::api::{DEFAULT_WARM_UP_MAX, TDSetSpec, WarmUpMode};

/// The longest lead there is (`warmUp.max` is at most this): it bounds the look-back of
/// `led_transitions`.
pub const MAX_LEAD: Duration = Duration::hours(1);

/// How far ahead a scale-up is written (`spec.warmUp`): `lead` for Fixed; for Measured, what
/// the measured `samples` (seconds, `status.warmUp.samples`) give, and `lead` until there are
/// some; at most `max` (default 10m); zero when Off.
pub fn lead_of(spec: &TDSetSpec, samples: &[i32]) -> Duration {
    let Some(w) = spec
        .warm_up
        .as_ref()
        .filter(|w| w.mode() != WarmUpMode::Off)
    else {
        return Duration::zero();
    };
    let parse = |d: &Option<String>| d.as_deref().and_then(super::parse_duration);
    let max = parse(&w.max).unwrap_or(DEFAULT_WARM_UP_MAX);
    let measured = (w.mode() == WarmUpMode::Measured)
        .then(|| from_samples(samples))
        .flatten();
    measured
        .or_else(|| parse(&w.lead))
        .unwrap_or_default()
        .min(max)
}

/// The least margin a measured lead adds to its percentile.
pub const MIN_MARGIN: Duration = Duration::seconds(5);

/// The lead measured times to Ready give: their 90th percentile (nearest rank: of 10 samples
/// the second longest, so one outlier is passed over; of fewer, the longest), plus a margin
/// of a tenth of it and at least `MIN_MARGIN`, for what the samples have not seen yet.
/// None without samples.
pub fn from_samples(samples: &[i32]) -> Option<Duration> {
    let mut sorted: Vec<i64> = samples.iter().map(|s| i64::from((*s).max(0))).collect();
    sorted.sort_unstable();
    let rank = (sorted.len() * 9).div_ceil(10);
    let p90 = Duration::seconds(*sorted.get(rank.checked_sub(1)?)?);
    Some(p90 + (p90 / 10).max(MIN_MARGIN))
}

/// Whether a change from `from` to `to` raises the count, for certain. A change to `own` is
/// a rise only from 0 (a group waking: every own count is at least 0); a change from `own`
/// to a number is not known to be one, and is not led (a scale-down is never early; a
/// scale-up not led is only late).
pub fn rises(from: Count, to: Count) -> bool {
    match (from, to) {
        (Count::Replicas(a), Count::Replicas(b)) => b > a,
        (Count::Replicas(0), Count::Own) => true,
        _ => false,
    }
}

/// What the operator writes at an instant, with rises led.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Led {
    /// The count to write now.
    pub count: Count,
    /// The transition this count is written ahead of, while one is.
    pub ahead_of: Option<Transition>,
}

/// A transition, and when its write starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedTransition {
    pub transition: Transition,
    /// The count before it.
    pub from: Count,
    /// When it is written: `transition.at` for anything but a rise.
    pub write_at: DateTime<Utc>,
}

impl LedTransition {
    /// How far ahead of its transition it is written.
    pub fn lead(&self) -> Duration {
        self.transition.at - self.write_at
    }
}

impl Schedule {
    /// What to write at `now` when rises lead by `lead` (at most `MAX_LEAD`): the count the
    /// schedule says, or, once the next transition is a rise whose write has started, that
    /// transition's count. Only the next transition can be led to: the one after it is not
    /// written before the next one's instant.
    pub fn led(&self, now: DateTime<Utc>, lead: Duration) -> Led {
        let count = self.evaluate(now).count();
        let lead = clamp(lead);
        let ahead_of = (lead > Duration::zero())
            .then(|| self.next_count_change(now, count, now + lead))
            .flatten()
            .filter(|t| t.at - lead <= now && rises(count, t.count()));
        Led {
            count: ahead_of.map_or(count, |t| t.count()),
            ahead_of,
        }
    }

    /// `evaluate_led`, `next_transition` and `next_led_write` at once, each part computed
    /// once (the reconcile needs all three).
    pub fn led_at(
        &self,
        now: DateTime<Utc>,
        lead: Duration,
    ) -> (super::Evaluation, Option<Transition>, Option<DateTime<Utc>>) {
        let lead = clamp(lead);
        let mut eval = self.evaluate(now);
        let next = self.next_transition(now);
        let count = eval.count();
        let change = next.and_then(|n| self.count_change_from(n, count, n.at + lead));
        let next_write = next.map(|n| write_start(n, change, count, lead, now));
        if let Some(t) = change
            .filter(|t| lead > Duration::zero() && t.at - lead <= now && rises(count, t.count()))
        {
            eval.replicas = t.replicas;
            eval.ahead_of = Some(t);
        }
        (eval, next, next_write)
    }

    /// `evaluate`, with the count `led` writes: what the schedule says at `now`, except that
    /// a rise whose write has started is written already (`ahead_of`).
    pub fn evaluate_led(&self, now: DateTime<Utc>, lead: Duration) -> super::Evaluation {
        let mut eval = self.evaluate(now);
        if let Some(t) = self.led(now, lead).ahead_of {
            eval.replicas = t.replicas;
            eval.ahead_of = Some(t);
        }
        eval
    }

    /// The first instant after `now` at which what `led` writes may change: the next
    /// transition, or the start of its write when it is a rise not yet led to.
    pub fn next_led_write(&self, now: DateTime<Utc>, lead: Duration) -> Option<DateTime<Utc>> {
        let lead = clamp(lead);
        let next = self.next_transition(now)?;
        let count = self.evaluate(now).count();
        let change = self.count_change_from(next, count, next.at + lead);
        Some(write_start(next, change, count, lead, now))
    }

    /// The first transition after `now` that changes the count from `count`, passing over
    /// those that change an HPA's ceiling alone (a rise is led past them, not held behind
    /// them), while they are no later than `until`.
    fn next_count_change(
        &self,
        now: DateTime<Utc>,
        count: Count,
        until: DateTime<Utc>,
    ) -> Option<Transition> {
        self.count_change_from(self.next_transition(now)?, count, until)
    }

    /// `next_count_change` from the transition `t` on.
    fn count_change_from(
        &self,
        mut t: Transition,
        count: Count,
        until: DateTime<Utc>,
    ) -> Option<Transition> {
        for _ in 0..MAX_PASSED {
            if t.count() != count {
                return Some(t);
            }
            if t.at > until {
                return None;
            }
            t = self.next_transition(t.at)?;
        }
        None
    }

    /// Every transition in `(from, to]`, each with when its write starts (a rise's may come
    /// before `from`).
    pub fn led_transitions(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        lead: Duration,
    ) -> Vec<LedTransition> {
        let lead = clamp(lead);
        let transitions = self.transitions(from, to);
        let Some(first) = transitions.first() else {
            return vec![];
        };
        // The change of count before the first transition, if one lies within its reach (at
        // most an hour). A change of an HPA's ceiling alone holds no rise back.
        let reach = first.at - lead;
        let mut previous = None;
        if reach < from {
            let mut count = self.evaluate(reach).count();
            for t in self.transitions(reach, from) {
                if t.count() != count {
                    (previous, count) = (Some(t.at), t.count());
                }
            }
        }
        let mut count = self.evaluate(from).count();
        let mut out = Vec::with_capacity(transitions.len());
        for t in transitions {
            let write_at = if rises(count, t.count()) {
                previous.map_or(t.at - lead, |p| (t.at - lead).max(p))
            } else {
                t.at
            };
            out.push(LedTransition {
                transition: t,
                from: count,
                write_at,
            });
            if t.count() != count {
                previous = Some(t.at);
            }
            count = t.count();
        }
        out
    }
}

/// How many transitions that change a ceiling alone a rise is looked for past: a bound on the
/// work (a ceiling changes at a window's or an override's edge, a few in an hour).
const MAX_PASSED: usize = 64;

/// When what is written changes after `now`: at the next transition `next`, or before it, at
/// the start of the write of the next change of count (`change`) when that is a rise not yet
/// led to.
fn write_start(
    next: Transition,
    change: Option<Transition>,
    count: Count,
    lead: Duration,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    match change {
        Some(c) if rises(count, c.count()) && c.at - lead > now => (c.at - lead).min(next.at),
        _ => next.at,
    }
}

/// A lead between zero and `MAX_LEAD`.
fn clamp(lead: Duration) -> Duration {
    lead.clamp(Duration::zero(), MAX_LEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// 1 replica by default; 5 from 09:00 to 17:00, 2 from 17:00 to 17:05, then 5 again
    /// until 18:00 (UTC).
    fn schedule() -> Schedule {
        let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "defaultReplica": 1,
            "schedulingConfig": [
                {"startTime": "09:00", "endTime": "17:00", "replica": 5},
                {"startTime": "17:00", "endTime": "17:05", "replica": 2},
                {"startTime": "17:05", "endTime": "18:00", "replica": 5}
            ]
        }))
        .unwrap();
        Schedule::compile(&spec).unwrap()
    }

    #[test]
    fn a_change_of_ceiling_alone_inside_the_lead_does_not_hold_the_rise_back() {
        // An HPA: floor 2 under 5 by night; 2 under 8 from 08:58 (the ceiling alone changes);
        // 10 under 50 from 09:00. With a 5-minute lead the rise is written at 08:55, not
        // after 08:58.
        let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"},
            "defaultReplica": 2,
            "defaultMaxReplica": 5,
            "schedulingConfig": [
                {"startTime": "08:58", "endTime": "09:00", "replica": 2, "maxReplica": 8},
                {"startTime": "09:00", "endTime": "17:00", "replica": 10, "maxReplica": 50}
            ]
        }))
        .unwrap();
        let s = Schedule::compile(&spec).unwrap();
        let lead = Duration::minutes(5);
        let nine = utc("2026-05-04T09:00:00Z");
        let led = s.led(utc("2026-05-04T08:55:00Z"), lead);
        assert_eq!(led.count, Count::Replicas(10));
        assert_eq!(
            led.ahead_of.map(|t| (t.at, t.ceiling)),
            Some((nine, Some(50)))
        );
        assert_eq!(
            s.led(utc("2026-05-04T08:54:59Z"), lead).count,
            Count::Replicas(2)
        );
        let (eval, next, next_write) = s.led_at(utc("2026-05-04T08:50:00Z"), lead);
        assert_eq!(eval.replicas, 2);
        assert_eq!(next.map(|t| t.at), Some(utc("2026-05-04T08:58:00Z")));
        assert_eq!(next_write, Some(utc("2026-05-04T08:55:00Z")));
        let (eval, next, _) = s.led_at(utc("2026-05-04T08:56:00Z"), lead);
        assert_eq!((eval.replicas, eval.ceiling), (10, Some(5)));
        assert_eq!(eval.ahead_of.map(|t| t.at), Some(nine));
        // What the schedule itself sets meanwhile is kept beside the count written ahead.
        assert_eq!(eval.scheduled_count(), Count::Replicas(2));
        assert_eq!(
            s.evaluate_led(utc("2026-05-04T08:56:00Z"), lead).scheduled,
            2
        );
        assert_eq!(next.map(|t| t.at), Some(utc("2026-05-04T08:58:00Z")));
        assert_eq!(
            s.next_led_write(utc("2026-05-04T08:00:00Z"), lead),
            Some(utc("2026-05-04T08:55:00Z"))
        );
        let writes: Vec<_> = s
            .led_transitions(
                utc("2026-05-04T08:00:00Z"),
                utc("2026-05-04T10:00:00Z"),
                lead,
            )
            .into_iter()
            .map(|t| (t.transition.at, t.write_at))
            .collect();
        assert_eq!(
            writes,
            [
                (utc("2026-05-04T08:58:00Z"), utc("2026-05-04T08:58:00Z")),
                (nine, utc("2026-05-04T08:55:00Z")),
            ]
        );
    }

    #[test]
    fn a_rise_is_written_ahead_and_a_fall_on_time() {
        let s = schedule();
        let lead = Duration::minutes(2);
        let count = |at: &str| s.led(utc(at), lead).count;
        assert_eq!(count("2026-05-04T08:57:59Z"), Count::Replicas(1));
        assert_eq!(count("2026-05-04T08:58:00Z"), Count::Replicas(5));
        assert_eq!(
            s.led(utc("2026-05-04T08:58:00Z"), lead)
                .ahead_of
                .map(|t| t.at),
            Some(utc("2026-05-04T09:00:00Z"))
        );
        // The fall at 17:00 is not early; the rise at 17:05 leads, but not before 17:00.
        assert_eq!(count("2026-05-04T16:59:59Z"), Count::Replicas(5));
        assert_eq!(count("2026-05-04T17:02:59Z"), Count::Replicas(2));
        assert_eq!(count("2026-05-04T17:03:00Z"), Count::Replicas(5));
        // The schedule itself says 2 until 17:05.
        assert_eq!(
            s.evaluate(utc("2026-05-04T17:03:00Z")).count(),
            Count::Replicas(2)
        );
        assert_eq!(
            s.next_led_write(utc("2026-05-04T08:00:00Z"), lead),
            Some(utc("2026-05-04T08:58:00Z"))
        );
        assert_eq!(
            s.next_led_write(utc("2026-05-04T08:58:00Z"), lead),
            Some(utc("2026-05-04T09:00:00Z"))
        );
    }

    #[test]
    fn a_lead_longer_than_the_dip_starts_at_the_dip() {
        let s = schedule();
        let led = s.led_transitions(
            utc("2026-05-04T16:00:00Z"),
            utc("2026-05-04T18:30:00Z"),
            Duration::minutes(10),
        );
        let at: Vec<(i32, DateTime<Utc>)> = led
            .iter()
            .map(|l| (l.transition.replicas, l.write_at))
            .collect();
        assert_eq!(
            at,
            [
                (2, utc("2026-05-04T17:00:00Z")),
                (5, utc("2026-05-04T17:00:00Z")),
                (1, utc("2026-05-04T18:00:00Z")),
            ]
        );
        // Listed from inside the dip, the rise still starts at 17:00, not 16:55.
        let inside = s.led_transitions(
            utc("2026-05-04T17:01:00Z"),
            utc("2026-05-04T18:30:00Z"),
            Duration::minutes(10),
        );
        assert_eq!(inside[0].write_at, utc("2026-05-04T17:00:00Z"));
    }

    /// A manifest that never met the API server (preview) is checked as admission checks it.
    #[test]
    fn a_warm_up_the_schema_refuses_is_refused_naming_the_field() {
        let with = |warm_up: serde_json::Value| {
            let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
                "container": {"image": "nginx", "port": 80},
                "defaultReplica": 1, "schedulingConfig": [], "warmUp": warm_up
            }))
            .unwrap();
            Schedule::compile(&spec)
                .err()
                .map(|e| e.iter().map(|e| e.field.clone()).collect::<Vec<_>>())
        };
        let lead = Some(vec!["spec.warmUp.lead".to_string()]);
        assert_eq!(with(serde_json::json!({"mode": "Fixed"})), lead);
        assert_eq!(
            with(serde_json::json!({"mode": "Fixed", "lead": "11m"})),
            lead
        );
        assert_eq!(with(serde_json::json!({"lead": "0s"})), lead);
        assert_eq!(
            with(serde_json::json!({"max": "2h"})),
            Some(vec!["spec.warmUp.max".to_string()])
        );
        assert_eq!(
            with(serde_json::json!({"mode": "Fixed", "lead": "20m", "max": "1h"})),
            None
        );
        let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
            "container": {"image": "nginx", "port": 80}, "defaultReplica": 1,
            "schedulingConfig": [], "warmUp": {"mode": "Measured", "lead": "20m", "max": "15m"}
        }))
        .unwrap();
        assert!(Schedule::compile(&spec).is_err());
        let off: TDSetSpec = serde_json::from_value(serde_json::json!({
            "container": {"image": "nginx", "port": 80}, "defaultReplica": 1,
            "schedulingConfig": [], "warmUp": {"mode": "Off", "lead": "5m"}
        }))
        .unwrap();
        assert_eq!(lead_of(&off, &[60]), Duration::zero());
    }

    #[test]
    fn a_measured_lead_is_the_90th_percentile_plus_a_margin_capped_at_max() {
        assert_eq!(from_samples(&[]), None);
        // Of fewer than 10, the longest; a margin of at least 5 s.
        assert_eq!(from_samples(&[12, 30, 20]), Some(Duration::seconds(35)));
        // Of 10, the second longest: one outlier is passed over; a tenth as margin.
        let ten = [100, 100, 100, 100, 100, 100, 100, 100, 100, 3000];
        assert_eq!(from_samples(&ten), Some(Duration::seconds(110)));
        let spec = |w: serde_json::Value| -> TDSetSpec {
            serde_json::from_value(serde_json::json!({
                "container": {"image": "nginx", "port": 80}, "defaultReplica": 1,
                "schedulingConfig": [], "warmUp": w
            }))
            .unwrap()
        };
        let measured = spec(serde_json::json!({"mode": "Measured", "lead": "1m", "max": "2m"}));
        // The guess until a sample exists; then the samples; never past max.
        assert_eq!(lead_of(&measured, &[]), Duration::minutes(1));
        assert_eq!(lead_of(&measured, &[10]), Duration::seconds(15));
        assert_eq!(lead_of(&measured, &[600]), Duration::minutes(2));
        // Fixed keeps its lead whatever was measured; Measured without a guess starts at 0.
        let fixed = spec(serde_json::json!({"mode": "Fixed", "lead": "1m"}));
        assert_eq!(lead_of(&fixed, &[10]), Duration::minutes(1));
        let bare = spec(serde_json::json!({"mode": "Measured"}));
        assert_eq!(lead_of(&bare, &[]), Duration::zero());
    }

    #[test]
    fn what_rises_is_known_for_certain() {
        use Count::{Own, Replicas};
        assert!(rises(Replicas(1), Replicas(2)));
        assert!(!rises(Replicas(2), Replicas(2)));
        assert!(!rises(Replicas(3), Replicas(2)));
        assert!(rises(Replicas(0), Own));
        assert!(!rises(Replicas(1), Own));
        assert!(!rises(Own, Replicas(9)));
    }
}
