//! What a form says it did, and whether it may write.

use std::time::Duration;

use crate::api::{GroupStatus, TargetStatus};
use crate::status::{Missing, Notice, Observed, Problem};
use crate::workload::savings::Saved;

/// Whether a reconcile may write to the workload (`spec.suspend` says no).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    IfDifferent,
    Never,
}

/// What observing and applying a workload found, for status and the requeue.
pub(crate) struct Outcome {
    pub workload: std::result::Result<Observed, Missing>,
    pub problem: Option<Problem>,
    pub notices: Vec<Notice>,
    pub target: Option<TargetStatus>,
    /// Look again sooner than the schedule needs (e.g. a target that does not exist yet and
    /// whose kind is not watched).
    pub retry: Option<Duration>,
    /// When this reconcile changed the workload's replica count (or an HPA's floor, a
    /// group's workloads), or a group's change failed: what, for `status.history`.
    pub scaled: Option<Scaled>,
    /// With `scaleTargetSelector`: the group's counts.
    pub group: Option<GroupStatus>,
    /// Some of its writes failed (others landed, and are reported): looked at again with the
    /// error policy's backoff, not at a fixed pace.
    pub failed: bool,
    /// What the schedule removes now, when the baseline is known.
    pub saved: Option<Saved>,
    /// HPA form: the ceiling in force as the form writes it (raised to the floor, held under
    /// the higher one while a rise is written ahead), for `status.desiredMaxReplicas`.
    pub ceiling: Option<i32>,
    /// The workload was read at the count the schedule asks for, with nothing to write (a
    /// change the history lacks was then made before a restart: `status::found_applied`).
    pub at_count: bool,
}

/// A change of the count, for `status.history`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scaled {
    /// The count before.
    pub from: i32,
    /// The count after; `None`: the schedule's level. A group's are its held workloads'
    /// totals (before and after the writes that landed), one unit for both.
    pub to: Option<i32>,
    /// Some of it did not land: why (a group, whose writes go one per workload).
    pub failed: Option<String>,
    /// Whether any of it landed.
    pub landed: bool,
}

impl Scaled {
    /// The one write of a single workload's form landed, from `from` to the schedule's level.
    pub(crate) fn from_count(from: i32) -> Scaled {
        Scaled {
            from,
            to: None,
            failed: None,
            landed: true,
        }
    }
}

impl Outcome {
    /// Looked at again within `wait` at the latest (sooner where it already is).
    pub(crate) fn retry_within(&mut self, wait: Duration) {
        self.retry = Some(self.retry.map_or(wait, |r| r.min(wait)));
    }

    /// The workload as observed, nothing else to say.
    pub(crate) fn observed(workload: std::result::Result<Observed, Missing>) -> Outcome {
        Outcome {
            workload,
            problem: None,
            notices: vec![],
            target: None,
            retry: None,
            scaled: None,
            group: None,
            failed: false,
            saved: None,
            ceiling: None,
            at_count: false,
        }
    }

    /// Nothing observed: the workload is missing for `missing`, and `problem` is reported.
    pub(crate) fn missing(missing: Missing, problem: Option<Problem>) -> Outcome {
        Outcome {
            problem,
            ..Outcome::observed(Err(missing))
        }
    }
}

/// What a request or a stage came to, on two channels: `Err` is an error the reconcile returns
/// (retried with the error policy's backoff); `Ok(Err(problem))` is a problem the TDSet reports
/// and waits out (the target is gone, RBAC forbids the write: retrying at once would not help).
pub(crate) type Answer<T> = crate::error::Result<std::result::Result<T, Problem>>;
