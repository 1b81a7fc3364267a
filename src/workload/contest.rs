//! Another writer of the count: a GitOps tool or a script that keeps setting `spec.replicas`
//! back to its own value. Reverting it at watch speed makes the two fight forever (one write
//! per watch event each). So a revert (a write of the same scheduled count again, after
//! someone else changed it) is free a few times in a window, then waits longer and longer,
//! and the TDSet reports the fight. A new scheduled count (a transition) is never held back.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::workload::gitops::Setter;

/// Reverts within this window count towards a fight.
const WINDOW: Duration = Duration::from_secs(600);
/// Reverts in the window that are made at once.
const FREE: usize = 3;
/// Then the wait after the last revert: doubling from this...
const FIRST_WAIT: Duration = Duration::from_secs(30);
/// ...up to this.
const MAX_WAIT: Duration = Duration::from_secs(600);
/// Failed writes this long past their wait are forgotten.
const FORGET_FAILURES: Duration = Duration::from_secs(600);

/// One TDSet's record of its writes to a workload.
#[derive(Clone, Debug, Default)]
pub struct Contest {
    /// The count last written.
    last_set: Option<i32>,
    /// When recent reverts were made, oldest first.
    reverts: VecDeque<Instant>,
    /// Who set it back, as last read: the report names them even where a later read finds
    /// the operator's own revert on top.
    setter: Option<Setter>,
    /// When the last write was made: what a check of another controller's answer waits from.
    written_at: Option<Instant>,
    /// Since when a state a check waits out has been seen (`seen_for`).
    seen_at: Option<Instant>,
    /// Writes that failed outright in a row (a webhook down, a 5xx), the count the last one
    /// set and its error, and until when a write of that count again waits (`failing`).
    failures: u32,
    last_failure: Option<(i32, String)>,
    failing_until: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Write now.
    Write,
    /// A revert, held back until this instant.
    Wait(Instant),
}

impl Contest {
    /// Whether to write `scheduled` now, where the workload is not at it.
    pub fn decide(&mut self, scheduled: i32, now: Instant) -> Verdict {
        if self.last_set != Some(scheduled) {
            return Verdict::Write;
        }
        self.forget_before(now);
        let n = self.reverts.len();
        let Some(last) = self.reverts.back().copied().filter(|_| n >= FREE) else {
            return Verdict::Write;
        };
        let wait = FIRST_WAIT
            .saturating_mul(1 << (n - FREE).min(8))
            .min(MAX_WAIT);
        if now >= last + wait {
            Verdict::Write
        } else {
            Verdict::Wait(last + wait)
        }
    }

    /// `scheduled` was written at `now`.
    pub fn wrote(&mut self, scheduled: i32, now: Instant) {
        if self.last_set == Some(scheduled) {
            self.reverts.push_back(now);
        }
        self.last_set = Some(scheduled);
        self.written_at = Some(now);
        self.forget_before(now);
        self.landed();
    }

    /// A write of `count` failed outright: that count is not sent again before `until`,
    /// whatever wakes the reconcile meanwhile (the workload's own events, its neighbours', a
    /// status), so a workload whose writes fail is retried at the backoff's pace, not at the
    /// pace of events. A new count (a transition) is not held back. How many have failed in a
    /// row, this one included.
    pub fn failed(&mut self, count: i32, until: Instant, error: String) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.last_failure = Some((count, error));
        self.failing_until = Some(until);
        self.failures
    }

    /// Writes that failed in a row, counted from 0 again once the last wait is long over (a
    /// failure weeks later starts the backoff afresh).
    pub fn failures(&self, now: Instant) -> u32 {
        match self.failing_until {
            Some(until) if now < until + FORGET_FAILURES => self.failures,
            _ => 0,
        }
    }

    /// While the wait after a failed write of `count` lasts: until when, and its error.
    pub fn failing(&self, count: i32, now: Instant) -> Option<(Instant, &str)> {
        let until = self.failing_until.filter(|u| now < *u)?;
        let (failed, error) = self.last_failure.as_ref()?;
        (*failed == count).then_some((until, error.as_str()))
    }

    fn landed(&mut self) {
        self.failures = 0;
        self.last_failure = None;
        self.failing_until = None;
    }

    /// The workload was given back its own count (a wake-up to `own`, or letting go): the
    /// count is ours too, and the schedule's count that follows is a change, not a revert of
    /// someone else's.
    pub fn gave_back(&mut self, own: i32) {
        self.last_set = Some(own);
        self.landed();
    }

    /// How long ago the last write was made (None: none since this process started).
    /// Whether a look timed by `looked` is due: none yet, or the wait it asked for is over.
    pub fn look_due(&self, now: Instant) -> bool {
        match (self.written_at, self.last_set) {
            (Some(at), Some(secs)) => {
                now.saturating_duration_since(at).as_secs() >= u64::try_from(secs).unwrap_or(0)
            }
            _ => true,
        }
    }

    /// A look made at `now`, the next due after `wait` (kept in whole seconds; no revert is
    /// counted: a look is no write).
    pub fn looked(&mut self, wait: std::time::Duration, now: Instant) {
        self.last_set = Some(i32::try_from(wait.as_secs()).unwrap_or(i32::MAX));
        self.written_at = Some(now);
    }

    pub fn since_write(&self, now: Instant) -> Option<std::time::Duration> {
        self.written_at.map(|at| now.saturating_duration_since(at))
    }

    /// How long a state has been seen, counted from the first time this was asked since it was
    /// last `unseen`.
    pub fn seen_for(&mut self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(*self.seen_at.get_or_insert(now))
    }

    /// The state `seen_for` counts is gone.
    pub fn unseen(&mut self) {
        self.seen_at = None;
    }

    /// Whether it times a wait (`seen_for`).
    pub fn waits(&self) -> bool {
        self.seen_at.is_some()
    }

    /// How many reverts the window holds when that makes a fight, for the report.
    pub fn fight(&mut self, now: Instant) -> Option<usize> {
        self.forget_before(now);
        (self.reverts.len() >= FREE).then_some(self.reverts.len())
    }

    /// Another writer found on the field by a read (`None`: nobody else): remembered for the
    /// report.
    pub fn saw(&mut self, setter: Option<Setter>) {
        if setter.is_some() {
            self.setter = setter;
        }
    }

    /// Who set it back, as last read.
    pub fn setter(&self) -> Option<&Setter> {
        self.setter.as_ref()
    }

    /// Whether any revert is remembered (else the record only holds the last count).
    pub fn has_reverts(&self) -> bool {
        !self.reverts.is_empty()
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .reverts
            .front()
            .is_some_and(|t| now.duration_since(*t) >= WINDOW)
        {
            self.reverts.pop_front();
        }
        // Bounded whatever happens: only the last few decide anything.
        while self.reverts.len() > FREE + 16 {
            self.reverts.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_that_keeps_resetting_the_count_is_reverted_less_and_less_often() {
        let t0 = Instant::now();
        let mut c = Contest::default();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        // The first write of a count, and a new count, are never held back.
        assert_eq!(c.decide(4, s(0)), Verdict::Write);
        c.wrote(4, s(0));
        // Someone resets it every second: three reverts at once, then waits that double.
        let mut writes = vec![];
        for sec in 1..=600 {
            if c.decide(4, s(sec)) == Verdict::Write {
                c.wrote(4, s(sec));
                writes.push(sec);
            }
        }
        assert_eq!(&writes[..5], &[1, 2, 3, 33, 93], "{writes:?}");
        assert!(writes.len() <= 8, "{writes:?}");
        assert!(c.fight(s(600)).is_some());
        // A transition goes at once, mid-fight.
        assert_eq!(c.decide(2, s(601)), Verdict::Write);
        c.wrote(2, s(601));
        // Ten quiet minutes later, the fight is forgotten.
        assert_eq!(c.fight(s(1300)), None);
        assert_eq!(c.decide(2, s(1300)), Verdict::Write);
    }

    #[test]
    fn sleeping_again_after_a_wake_up_to_the_own_count_is_not_a_revert() {
        let t0 = Instant::now();
        let mut c = Contest::default();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        c.wrote(0, s(0));
        for wake in 1..=6 {
            // Woken to its own count by the operator itself, then asleep again.
            c.gave_back(3);
            assert_eq!(c.decide(0, s(wake * 60)), Verdict::Write, "wake-up {wake}");
            c.wrote(0, s(wake * 60));
        }
        assert_eq!(c.fight(s(400)), None);
    }

    /// A workload whose writes fail (a webhook down) waits out each failure's backoff,
    /// whatever wakes the reconcile; a write that lands ends it.
    #[test]
    fn a_write_that_failed_waits_until_its_backoff_then_a_landed_one_clears_it() {
        let t0 = Instant::now();
        let mut c = Contest::default();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        assert_eq!(c.failing(0, s(0)), None);
        assert_eq!(c.failed(0, s(5), "webhook down".into()), 1);
        assert_eq!(c.failing(0, s(1)), Some((s(5), "webhook down")));
        assert_eq!(c.failing(3, s(1)), None, "a new count is not held back");
        assert_eq!(c.failing(0, s(5)), None, "due at its instant");
        assert_eq!(c.failed(0, s(15), "webhook down again".into()), 2);
        assert_eq!(c.failures(s(6)), 2);
        assert_eq!(c.failing(0, s(6)), Some((s(15), "webhook down again")));
        // Long after the last wait, a failure starts the backoff afresh.
        assert_eq!(c.failures(s(15 + 600)), 0);
        c.wrote(0, s(16));
        assert_eq!((c.failures(s(16)), c.failing(0, s(16))), (0, None));
        c.failed(0, s(30), "once more".into());
        c.gave_back(3);
        assert_eq!((c.failures(s(17)), c.failing(0, s(17))), (0, None));
    }

    /// A read that finds the operator's own revert on top (nobody else on the field) keeps
    /// the writer an earlier read found, so the report does not flip between them.
    #[test]
    fn the_writer_last_seen_is_kept_when_a_read_finds_none() {
        let mut c = Contest::default();
        let argo = Setter {
            manager: "argocd-controller".into(),
            tool: None,
        };
        c.saw(Some(argo.clone()));
        c.saw(None);
        assert_eq!(c.setter(), Some(&argo));
        let script = Setter {
            manager: "deploy-script".into(),
            tool: None,
        };
        c.saw(Some(script.clone()));
        assert_eq!(c.setter(), Some(&script));
    }
}
