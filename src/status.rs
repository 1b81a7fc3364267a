//! The next `status` of a TDSet, as a pure function of what the schedule said and what was
//! observed. The controller patches it only when it differs from the current one.

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;

use crate::api::{Condition, TDSetStatus};
use crate::preview::rfc3339;
use crate::schedule::{Evaluation, Transition, Warning};

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

/// Why the operator could not do its job this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The spec passed the schema but cannot be evaluated (e.g. an unknown time zone).
    InvalidSpec(String),
    /// An object with the owned object's name exists and belongs to someone else.
    ForeignObject(String),
    /// The API server refused or failed a request.
    ApiError(String),
}

impl Problem {
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::InvalidSpec(_) => "InvalidSpec",
            Problem::ForeignObject(_) => "ForeignObject",
            Problem::ApiError(_) => "ReconcileError",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Problem::InvalidSpec(m) | Problem::ForeignObject(m) | Problem::ApiError(m) => m,
        }
    }
}

/// Everything the next status is computed from.
pub struct Inputs<'a> {
    pub previous: Option<&'a TDSetStatus>,
    pub generation: Option<i64>,
    /// `None` when the spec could not be evaluated.
    pub evaluation: Option<&'a Evaluation>,
    pub next: Option<&'a Transition>,
    pub warnings: &'a [Warning],
    /// The owned Deployment as last read.
    pub deployment: Option<&'a Deployment>,
    pub problem: Option<&'a Problem>,
    pub now: DateTime<Utc>,
}

pub fn next_status(i: &Inputs<'_>) -> TDSetStatus {
    let observed = i.deployment.and_then(|d| d.status.as_ref());
    let current = i
        .deployment
        .map(|_| observed.and_then(|s| s.replicas).unwrap_or(0));
    let ready = i
        .deployment
        .map(|_| observed.and_then(|s| s.ready_replicas).unwrap_or(0));
    let desired = i.evaluation.map(|e| e.replicas);
    let conditions = vec![
        condition(i, AVAILABLE, available(i, desired, ready)),
        condition(i, PROGRESSING, progressing(i, desired)),
        condition(i, DEGRADED, degraded(i)),
    ];
    TDSetStatus {
        observed_generation: i.generation,
        desired_replicas: desired,
        replicas: current,
        ready_replicas: ready,
        active_window: i.evaluation.and_then(|e| e.window_label.clone()),
        next_transition_time: i.next.map(|n| rfc3339(n.at)),
        next_replicas: i.next.map(|n| n.replicas),
        conditions,
    }
}

/// The status after a failed reconcile: `previous` with only Degraded set to the problem.
/// Nothing else was observed, so nothing else is changed (a transient API error must not make
/// status claim the Deployment is missing or forget the active window).
pub fn with_failure(
    previous: Option<&TDSetStatus>,
    generation: Option<i64>,
    problem: &Problem,
    now: DateTime<Utc>,
) -> TDSetStatus {
    let mut status = previous.cloned().unwrap_or_default();
    let degraded = make_condition(
        previous,
        DEGRADED,
        (true, problem.reason(), problem.message().to_string()),
        generation,
        now,
    );
    match status.conditions.iter_mut().find(|c| c.type_ == DEGRADED) {
        Some(c) => *c = degraded,
        None => status.conditions.push(degraded),
    }
    status
}

type Verdict = (bool, &'static str, String);

fn available(i: &Inputs<'_>, desired: Option<i32>, ready: Option<i32>) -> Verdict {
    let name = deployment_name(i);
    match (i.deployment, desired, ready) {
        (None, _, _) => (
            false,
            "DeploymentMissing",
            format!("Deployment {name} does not exist yet"),
        ),
        (Some(_), Some(0), _) => (
            true,
            "ScaledToZero",
            "the schedule wants 0 replicas now".into(),
        ),
        (Some(_), Some(d), Some(r)) if r >= d => {
            (true, "ReplicasReady", format!("{r}/{d} replicas ready"))
        }
        (Some(_), Some(d), r) => (
            false,
            "ReplicasNotReady",
            format!(
                "{}/{d} replicas ready; see `kubectl describe deployment {name}`",
                r.unwrap_or(0)
            ),
        ),
        (Some(_), None, r) => (
            r.unwrap_or(0) > 0,
            "ScheduleUnknown",
            "the schedule cannot be evaluated".into(),
        ),
    }
}

fn progressing(i: &Inputs<'_>, desired: Option<i32>) -> Verdict {
    if let Some(p) = i.problem {
        return (
            false,
            "Blocked",
            format!(
                "changes are on hold until Degraded ({}) is resolved",
                p.reason()
            ),
        );
    }
    let Some(desired) = desired else {
        return (false, "Blocked", "the schedule cannot be evaluated".into());
    };
    let d = i.deployment;
    let status = d.and_then(|d| d.status.as_ref());
    let current = status.and_then(|s| s.replicas).unwrap_or(0);
    let updated = status.and_then(|s| s.updated_replicas).unwrap_or(0);
    let rolled =
        d.is_some_and(|d| status.and_then(|s| s.observed_generation) >= d.metadata.generation);
    if d.is_none() || !rolled || current != desired || updated != desired {
        return (
            true,
            "Scaling",
            format!("scaling the Deployment to {desired} replicas ({current} now)"),
        );
    }
    let next = match i.next {
        Some(n) => format!(
            "; next change at {} to {} replicas",
            rfc3339(n.at),
            n.replicas
        ),
        None => "; no change is scheduled".into(),
    };
    (
        false,
        "Settled",
        format!("{desired} replicas as scheduled{next}"),
    )
}

fn degraded(i: &Inputs<'_>) -> Verdict {
    if let Some(p) = i.problem {
        return (true, p.reason(), p.message().to_string());
    }
    if !i.warnings.is_empty() {
        let text = i
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return (false, "OverlappingWindows", text);
    }
    (
        false,
        "AsExpected",
        "the schedule is valid and applied".into(),
    )
}

fn deployment_name(i: &Inputs<'_>) -> String {
    i.deployment
        .and_then(|d| d.metadata.name.clone())
        .unwrap_or_else(|| "(same name as the TDSet)".into())
}

fn condition(i: &Inputs<'_>, type_: &str, verdict: Verdict) -> Condition {
    make_condition(i.previous, type_, verdict, i.generation, i.now)
}

fn make_condition(
    previous: Option<&TDSetStatus>,
    type_: &str,
    (status, reason, message): Verdict,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = match find(previous, type_) {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => rfc3339(now),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// The condition of `type_` in a status, if present.
pub fn find<'a>(status: Option<&'a TDSetStatus>, type_: &str) -> Option<&'a Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(
        prev: Option<&'a TDSetStatus>,
        eval: &'a Evaluation,
        problem: Option<&'a Problem>,
        now: &str,
    ) -> Inputs<'a> {
        Inputs {
            previous: prev,
            generation: Some(1),
            evaluation: Some(eval),
            next: None,
            warnings: &[],
            deployment: None,
            problem,
            now: DateTime::parse_from_rfc3339(now)
                .unwrap()
                .with_timezone(&Utc),
        }
    }

    #[test]
    fn a_failed_reconcile_changes_only_degraded() {
        let eval = Evaluation {
            replicas: 4,
            window: Some(0),
            window_label: Some("office".into()),
        };
        let ok = next_status(&inputs(None, &eval, None, "2026-01-01T00:00:00Z"));
        let p = Problem::ApiError("connection refused".into());
        let failed = with_failure(Some(&ok), Some(1), &p, utc("2026-01-01T00:05:00Z"));
        assert_eq!(failed.desired_replicas, Some(4));
        assert_eq!(failed.active_window.as_deref(), Some("office"));
        for type_ in [AVAILABLE, PROGRESSING] {
            assert_eq!(find(Some(&failed), type_), find(Some(&ok), type_));
        }
        let d = find(Some(&failed), DEGRADED).unwrap();
        assert_eq!(
            (d.status.as_str(), d.reason.as_str(), d.message.as_str()),
            ("True", "ReconcileError", "connection refused")
        );
        assert_eq!(d.last_transition_time, "2026-01-01T00:05:00Z");
        // With no status yet, the failure is still recorded.
        let first = with_failure(None, Some(1), &p, utc("2026-01-01T00:05:00Z"));
        assert_eq!(first.conditions.len(), 1);
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn last_transition_time_moves_only_when_status_flips() {
        let eval = Evaluation {
            replicas: 2,
            window: None,
            window_label: None,
        };
        let s1 = next_status(&inputs(None, &eval, None, "2026-01-01T00:00:00Z"));
        let degraded1 = find(Some(&s1), DEGRADED).unwrap().clone();
        assert_eq!(degraded1.status, "False");
        let s2 = next_status(&inputs(Some(&s1), &eval, None, "2026-01-01T01:00:00Z"));
        assert_eq!(
            s1, s2,
            "same inputs later: identical status, so nothing to write"
        );
        let p = Problem::InvalidSpec("spec.timeZone: unknown".into());
        let s3 = next_status(&inputs(Some(&s2), &eval, Some(&p), "2026-01-01T02:00:00Z"));
        let d3 = find(Some(&s3), DEGRADED).unwrap();
        assert_eq!(
            (d3.status.as_str(), d3.reason.as_str()),
            ("True", "InvalidSpec")
        );
        assert_eq!(d3.last_transition_time, "2026-01-01T02:00:00Z");
    }
}
