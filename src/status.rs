//! The next `status` of a TDSet, as a pure function of what the schedule said and what was
//! observed. The controller patches it only when it differs from the current one.

pub mod idle;
pub mod warm_up;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;

use crate::api::{
    Condition, GroupStatus, HistoryEntry, IdlePhase, IdleStatus, MAX_HISTORY, RequestWakePhase,
    RequestWakeStatus, TDSetStatus, TargetStatus,
};
use crate::preview::rfc3339;
use crate::schedule::{Count, Evaluation, Transition, Warning};
use crate::workload::hpa::HpaView;
use crate::workload::target::ScaleView;

pub const AVAILABLE: &str = "Available";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
/// With `spec.idle`: whether every signal answers (True), or one cannot (Unknown: never idle).
pub const IDLE_SIGNAL: &str = "IdleSignal";

/// The reasons the conditions give, one constant each (they are API: alerts match on them).
pub mod reason {
    /// An Event's: a scale-up whose count was ready later than its transition.
    pub const SCALE_UP_LATE: &str = "ScaleUpLate";
    /// An Event's: a tier of an ordered group not there by its timeout; the next went anyway.
    pub const TIER_TIMED_OUT: &str = "TierTimedOut";
    // Available
    pub const REPLICAS_READY: &str = "ReplicasReady";
    pub const SCALED_TO_ZERO: &str = "ScaledToZero";
    pub const REPLICAS_NOT_READY: &str = "ReplicasNotReady";
    pub const DEPLOYMENT_MISSING: &str = "DeploymentMissing";
    pub const TARGET_MISSING: &str = "TargetMissing";
    /// The target exists, and another TDSet (or a group) holds it: this one does not
    /// schedule it.
    pub const TARGET_HELD_ELSEWHERE: &str = "TargetHeldElsewhere";
    pub const SCHEDULE_UNKNOWN: &str = "ScheduleUnknown";
    // Progressing
    pub const SCALING: &str = "Scaling";
    pub const SETTLED: &str = "Settled";
    pub const BLOCKED: &str = "Blocked";
    pub const SUSPENDED: &str = "Suspended";
    // Degraded
    pub const AS_EXPECTED: &str = "AsExpected";
    pub const OVERLAPPING_WINDOWS: &str = "OverlappingWindows";
    pub const CLAMPED_TO_MAX_REPLICAS: &str = "ClampedToMaxReplicas";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const FOREIGN_OBJECT: &str = "ForeignObject";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    pub const SCALE_NOT_SUPPORTED: &str = "ScaleNotSupported";
    pub const FORBIDDEN: &str = "Forbidden";
    pub const CONFLICTING_AUTOSCALER: &str = "ConflictingAutoscaler";
    /// The HPA form on an HPA that KEDA makes and keeps (a ScaledObject owns it).
    pub const MANAGED_BY_KEDA: &str = "ManagedByKeda";
    pub const INVALID_TEMPLATE: &str = "InvalidTemplate";
    pub const CONFLICTING_TDSET: &str = "ConflictingTDSet";
    pub const CONFLICTING_WRITER: &str = "ConflictingWriter";
    /// The other writer is a GitOps tool (Argo CD, Flux): the message carries its fix.
    pub const GITOPS_CONFLICT: &str = "GitOpsConflict";
    pub const FORM_NOT_ALLOWED: &str = "FormNotAllowed";
    pub const CALENDAR_NOT_FOUND: &str = "CalendarNotFound";
    pub const CALENDAR_INVALID: &str = "CalendarInvalid";
    pub const TOO_MANY_WORKLOADS: &str = "TooManyWorkloads";
    pub const WAKE_ON_REQUEST_REFUSED: &str = "WakeOnRequestRefused";
    pub const WAKE_PROXY_NOT_READY: &str = "WakeProxyNotReady";
    pub const KEDA_PAUSE_NOT_APPLIED: &str = "KedaPauseNotApplied";
    pub const KEDA_STILL_PAUSED: &str = "KedaStillPaused";
    pub const KEDA_HPA_MISSING: &str = "KedaHpaMissing";
    // IdleSignal
    pub const SIGNALS_ANSWER: &str = "SignalsAnswer";
    /// No source of traffic signals is configured: idleness never sleeps.
    pub const NO_SIGNAL_SOURCE: &str = "NoSignalSource";
    /// Prometheus could not be reached, or took too long.
    pub const PROMETHEUS_UNREACHABLE: &str = "PrometheusUnreachable";
    /// Prometheus refused the query, or its answer could not be used.
    pub const QUERY_FAILED: &str = "QueryFailed";
    /// The answer has no series for a Service: never seen is not idle.
    pub const NO_SERIES: &str = "NoSeries";
    /// Not asked yet (the operator just started, or the TDSet is new).
    pub const NOT_READ_YET: &str = "NotReadYet";
    /// A signal this operator does not read yet (a template, the CPU).
    pub const SIGNAL_NOT_READ: &str = "SignalNotRead";
    /// The last answer is older than a few reads: the reads have fallen behind, or stopped.
    pub const SIGNAL_STALE: &str = "SignalStale";
}

/// Why the operator could not do its job this time (Degraded=True).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The spec passed the schema but cannot be evaluated (e.g. an unknown time zone).
    InvalidSpec(String),
    /// The API server rejected the pod template (its message, verbatim).
    InvalidTemplate(String),
    /// An object with the owned object's name exists and belongs to someone else.
    ForeignObject(String),
    /// The API server refused or failed a request.
    ApiError(String),
    /// The referenced object does not exist (or its kind is not served).
    TargetNotFound(String),
    /// The referenced kind has no `/scale` subresource.
    ScaleNotSupported(String),
    /// RBAC does not let the operator read or scale the target.
    Forbidden(String),
    /// An HPA scales the referenced object; the TDSet should target the HPA instead.
    ConflictingAutoscaler(String),
    /// The referenced HPA is KEDA's (a ScaledObject owns it): KEDA sets its floor, and would
    /// put back any other at once. Nothing is written to it.
    ManagedByKeda(String),
    /// Another TDSet holds the workload (the older claim, or its owner).
    ConflictingTDSet(String),
    /// Some of a group's workloads are held elsewhere (another TDSet, their own controller):
    /// left alone, while the rest of the group is written.
    PartlyHeldElsewhere(String),
    /// Someone else keeps setting the count the operator sets (e.g. a GitOps tool).
    ConflictingWriter(String),
    /// That writer is a GitOps tool's drift correction; the message names the Application,
    /// Kustomization or HelmRelease and the rule that makes it leave the field.
    GitOpsConflict(String),
    /// The platform does not allow this form here (`--pod-forms-in`).
    FormNotAllowed(String),
    /// A calendar the TDSet names does not exist.
    CalendarNotFound(String),
    /// A calendar the TDSet names has dates the operator cannot read (stored before the
    /// schema checked them): its dates do not apply, as if it did not exist.
    CalendarInvalid(String),
    /// A group selects more workloads than one reconcile reads (`--group-max-workloads`):
    /// the first are scheduled, the rest left as they are.
    TooManyWorkloads(String),
    /// A Service `wakeOnRequest` names cannot be woken through (headless, no selector, ...):
    /// its requests are not intercepted; the schedule goes on.
    WakeRefused(String),
    /// No wake proxy pod is ready to stand in for a Service `wakeOnRequest` names: the
    /// workload is not put to sleep (no request could wake it) until one is.
    NoWakeProxy(String),
    /// The schedule's pause is on a KEDA ScaledObject, but KEDA has not paused it.
    KedaPauseNotApplied(String),
    /// The pause is off a KEDA ScaledObject, but KEDA still says it is paused (keda#6982).
    KedaStillPaused(String),
    /// KEDA says a ScaledObject runs, but the HPA it scales the workload with is not there.
    KedaHpaMissing(String),
}

impl Problem {
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::InvalidSpec(_) => reason::INVALID_SPEC,
            Problem::InvalidTemplate(_) => reason::INVALID_TEMPLATE,
            Problem::ForeignObject(_) => reason::FOREIGN_OBJECT,
            Problem::ApiError(_) => reason::RECONCILE_ERROR,
            Problem::TargetNotFound(_) => reason::TARGET_NOT_FOUND,
            Problem::ScaleNotSupported(_) => reason::SCALE_NOT_SUPPORTED,
            Problem::Forbidden(_) => reason::FORBIDDEN,
            Problem::ConflictingAutoscaler(_) => reason::CONFLICTING_AUTOSCALER,
            Problem::ManagedByKeda(_) => reason::MANAGED_BY_KEDA,
            Problem::ConflictingTDSet(_) | Problem::PartlyHeldElsewhere(_) => {
                reason::CONFLICTING_TDSET
            }
            Problem::ConflictingWriter(_) => reason::CONFLICTING_WRITER,
            Problem::GitOpsConflict(_) => reason::GITOPS_CONFLICT,
            Problem::FormNotAllowed(_) => reason::FORM_NOT_ALLOWED,
            Problem::CalendarNotFound(_) => reason::CALENDAR_NOT_FOUND,
            Problem::CalendarInvalid(_) => reason::CALENDAR_INVALID,
            Problem::TooManyWorkloads(_) => reason::TOO_MANY_WORKLOADS,
            Problem::WakeRefused(_) => reason::WAKE_ON_REQUEST_REFUSED,
            Problem::NoWakeProxy(_) => reason::WAKE_PROXY_NOT_READY,
            Problem::KedaPauseNotApplied(_) => reason::KEDA_PAUSE_NOT_APPLIED,
            Problem::KedaStillPaused(_) => reason::KEDA_STILL_PAUSED,
            Problem::KedaHpaMissing(_) => reason::KEDA_HPA_MISSING,
        }
    }

    /// Whether the workload's changes wait for it: a missing or unreadable calendar does not
    /// stop the schedule (its dates just do not apply), nor do a group's workloads held
    /// elsewhere (the rest of the group is written); every other problem does.
    pub fn blocks(&self) -> bool {
        !matches!(
            self,
            Problem::CalendarNotFound(_)
                | Problem::CalendarInvalid(_)
                | Problem::PartlyHeldElsewhere(_)
                | Problem::TooManyWorkloads(_)
                | Problem::WakeRefused(_)
        )
    }

    pub fn message(&self) -> &str {
        match self {
            Problem::InvalidSpec(m)
            | Problem::InvalidTemplate(m)
            | Problem::ForeignObject(m)
            | Problem::ApiError(m)
            | Problem::TargetNotFound(m)
            | Problem::ScaleNotSupported(m)
            | Problem::Forbidden(m)
            | Problem::ConflictingAutoscaler(m)
            | Problem::ManagedByKeda(m)
            | Problem::ConflictingTDSet(m)
            | Problem::PartlyHeldElsewhere(m)
            | Problem::ConflictingWriter(m)
            | Problem::GitOpsConflict(m)
            | Problem::FormNotAllowed(m)
            | Problem::CalendarNotFound(m)
            | Problem::CalendarInvalid(m)
            | Problem::TooManyWorkloads(m)
            | Problem::WakeRefused(m)
            | Problem::NoWakeProxy(m)
            | Problem::KedaPauseNotApplied(m)
            | Problem::KedaStillPaused(m)
            | Problem::KedaHpaMissing(m) => m,
        }
    }
}

/// The workload as observed, in the terms status speaks, whatever the mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// How messages name it, e.g. "Deployment web" or "HorizontalPodAutoscaler web".
    pub what: String,
    /// Replicas running now.
    pub current: i32,
    /// Ready replicas, when the workload reports them.
    pub ready: Option<i32>,
    /// The count the operator drives it to (the HPA floor may be clamped below the schedule).
    pub wanted: i32,
    /// Whether it runs what was asked: the count reached and (for a Deployment) rolled out.
    pub settled: bool,
    /// A hint for a person when it is not ready, e.g. "see `kubectl describe deployment web`".
    pub hint: Option<String>,
}

impl Observed {
    /// An owned Deployment (as its cache or a write returned it), asked for `wanted`.
    pub fn deployment(d: &Deployment, wanted: i32) -> Observed {
        let name = d.metadata.name.clone().unwrap_or_default();
        let s = d.status.as_ref();
        let current = s.and_then(|s| s.replicas).unwrap_or(0);
        let updated = s.and_then(|s| s.updated_replicas).unwrap_or(0);
        let rolled = s.and_then(|s| s.observed_generation) >= d.metadata.generation;
        Observed {
            what: format!("Deployment {name}"),
            current,
            ready: Some(s.and_then(|s| s.ready_replicas).unwrap_or(0)),
            wanted,
            settled: rolled && current == wanted && updated == wanted,
            hint: Some(format!("see `kubectl describe deployment {name}`")),
        }
    }

    /// A target read through `/scale`, asked for `wanted`.
    pub fn scale(kind: &str, name: &str, v: &ScaleView, wanted: i32) -> Observed {
        Observed {
            what: format!("{kind} {name}"),
            current: v.status_replicas,
            ready: v.ready_replicas,
            wanted,
            settled: v.spec_replicas == wanted && v.status_replicas == wanted,
            hint: Some(format!(
                "see `kubectl describe {} {name}`",
                kind.to_lowercase()
            )),
        }
    }

    /// An HPA whose floor is `floor` (0: its target asleep, `target_replicas` from `/scale`),
    /// and its target's ready replicas (`target_ready`), when the target's kind reports them.
    pub fn hpa(
        h: &HpaView,
        floor: i32,
        target_replicas: Option<i32>,
        target_ready: Option<i32>,
    ) -> Observed {
        let current = if floor == 0 {
            target_replicas.unwrap_or(0)
        } else {
            h.current_replicas.unwrap_or(0)
        };
        Observed {
            what: format!("HorizontalPodAutoscaler {}", h.name),
            current,
            ready: target_ready,
            wanted: floor,
            settled: if floor == 0 {
                current == 0
            } else {
                h.min_replicas == Some(floor) && current >= floor
            },
            hint: Some(format!("see `kubectl describe hpa {}`", h.name)),
        }
    }
}

/// Why there is no workload to report on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub reason: &'static str,
    pub message: String,
}

/// Something worth a Degraded=False reason and a Warning that does not stop the TDSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The scheduled count is above the HPA's maxReplicas; the floor is maxReplicas.
    /// `what`: the autoscaler ("HorizontalPodAutoscaler web"), `field`: its maximum's field.
    Clamped {
        what: String,
        field: &'static str,
        asked: i32,
        max: i32,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::Clamped {
                what,
                field,
                asked,
                max,
            } => write!(
                f,
                "the schedule asks for {asked} replicas but {what} allows at most {max}; \
                 its floor is set to {max}. Raise {field} of {what} or lower the schedule"
            ),
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
    /// When the next change is written, when that is before `next` (a rise, `warmUp`).
    pub next_write: Option<DateTime<Utc>>,
    pub warnings: &'a [Warning],
    pub notices: &'a [Notice],
    /// The workload as observed, or why it could not be.
    pub workload: Result<&'a Observed, &'a Missing>,
    /// With `scaleTargetRef`: what the operator sets on which object.
    pub target: Option<&'a TargetStatus>,
    /// With `scaleTargetSelector`: the group's counts.
    pub group: Option<&'a GroupStatus>,
    /// What the schedule removes now, when the baseline is known.
    pub saved: Option<crate::workload::savings::Saved>,
    pub problem: Option<&'a Problem>,
    /// `spec.suspend`: the operator observes and reports, and writes nothing to the workload.
    pub suspended: bool,
    /// The change this reconcile made to the workload's count, for `history`.
    pub change: Option<HistoryEntry>,
    /// HPA form: the ceiling in force (`desiredMaxReplicas`).
    pub ceiling: Option<i32>,
    /// The shard this operator is (`status.shard`); unsharded, the field is left as it was.
    pub shard: Option<&'a str>,
    /// With `spec.wakeOnRequest` and a request wake-up on record: whether it is in force.
    pub requested: Option<bool>,
    /// With `spec.idle`: where idleness stands.
    pub idle: Option<&'a IdleStatus>,
    pub now: DateTime<Utc>,
}

/// What one reconcile reports, all of it decided here: the next status (with its scale-ups
/// found ready marked, see `warm_up::settle`), the Warning a change of Degraded brings, and
/// what the wait until the next look depends on.
pub struct Reported {
    pub status: TDSetStatus,
    /// The Warning a change of `Degraded` brings: its reason and message.
    pub degraded: Option<(String, String)>,
    /// The scale-ups found ready, newest first, each with its Warning if it was late.
    pub risen: Vec<(warm_up::Rise, Option<String>)>,
    /// A new lead was learnt: the next scale-up's write moved.
    pub relearnt: bool,
    /// When the newest scale-up was written, while it is not yet ready.
    pub awaiting: Option<DateTime<Utc>>,
}

/// What a reconcile at `now` reports from `i`; `readiness` and `since` as in `warm_up::Seen`.
pub fn reported(
    i: Inputs<'_>,
    spec: &crate::api::TDSetSpec,
    readiness: warm_up::Readiness,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Reported {
    let mut status = next_status(&i);
    let degraded = degraded_warning(i.previous, &status);
    let seen = warm_up::Seen {
        readiness,
        written_now: i.change.is_some(),
        since,
        now,
    };
    let risen = warm_up::settle(spec, &mut status, seen);
    let awaiting = warm_up::awaiting(&status);
    let relearnt = risen.iter().any(|r| r.sampled)
        && status.warm_up.as_ref().map(|w| &w.lead)
            != (i.previous.and_then(|p| p.warm_up.as_ref())).map(|w| &w.lead);
    let risen = (risen.into_iter())
        .map(|r| {
            let late = warm_up::late_warning(&r, status.warm_up.as_ref());
            (r, late)
        })
        .collect();
    Reported {
        status,
        degraded,
        risen,
        relearnt,
        awaiting,
    }
}

/// The Warning (reason, message) a change of `Degraded` from `previous` to `new` brings: a
/// problem that persists is said once, not every reconcile; a return to `AsExpected` is not
/// said at all.
pub fn degraded_warning(
    previous: Option<&TDSetStatus>,
    new: &TDSetStatus,
) -> Option<(String, String)> {
    let of = |s: Option<&TDSetStatus>| {
        find(s, DEGRADED).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (old, new) = (of(previous), of(Some(new)));
    if old == new {
        return None;
    }
    let (state, reason, message) = new?;
    (state == "True" || reason != reason::AS_EXPECTED).then_some((reason, message))
}

pub fn next_status(i: &Inputs<'_>) -> TDSetStatus {
    let seen = i.workload.ok();
    let count = i.evaluation.map(|e| e.count());
    let desired = count.and_then(Count::replicas);
    let mut conditions = vec![
        condition(i, AVAILABLE, available(i, count)),
        condition(i, PROGRESSING, progressing(i, count)),
        condition(i, DEGRADED, degraded(i)),
    ];
    conditions.extend(i.idle.map(|idle| idle_signal(i, idle)));
    TDSetStatus {
        observed_generation: i.generation,
        desired_replicas: desired,
        replicas: seen.map(|o| o.current),
        ready_replicas: seen.and_then(|o| o.ready),
        active_window: i.evaluation.and_then(|e| e.window_label.clone()),
        active_override: i.evaluation.and_then(|e| e.override_label.clone()),
        next_transition_time: i.next.map(|n| rfc3339(n.at)),
        next_replicas: i.next.and_then(|n| n.count().replicas()),
        desired_max_replicas: i.ceiling,
        next_max_replicas: i.next.and_then(|n| n.ceiling),
        next_write_time: i
            .next_write
            .filter(|w| i.next.is_some_and(|n| *w < n.at))
            .map(rfc3339),
        target: i.target.cloned(),
        group: i.group.cloned(),
        savings: i.saved.map(|s| s.status()),
        conditions,
        shard: i
            .shard
            .map(str::to_string)
            .or_else(|| i.previous.and_then(|p| p.shard.clone())),
        idle: i.idle.cloned(),
        // Kept as it was; `warm_up::settle` brings it up to date.
        warm_up: i.previous.and_then(|p| p.warm_up.clone()),
        history: match &i.change {
            Some(change) => recorded(i.previous, change.clone()),
            None => i.previous.map(|p| p.history.clone()).unwrap_or_default(),
        },
        // The wake endpoint's fields as they were (never written back: see the lane's sink).
        request_wake: {
            let previous = i.previous.and_then(|p| p.request_wake.clone());
            match request_wake_phase(i) {
                Some(phase) => Some(RequestWakeStatus {
                    phase: Some(phase),
                    ..previous.unwrap_or_default()
                }),
                None => previous,
            }
        },
    }
}

/// What the reconcile makes of the request wake-up on record (only `phase` is the
/// reconcile's: the rest of `status.requestWake` is the wake endpoint's). Awake once every
/// replica the wake-up asked for is ready; superseded while the schedule has the workloads
/// awake anyway (a window, an override); ended once it is over.
fn request_wake_phase(i: &Inputs<'_>) -> Option<RequestWakePhase> {
    let in_force = i.requested?;
    let woken = i.evaluation.is_some_and(|e| e.woken_until.is_some());
    Some(match (in_force, woken) {
        (false, _) => RequestWakePhase::Ended,
        (true, false) => RequestWakePhase::Superseded,
        (true, true) => {
            let seen = i.workload.ok();
            let ready = seen.and_then(|o| o.ready).unwrap_or(0);
            let current = seen.map_or(0, |o| o.current);
            if current > 0 && ready >= current {
                RequestWakePhase::Awake
            } else {
                RequestWakePhase::Waking
            }
        }
    })
}

/// `previous`'s history with `entry` recorded: newest first, at most `MAX_HISTORY`. An entry
/// for the same instant that has not been applied (a failed attempt) is replaced, and its
/// failure kept as the message of the one that replaces it.
pub fn recorded(previous: Option<&TDSetStatus>, mut entry: HistoryEntry) -> Vec<HistoryEntry> {
    let mut history = previous.map(|p| p.history.clone()).unwrap_or_default();
    if let Some(first) = history.first()
        && first.at == entry.at
        && first.applied_at.is_none()
    {
        if entry.message.is_none() {
            entry.message = first.message.clone();
        }
        entry.from = entry.from.or(first.from);
        history.remove(0);
    }
    history.insert(0, entry);
    history.truncate(MAX_HISTORY);
    history
}

/// A change the history does not have although it landed: the count the schedule asks for
/// (`count`) is not the one the newest entry set, and the reconcile read the workload at it
/// with nothing to write. The reconcile that wrote it stopped before its status was written
/// (the operator restarted, or the leader changed: statuses follow the writes), and a status
/// written since without an entry (a reconcile that found a cache not yet synced) does not
/// hide it: the history is what is compared. Recorded once, saying so, with no `appliedAt`
/// (when it landed is not known; a warm-up does not sample it). With no entry at all, only a
/// request's wake-up is recorded so: the wake endpoint wrote it before it answered.
pub fn found_applied(
    previous: Option<&TDSetStatus>,
    count: Option<i32>,
    reason: String,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<HistoryEntry> {
    let p = previous?;
    let after = count?;
    let before = match p.history.first() {
        Some(newest) if newest.to == Some(after) => return None,
        Some(newest) => newest.to,
        None if unrecorded_wake_up(p) => None,
        None => return None,
    };
    Some(HistoryEntry {
        at: rfc3339(at),
        applied_at: None,
        ready_at: None,
        from: before,
        to: Some(after),
        level: None,
        reason,
        message: Some(format!(
            "found applied at {}, with nothing left to write: the write that made it landed before a restart or a change of leader lost its status (or someone else set the count)",
            now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )),
    })
}

/// A request's wake-up on record that no history entry since its start records.
fn unrecorded_wake_up(p: &TDSetStatus) -> bool {
    let parse = |t: &str| crate::preview::parse_rfc3339(t);
    let Some(since) = (p.request_wake.as_ref())
        .and_then(|w| w.since.as_deref())
        .and_then(parse)
    else {
        return false;
    };
    !p.history.iter().any(|e| {
        e.reason.starts_with("woken by a request") && parse(&e.at).is_some_and(|at| at >= since)
    })
}

/// The failed attempt at a transition that was due (its write's instant, from `previous`, has
/// passed and the reconcile failed), for `history`: a scale-up written ahead (`warmUp`) fails
/// at `nextWriteTime`, before its transition, and is recorded then, at its transition.
pub fn failed_transition(
    previous: Option<&TDSetStatus>,
    problem: &Problem,
    now: DateTime<Utc>,
) -> Option<HistoryEntry> {
    let p = previous?;
    // A change of an HPA's ceiling alone is no change of count (its failure is reported
    // as Degraded and in an Event).
    if p.next_replicas == p.desired_replicas && p.next_max_replicas != p.desired_max_replicas {
        return None;
    }
    let at = p.next_transition_time.as_deref()?;
    let write = p.next_write_time.as_deref().unwrap_or(at);
    crate::preview::parse_rfc3339(write).filter(|t| *t <= now)?;
    Some(HistoryEntry {
        at: at.to_string(),
        applied_at: None,
        ready_at: None,
        // The count set before, as a change that landed records it (its spec count, not the
        // pods it had then: those lag behind the workload's controller, minutes under load);
        // a group's is the sum of its workloads' pods.
        from: match p.group {
            None => p.desired_replicas.or(p.replicas),
            Some(_) => p.replicas,
        },
        to: Some(p.next_replicas?),
        level: None,
        reason: "the scheduled change".into(),
        message: Some(clipped(&format!(
            "{}: {}",
            problem.reason(),
            problem.message()
        ))),
    })
}

/// At most `MAX_HISTORY_MESSAGE` characters: ten entries must stay small in every status write.
pub fn clipped(message: &str) -> String {
    const MAX_HISTORY_MESSAGE: usize = 512;
    if message.chars().count() <= MAX_HISTORY_MESSAGE {
        return message.to_string();
    }
    let mut out: String = message.chars().take(MAX_HISTORY_MESSAGE - 1).collect();
    out.push('…');
    out
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
    if let Some(failed) = failed_transition(previous, problem, now) {
        status.history = recorded(previous, failed);
    }
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

/// "3 replicas", or what `own` means.
fn count_text(c: Count) -> String {
    match c {
        Count::Replicas(n) => format!("{n} replicas"),
        Count::Own => "each workload's own count".into(),
    }
}

fn available(i: &Inputs<'_>, desired: Option<Count>) -> Verdict {
    let o = match i.workload {
        Err(m) => return (false, m.reason, m.message.clone()),
        Ok(o) => o,
    };
    match desired {
        None => (
            o.current > 0,
            reason::SCHEDULE_UNKNOWN,
            "the schedule cannot be evaluated".into(),
        ),
        Some(Count::Replicas(0)) => (
            true,
            reason::SCALED_TO_ZERO,
            "the schedule wants 0 replicas now".into(),
        ),
        Some(_) => {
            let have = o.ready.unwrap_or(o.current);
            let counted = if o.ready.is_some() {
                "ready"
            } else {
                "running"
            };
            if have >= o.wanted {
                (
                    true,
                    reason::REPLICAS_READY,
                    format!("{have}/{} replicas {counted}", o.wanted),
                )
            } else {
                let hint = o
                    .hint
                    .as_deref()
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default();
                (
                    false,
                    reason::REPLICAS_NOT_READY,
                    format!("{have}/{} replicas {counted}{hint}", o.wanted),
                )
            }
        }
    }
}

fn progressing(i: &Inputs<'_>, desired: Option<Count>) -> Verdict {
    if i.suspended {
        let wants = desired.map_or(String::new(), |d| {
            format!("; the schedule wants {} now", count_text(d))
        });
        return (
            false,
            reason::SUSPENDED,
            format!("spec.suspend is true: the operator writes nothing to the workload{wants}"),
        );
    }
    if let Some(p) = i.problem.filter(|p| p.blocks()) {
        return (
            false,
            reason::BLOCKED,
            format!(
                "changes are on hold until Degraded ({}) is resolved",
                p.reason()
            ),
        );
    }
    let Some(desired) = desired else {
        return (
            false,
            reason::BLOCKED,
            "the schedule cannot be evaluated".into(),
        );
    };
    let o = match i.workload {
        Ok(o) if o.settled => o,
        Ok(o) => {
            return (
                true,
                reason::SCALING,
                format!(
                    "scaling {} to {} replicas ({} now)",
                    o.what, o.wanted, o.current
                ),
            );
        }
        Err(_) => {
            return (
                true,
                reason::SCALING,
                format!("creating the workload for {}", count_text(desired)),
            );
        }
    };
    let next = match i.next {
        Some(n) => format!(
            "; next change at {} to {}",
            rfc3339(n.at),
            count_text(n.count())
        ),
        None => "; no change is scheduled".into(),
    };
    (
        false,
        reason::SETTLED,
        format!("{} replicas as scheduled{next}", o.wanted),
    )
}

fn degraded(i: &Inputs<'_>) -> Verdict {
    if let Some(p) = i.problem {
        return (true, p.reason(), p.message().to_string());
    }
    if !i.notices.is_empty() {
        let text = i
            .notices
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return (false, reason::CLAMPED_TO_MAX_REPLICAS, text);
    }
    if !i.warnings.is_empty() {
        let text = i
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return (false, reason::OVERLAPPING_WINDOWS, text);
    }
    (
        false,
        reason::AS_EXPECTED,
        "the schedule is valid and applied".into(),
    )
}

fn condition(i: &Inputs<'_>, type_: &str, verdict: Verdict) -> Condition {
    make_condition(i.previous, type_, verdict, i.generation, i.now)
}

/// `IdleSignal`: True while every signal answers; Unknown, with the reason, while one cannot
/// (then idleness sleeps nothing).
fn idle_signal(i: &Inputs<'_>, idle: &IdleStatus) -> Condition {
    let (status, reason, message) = match idle.phase {
        IdlePhase::Unknown => {
            let why: Vec<String> = (idle.signals.iter())
                .filter_map(|s| Some(format!("{}: {}", s.signal, s.unknown.as_deref()?)))
                .collect();
            (
                "Unknown",
                idle.reason.as_deref().unwrap_or(reason::NO_SIGNAL_SOURCE),
                format!(
                    "a signal cannot answer, so idleness puts nothing to sleep: {}",
                    why.join("; ")
                ),
            )
        }
        phase => (
            "True",
            reason::SIGNALS_ANSWER,
            format!("every signal answers; idleness: {phase:?}"),
        ),
    };
    condition_of(
        i.previous,
        IDLE_SIGNAL,
        (status, reason, message),
        i.generation,
        i.now,
    )
}

fn make_condition(
    previous: Option<&TDSetStatus>,
    type_: &str,
    (status, reason, message): Verdict,
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Condition {
    let status = if status { "True" } else { "False" };
    condition_of(previous, type_, (status, reason, message), generation, now)
}

/// A condition with its status as given ("True", "False", "Unknown"); its transition time
/// moves only when the status does.
fn condition_of(
    previous: Option<&TDSetStatus>,
    type_: &str,
    (status, reason, message): (&str, &str, String),
    generation: Option<i64>,
    now: DateTime<Utc>,
) -> Condition {
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
mod tests;
