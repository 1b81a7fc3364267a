//! Another writer of the count: a GitOps tool or a script that keeps setting `spec.replicas`
//! back to its own value. Reverting it at watch speed makes the two fight forever (one write
//! per watch event each). So a revert (a write of the same scheduled count again, after
//! someone else changed it) is free a few times in a window, then waits longer and longer,
//! and the TDSet reports the fight. A new scheduled count (a transition) is never held back.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Reverts within this window count towards a fight.
const WINDOW: Duration = Duration::from_secs(600);
/// Reverts in the window that are made at once.
const FREE: usize = 3;
/// Then the wait after the last revert: doubling from this...
const FIRST_WAIT: Duration = Duration::from_secs(30);
/// ...up to this.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// One TDSet's record of its writes to a workload.
#[derive(Clone, Debug, Default)]
pub struct Contest {
    /// The count last written.
    last_set: Option<i32>,
    /// When recent reverts were made, oldest first.
    reverts: VecDeque<Instant>,
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
        self.forget_before(now);
    }

    /// The workload was given back its own count (a wake-up to `own`, or letting go): the
    /// count is ours too, and the schedule's count that follows is a change, not a revert of
    /// someone else's.
    pub fn gave_back(&mut self, own: i32) {
        self.last_set = Some(own);
    }

    /// How many reverts the window holds when that makes a fight, for the report.
    pub fn fight(&mut self, now: Instant) -> Option<usize> {
        self.forget_before(now);
        (self.reverts.len() >= FREE).then_some(self.reverts.len())
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

/// The manager, other than `ours`, that last set `spec.replicas`, from the object's
/// `metadata.managedFields` (the main resource or its `/scale`).
pub fn replicas_manager(
    managed: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    ours: &str,
) -> Option<String> {
    manager_of(managed, ours, "/f:spec/f:replicas")
}

/// The manager, other than `ours`, that last set the field at `pointer` (in managedFields'
/// own terms, e.g. `/f:spec/f:maxReplicas`).
pub fn manager_of(
    managed: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
    ours: &str,
    pointer: &str,
) -> Option<String> {
    managed
        .iter()
        .filter(|m| m.manager.as_deref().is_some_and(|n| n != ours))
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(pointer).is_some())
        })
        .max_by_key(|m| m.time.as_ref().and_then(|t| serde_json::to_string(t).ok()))
        .and_then(|m| m.manager.clone())
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

    #[test]
    fn the_other_writer_is_named_from_managed_fields() {
        let entries: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> =
            serde_json::from_value(serde_json::json!([
                {"manager": "tdset-operator", "operation": "Apply", "subresource": "scale", "time": "2026-11-24T10:00:02Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "helm", "operation": "Update", "time": "2026-11-24T09:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
                {"manager": "argocd-controller", "operation": "Update", "time": "2026-11-24T10:00:01Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-11-24T10:00:03Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
            ]))
            .unwrap();
        assert_eq!(
            replicas_manager(&entries, "tdset-operator").as_deref(),
            Some("argocd-controller")
        );
        assert_eq!(replicas_manager(&entries[..1], "tdset-operator"), None);
    }
}
