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

/// A scale-up ready later than this after its transition is reported as late.
pub const LATE_GRACE: Duration = Duration::seconds(5);

/// The Warning a scale-up ready late (past `LATE_GRACE`) brings: by how much, and what
/// would write it ahead (`warm_up`: the status's warm-up, with the lead now in force).
pub fn late_warning(r: &Rise, warm_up: Option<&WarmUpStatus>) -> Option<String> {
    let late = r.late();
    if late <= LATE_GRACE {
        return None;
    }
    let lead = match warm_up {
        Some(w) => format!(
            "; the next scale-up is written {} ahead ({:?})",
            w.lead, w.basis
        ),
        None => "; spec.warmUp can write scale-ups ahead of their transition, by a lead fixed \
                 or measured"
            .to_string(),
    };
    Some(format!(
        "{} replicas were ready {} after their transition at {} (written at {}, {} after the \
         write){lead}",
        r.to,
        duration(late),
        crate::preview::rfc3339(r.at),
        crate::preview::rfc3339(r.applied_at),
        duration(r.took()),
    ))
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
mod tests;
