//! Time to Ready (`spec.warmUp`), pure: which scale-ups in `status.history` the workload now
//! serves, how long each took from its write and how late it was against its transition, and
//! the samples a Measured lead is taken from (`status.warmUp`).
//!
//! A scale-up is awaited from the reconcile that wrote it (its history entry, `appliedAt`
//! set) until a reconcile sees its count ready; its entry then gets `readyAt`. Everything is
//! kept in status, so a restart or a new leader goes on measuring where the last one stopped.

use chrono::{DateTime, Duration, SecondsFormat, Utc};

use crate::api::{
    HistoryEntry, LeadBasis, MAX_WARM_UP_SAMPLES, TDSetSpec, TDSetStatus, WarmUpMode, WarmUpStatus,
};
use crate::preview::parse_rfc3339;
use crate::schedule::{MAX_LEAD, lead_of};

/// What a reconcile saw of the workload's ready replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// It reports this many ready replicas (a group: summed over the workloads it holds).
    Reported(i32),
    /// Its kind reports none (a custom kind's `/scale`, an HPA): nothing can be measured.
    NotReported,
    /// It was not seen (missing, not allowed, held elsewhere): nothing changes.
    Unknown,
}

/// A scale-up seen ready by this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rise {
    /// Its transition (or, for a change not scheduled, when it was decided).
    pub at: DateTime<Utc>,
    /// When its write landed.
    pub applied_at: DateTime<Utc>,
    /// When its count was first seen ready.
    pub ready_at: DateTime<Utc>,
    pub from: i32,
    pub to: i32,
    /// Whether it is a sample of the time to Ready: not when it was ready in the reconcile
    /// that wrote it (nothing was waited for: the workload already ran that many).
    pub sampled: bool,
}

impl Rise {
    /// How long after its transition it was ready (zero when ready by then).
    pub fn late(&self) -> Duration {
        (self.ready_at - self.at).max(Duration::zero())
    }

    /// From its write to its count ready.
    pub fn took(&self) -> Duration {
        (self.ready_at - self.applied_at).max(Duration::zero())
    }

    /// The replicas it added, times how long before its transition they were ready: what the
    /// warm-up spent against replicas ready exactly at the transition.
    pub fn early_replica_seconds(&self) -> f64 {
        let early = (self.at - self.ready_at).max(Duration::zero());
        let added = (i64::from(self.to) - i64::from(self.from)).max(0);
        early.num_milliseconds() as f64 / 1000.0 * added as f64
    }
}

/// A scale-up in `entry` that has landed and is not yet seen ready: its `(at, applied_at,
/// from, to)`.
fn awaited(entry: &HistoryEntry) -> Option<(DateTime<Utc>, DateTime<Utc>, i32, i32)> {
    if !entry.rises() || entry.ready_at.is_some() {
        return None;
    }
    let (from, to) = (entry.from?, entry.to?);
    let at = parse_rfc3339(&entry.at)?;
    let applied = parse_rfc3339(entry.applied_at.as_deref()?)?;
    Some((at, applied, from, to))
}

/// When the newest scale-up was written, while its count is not yet seen ready.
pub fn awaiting(status: &TDSetStatus) -> Option<DateTime<Utc>> {
    status
        .history
        .first()
        .and_then(awaited)
        .map(|(_, applied, _, _)| applied)
}

/// The lead a reconcile at `now` writes with: what `lead_of` gives for the samples in
/// `status`, but never less than a scale-up already written ahead of its transition needs to
/// stay written. A lead learnt shorter meanwhile (the first sample, below the guess) must not
/// take back replicas that are already starting, only to write them again later.
pub fn lead_at(spec: &TDSetSpec, status: Option<&TDSetStatus>, now: DateTime<Utc>) -> Duration {
    let lead = lead_of(spec, status.map_or(&[], TDSetStatus::warm_up_samples));
    let on = spec.warm_up_mode() != WarmUpMode::Off;
    let written_ahead = status
        .and_then(|s| s.history.first())
        .filter(|e| e.rises() && e.applied_at.is_some())
        .and_then(|e| parse_rfc3339(&e.at))
        .filter(|at| *at > now && on)
        .map(|at| (at - now).min(MAX_LEAD));
    written_ahead.map_or(lead, |ahead| lead.max(ahead))
}

/// What a reconcile saw, for `settle`.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub readiness: Readiness,
    /// This reconcile recorded the newest history entry.
    pub written_now: bool,
    /// When this operator began reconciling: what was written before is no sample (it may
    /// have been ready long before anyone looked).
    pub since: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// Marks in `status.history` the scale-ups the workload now serves (`readyAt`), and keeps
/// `status.warmUp` (the samples, the lead and its basis) as `spec` asks. The scale-ups looked
/// at are the newest entries that are scale-ups awaiting readiness, newest first: a ramp's
/// earlier step may be ready before its later one; a scale-down or a scale-up already ready
/// ends the look. A scale-up written again before it was ready (its count was knocked back, a
/// group's retry) is the same scale-up: it is marked with it, and only the first write counts.
/// Returns the scale-ups found ready, newest first.
pub fn settle(spec: &TDSetSpec, status: &mut TDSetStatus, seen: Seen) -> Vec<Rise> {
    let mut risen = Vec::new();
    if let Readiness::Reported(ready) = seen.readiness {
        let awaiting: Vec<_> = status.history.iter().map_while(awaited).collect();
        for (i, &(at, applied_at, from, to)) in awaiting.iter().enumerate() {
            if ready < to {
                continue;
            }
            let entry = &mut status.history[i];
            entry.ready_at = Some(seen.now.to_rfc3339_opts(SecondsFormat::Millis, true));
            let repeat = awaiting.get(i + 1).is_some_and(|older| from < older.3);
            if repeat {
                continue;
            }
            risen.push(Rise {
                at,
                applied_at,
                ready_at: seen.now,
                from,
                to,
                sampled: !(seen.written_now && i == 0) && applied_at >= seen.since,
            });
        }
    }
    status.warm_up = match spec.warm_up_mode() {
        WarmUpMode::Off => None,
        mode => {
            let mut samples = status.warm_up.take().map(|w| w.samples).unwrap_or_default();
            // Oldest first, so that the newest ends up first.
            for r in risen.iter().rev().filter(|r| r.sampled) {
                let secs = (r.took().num_milliseconds() + 999) / 1000;
                samples.insert(0, i32::try_from(secs).unwrap_or(i32::MAX));
            }
            samples.truncate(MAX_WARM_UP_SAMPLES);
            let basis = match mode {
                WarmUpMode::Fixed | WarmUpMode::Off => LeadBasis::Fixed,
                WarmUpMode::Measured if !samples.is_empty() => LeadBasis::Measured,
                WarmUpMode::Measured if seen.readiness == Readiness::NotReported => {
                    LeadBasis::NotReported
                }
                WarmUpMode::Measured => LeadBasis::Guess,
            };
            Some(WarmUpStatus {
                lead: duration(lead_of(spec, &samples)),
                basis,
                samples,
            })
        }
    };
    risen
}

/// "1m30s", "45s", "0s".
pub fn duration(d: Duration) -> String {
    let secs = d.num_seconds().max(0);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        parse_rfc3339(s).unwrap()
    }

    /// What a reconcile at `now` saw, the operator leading since long before.
    fn seen(readiness: Readiness, written_now: bool, now: DateTime<Utc>) -> Seen {
        Seen {
            readiness,
            written_now,
            since: t("2026-01-01T00:00:00Z"),
            now,
        }
    }

    fn entry(at: &str, applied: Option<&str>, from: i32, to: i32) -> HistoryEntry {
        HistoryEntry {
            at: at.into(),
            applied_at: applied.map(Into::into),
            from: Some(from),
            to: Some(to),
            reason: "window".into(),
            ..Default::default()
        }
    }

    fn spec(warm_up: serde_json::Value) -> TDSetSpec {
        serde_json::from_value(serde_json::json!({
            "container": {"image": "nginx", "port": 80}, "defaultReplica": 1,
            "schedulingConfig": [], "warmUp": warm_up
        }))
        .unwrap()
    }

    #[test]
    fn a_scale_up_is_measured_from_its_write_and_late_against_its_transition() {
        let spec = spec(serde_json::json!({"mode": "Measured", "lead": "10s"}));
        let mut status = TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T08:59:50Z"),
                1,
                5,
            )],
            ..Default::default()
        };
        // Not ready yet: nothing changes but the lead's basis.
        let now = t("2026-05-04T08:59:58Z");
        assert!(settle(&spec, &mut status, seen(Readiness::Reported(4), false, now)).is_empty());
        assert_eq!(status.history[0].ready_at, None);
        assert_eq!(status.warm_up.as_ref().unwrap().basis, LeadBasis::Guess);
        assert_eq!(awaiting(&status), Some(t("2026-05-04T08:59:50Z")));

        let now = t("2026-05-04T09:00:12Z");
        let risen = settle(&spec, &mut status, seen(Readiness::Reported(5), false, now));
        assert_eq!(risen.len(), 1);
        assert_eq!(risen[0].took(), Duration::seconds(22));
        assert_eq!(risen[0].late(), Duration::seconds(12));
        assert_eq!(risen[0].early_replica_seconds(), 0.0);
        assert_eq!(
            status.history[0].ready_at.as_deref(),
            Some("2026-05-04T09:00:12.000Z")
        );
        let w = status.warm_up.clone().unwrap();
        assert_eq!((w.samples, w.basis), (vec![22], LeadBasis::Measured));
        assert_eq!(w.lead, "27s");
        assert_eq!(awaiting(&status), None);
        // Seen ready once: a later reconcile measures nothing again.
        let later = t("2026-05-04T09:01:00Z");
        assert!(
            settle(
                &spec,
                &mut status,
                seen(Readiness::Reported(5), false, later)
            )
            .is_empty()
        );
        assert_eq!(status.warm_up.unwrap().samples, vec![22]);
    }

    #[test]
    fn ready_before_its_transition_is_early_and_costs_replica_seconds() {
        let spec = spec(serde_json::json!({"mode": "Fixed", "lead": "1m"}));
        let mut status = TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T08:59:00Z"),
                2,
                5,
            )],
            ..Default::default()
        };
        let now = t("2026-05-04T08:59:40Z");
        let risen = settle(&spec, &mut status, seen(Readiness::Reported(5), false, now));
        assert_eq!(risen[0].late(), Duration::zero());
        assert_eq!(risen[0].early_replica_seconds(), 60.0);
        // Fixed keeps its lead, and the samples, for a person to compare.
        let w = status.warm_up.unwrap();
        assert_eq!(
            (w.lead.as_str(), w.basis, w.samples),
            ("1m", LeadBasis::Fixed, vec![40])
        );
    }

    #[test]
    fn a_ramps_earlier_steps_are_measured_before_its_later_ones() {
        let spec = spec(serde_json::json!({"mode": "Measured"}));
        let mut status = TDSetStatus {
            history: vec![
                entry("2026-05-04T09:02:00Z", Some("2026-05-04T09:02:00Z"), 4, 6),
                entry("2026-05-04T09:01:00Z", Some("2026-05-04T09:01:00Z"), 2, 4),
                entry("2026-05-04T09:00:00Z", Some("2026-05-04T09:00:00Z"), 6, 2),
                entry("2026-05-04T08:00:00Z", Some("2026-05-04T08:00:00Z"), 1, 6),
            ],
            ..Default::default()
        };
        let now = t("2026-05-04T09:02:30Z");
        let risen = settle(&spec, &mut status, seen(Readiness::Reported(4), false, now));
        // The step to 4 is ready, the step to 6 is not; the scale-down ends the look, so the
        // scale-up before it (never seen ready) is not measured now.
        assert_eq!(risen.len(), 1);
        assert_eq!((risen[0].from, risen[0].to), (2, 4));
        assert_eq!(status.history[0].ready_at, None);
        assert!(status.history[1].ready_at.is_some());
        assert_eq!(status.history[3].ready_at, None);
        assert_eq!(status.warm_up.unwrap().samples, vec![90]);
    }

    #[test]
    fn what_was_ready_when_written_and_what_cannot_be_read_are_not_samples() {
        let spec = spec(serde_json::json!({"mode": "Measured", "lead": "30s"}));
        let written = || TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T09:00:00Z"),
                1,
                3,
            )],
            ..Default::default()
        };
        let now = t("2026-05-04T09:00:00Z");
        let mut status = written();
        let risen = settle(&spec, &mut status, seen(Readiness::Reported(3), true, now));
        assert!(!risen[0].sampled);
        assert!(status.history[0].ready_at.is_some());
        assert_eq!(status.warm_up.unwrap().basis, LeadBasis::Guess);

        let mut status = written();
        assert!(settle(&spec, &mut status, seen(Readiness::NotReported, true, now)).is_empty());
        let w = status.warm_up.unwrap();
        assert_eq!((w.lead.as_str(), w.basis), ("30s", LeadBasis::NotReported));

        // A scale-down, a failed write: nothing awaited.
        let mut status = TDSetStatus {
            history: vec![entry("2026-05-04T09:00:00Z", None, 1, 3)],
            ..Default::default()
        };
        assert!(settle(&spec, &mut status, seen(Readiness::Reported(3), false, now)).is_empty());
        assert_eq!(awaiting(&status), None);
    }

    #[test]
    fn samples_are_bounded_newest_first_and_gone_with_the_warm_up() {
        let spec_on = spec(serde_json::json!({"mode": "Measured"}));
        let mut status = TDSetStatus::default();
        for i in 0..15 {
            let at = t("2026-05-04T09:00:00Z") + Duration::hours(i);
            status.history.insert(
                0,
                entry(
                    &crate::preview::rfc3339(at),
                    Some(&crate::preview::rfc3339(at)),
                    1,
                    2,
                ),
            );
            let now = at + Duration::seconds(i + 1);
            settle(
                &spec_on,
                &mut status,
                seen(Readiness::Reported(2), false, now),
            );
            status.history.insert(
                0,
                entry(
                    &crate::preview::rfc3339(now),
                    Some(&crate::preview::rfc3339(now)),
                    2,
                    1,
                ),
            );
        }
        let samples = status.warm_up.clone().unwrap().samples;
        assert_eq!(samples.len(), MAX_WARM_UP_SAMPLES);
        assert_eq!(samples[0], 15);
        let off = spec(serde_json::json!({"mode": "Off"}));
        settle(
            &off,
            &mut status,
            seen(Readiness::Reported(2), false, t("2026-05-05T09:00:00Z")),
        );
        assert_eq!(status.warm_up, None);
    }

    #[test]
    fn durations_read_as_the_spec_writes_them() {
        assert_eq!(duration(Duration::zero()), "0s");
        assert_eq!(duration(Duration::seconds(45)), "45s");
        assert_eq!(duration(Duration::seconds(90)), "1m30s");
        assert_eq!(duration(Duration::seconds(3600)), "1h");
    }

    /// The first sample (20 s) comes in before the transition and makes the lead (25 s) shorter
    /// than the guess (2m) the scale-up was written with: the scale-up stays written, it is not
    /// taken back and written again cold.
    #[test]
    fn a_lead_learnt_shorter_never_takes_back_a_scale_up_already_written() {
        let spec: TDSetSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "defaultReplica": 1,
            "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 5}],
            "warmUp": {"mode": "Measured", "lead": "2m"}
        }))
        .unwrap();
        let schedule = crate::schedule::Schedule::compile(&spec).unwrap();
        let write = t("2026-05-04T08:58:00Z");
        let (eval, _, _) = schedule.led_at(write, lead_at(&spec, None, write));
        assert_eq!(eval.replicas, 5);
        let mut status = TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T08:58:00Z"),
                1,
                5,
            )],
            ..Default::default()
        };
        let ready = t("2026-05-04T08:58:20Z");
        settle(
            &spec,
            &mut status,
            seen(Readiness::Reported(5), false, ready),
        );
        assert_eq!(status.warm_up.as_ref().unwrap().lead, "25s");
        let lead = lead_at(&spec, Some(&status), ready);
        assert_eq!(lead, Duration::seconds(100));
        assert_eq!(schedule.led_at(ready, lead).0.replicas, 5);
        // Once its transition has passed, the learnt lead is the lead.
        let after = t("2026-05-04T09:00:01Z");
        assert_eq!(lead_at(&spec, Some(&status), after), Duration::seconds(25));
        // Turned Off meanwhile: no lead at all, as asked.
        let mut off = spec.clone();
        off.warm_up = None;
        assert_eq!(lead_at(&off, Some(&status), ready), Duration::zero());
    }

    /// A scale-up written again before it was ready (a group's retry of the writes that did not
    /// land, a count someone put back) is one scale-up: one sample, from the first write.
    #[test]
    fn a_scale_up_written_twice_is_one_sample_from_its_first_write() {
        let spec = spec(serde_json::json!({"mode": "Measured"}));
        let mut status = TDSetStatus {
            history: vec![
                entry("2026-05-04T09:00:30Z", Some("2026-05-04T09:00:30Z"), 6, 10),
                entry("2026-05-04T09:00:00Z", Some("2026-05-04T09:00:00Z"), 2, 10),
            ],
            ..Default::default()
        };
        let now = t("2026-05-04T09:01:00Z");
        let risen = settle(
            &spec,
            &mut status,
            seen(Readiness::Reported(10), false, now),
        );
        assert_eq!(risen.len(), 1);
        assert_eq!(risen[0].applied_at, t("2026-05-04T09:00:00Z"));
        assert!(status.history.iter().all(|e| e.ready_at.is_some()));
        assert_eq!(status.warm_up.unwrap().samples, vec![60]);
    }

    /// A scale-up written before this operator began leading (it was down, or another replica
    /// led) may have been ready hours before anyone looked: its lateness is recorded, but it is
    /// no sample, or one restart would hold the lead at `max` for the next nine scale-ups.
    #[test]
    fn what_was_written_before_this_operator_led_is_no_sample() {
        let spec = spec(serde_json::json!({"mode": "Measured"}));
        let mut status = TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T09:00:00Z"),
                1,
                5,
            )],
            warm_up: Some(WarmUpStatus {
                lead: "13s".into(),
                basis: LeadBasis::Measured,
                samples: vec![8, 8, 8, 8],
            }),
            ..Default::default()
        };
        let now = t("2026-05-04T12:00:00Z");
        let seen = Seen {
            since: t("2026-05-04T11:59:00Z"),
            ..seen(Readiness::Reported(5), false, now)
        };
        let risen = settle(&spec, &mut status, seen);
        assert_eq!(risen[0].late(), Duration::hours(3));
        assert!(!risen[0].sampled);
        let w = status.warm_up.unwrap();
        assert_eq!((w.lead.as_str(), w.samples.len()), ("13s", 4));
    }

    /// Counts from a status edited by hand do not overflow.
    #[test]
    fn extreme_counts_in_status_do_not_overflow() {
        let spec = spec(serde_json::json!({"mode": "Measured"}));
        let mut status = TDSetStatus {
            history: vec![entry(
                "2026-05-04T09:00:00Z",
                Some("2026-05-04T08:00:00Z"),
                i32::MIN,
                i32::MAX,
            )],
            ..Default::default()
        };
        let now = t("2026-05-04T08:30:00Z");
        let risen = settle(
            &spec,
            &mut status,
            seen(Readiness::Reported(i32::MAX), false, now),
        );
        assert!(risen[0].early_replica_seconds() > 0.0);
    }
}
