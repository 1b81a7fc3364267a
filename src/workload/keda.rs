//! A KEDA ScaledObject as the target: KEDA owns its workload's HPA and puts back any floor
//! written there, so the schedule is written where KEDA keeps it.
//!
//! - Asleep (a scheduled 0): KEDA's pause, both annotations at once
//!   (`autoscaling.keda.sh/paused-replicas: "0"` and `autoscaling.keda.sh/paused: "true"`;
//!   `paused-replicas` alone let the workload bounce 0 to 1 before both were set, keda#5165).
//!   KEDA then deletes its HPA and scales the workload to 0. The user's own pause is recorded
//!   first and given back in the morning.
//! - Awake: the pause taken off (or the user's given back), the scheduled count as
//!   `spec.minReplicaCount` (KEDA scales a workload below its minimum up to it, also from 0),
//!   a scheduled ceiling as `spec.maxReplicaCount`; the user's own values recorded and given
//!   back, as with an HPA's floor.
//!
//! Every write is a merge patch guarded by the ScaledObject's uid, as an HPA's `maxReplicas`
//! is: an apply that later left a field out would take it off the object, where the user's own
//! value (which a forced apply would have taken over) must come back.
//!
//! KEDA does not watch the workload: a count changed while paused (a Helm upgrade) stays until
//! something makes KEDA reconcile the ScaledObject. A change of the pause annotation's value
//! does, so the drift is put right by spelling `paused` the other way (`true` / `True`, the same
//! to KEDA), never through `/scale`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::{KedaPause, ScaleTargetRef};
use crate::workload::owned::FIELD_MANAGER;

pub const GROUP: &str = "keda.sh";
pub const KIND: &str = "ScaledObject";
pub const PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";
pub const PAUSED: &str = "autoscaling.keda.sh/paused";
/// The field manager a user's own pause is given back under: not the operator's, so that the
/// pause reads as the user's afterwards (and is never taken for the schedule's).
pub const GIVE_BACK_MANAGER: &str = "tdset-operator-give-back";
/// KEDA's defaults for an unset `minReplicaCount` and `maxReplicaCount`.
pub const DEFAULT_MIN: i32 = 0;
pub const DEFAULT_MAX: i32 = 100;
/// The first KEDA release that applies a pause in one reconcile (keda PR #7214); before it a
/// pause was often not applied at all.
pub const ONE_STEP_PAUSE: (u32, u32) = (2, 20);
/// The longest annotation value recorded to be given back (a pause is a number or a boolean).
pub const MAX_RECORDED: usize = 63;

/// What the operator reads of a ScaledObject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScaledObjectView {
    pub name: String,
    pub uid: Option<String>,
    /// The revision it was read at: a write decided by what it was then (a pause recorded
    /// from it, a turn of its spelling) is refused if someone wrote it since.
    pub resource_version: Option<String>,
    /// Its pause annotations as they are now.
    pub pause: KedaPause,
    /// Whether the operator's field manager wrote them (owns either in `managedFields`): a
    /// pause of the schedule's, as opposed to one of the user's that looks the same.
    pub pause_ours: bool,
    pub min_replica_count: Option<i32>,
    pub max_replica_count: Option<i32>,
    /// `spec.idleReplicaCount`: where set, KEDA keeps the workload there (0) while no trigger
    /// is active, below `minReplicaCount`.
    pub idle_replica_count: Option<i32>,
    /// `spec.scaleTargetRef`, defaulted as KEDA defaults it (`apps/v1` Deployment).
    pub target: ScaleTargetRef,
    /// `status.conditions[type=Paused]`: None until KEDA has said either way.
    pub paused: Option<bool>,
    /// `status.pausedReplicaCount`.
    pub paused_replica_count: Option<i32>,
    /// `status.hpaName`.
    pub hpa_name: Option<String>,
    /// `spec.advanced.horizontalPodAutoscalerConfig.name`: the HPA's name where the user chose it.
    pub hpa_name_set: Option<String>,
}

impl ScaledObjectView {
    /// Reads the view from a ScaledObject as the API server returns it (any version of KEDA's
    /// schema: only the fields named here are read).
    pub fn from_object(object: &Value) -> ScaledObjectView {
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let n = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_i64)
                .and_then(|v| i32::try_from(v).ok())
        };
        let annotation = |key: &str| {
            object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let paused = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Paused"))
            })
            .and_then(|c| match c.get("status").and_then(Value::as_str) {
                Some("True") => Some(true),
                Some("False") => Some(false),
                _ => None,
            });
        let owns = |entry: &Value, key: &str| {
            entry.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
                && entry
                    .pointer("/fieldsV1/f:metadata/f:annotations")
                    .and_then(|a| a.get(format!("f:{key}")))
                    .is_some()
        };
        let pause_ours = object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| {
                entries
                    .iter()
                    .any(|e| owns(e, PAUSED_REPLICAS) || owns(e, PAUSED))
            });
        ScaledObjectView {
            name: s("/metadata/name").unwrap_or_default(),
            uid: s("/metadata/uid"),
            resource_version: s("/metadata/resourceVersion"),
            pause: KedaPause {
                paused_replicas: annotation(PAUSED_REPLICAS),
                paused: annotation(PAUSED),
            },
            pause_ours,
            min_replica_count: n("/spec/minReplicaCount"),
            max_replica_count: n("/spec/maxReplicaCount"),
            idle_replica_count: n("/spec/idleReplicaCount"),
            target: target_of(object),
            paused,
            paused_replica_count: n("/status/pausedReplicaCount"),
            hpa_name: s("/status/hpaName"),
            hpa_name_set: s("/spec/advanced/horizontalPodAutoscalerConfig/name"),
        }
    }

    pub fn min(&self) -> i32 {
        self.min_replica_count.unwrap_or(DEFAULT_MIN)
    }

    /// The view once `plan`'s writes landed.
    pub fn apply(&mut self, plan: &Plan) {
        if let Some(p) = &plan.pause {
            self.pause = p.clone();
            self.pause_ours = p.paused_replicas.is_some() || p.paused.is_some();
        }
        if let Some(n) = plan.min {
            self.min_replica_count = Some(n);
        }
        if let Some(n) = plan.max {
            self.max_replica_count = Some(n);
        }
    }

    pub fn max(&self) -> i32 {
        self.max_replica_count.unwrap_or(DEFAULT_MAX)
    }

    /// The HPA KEDA makes for it while it runs: as its status names it, else as KEDA names it
    /// (the user's name, or `keda-hpa-<name>`).
    pub fn hpa(&self) -> String {
        (self.hpa_name.clone())
            .or_else(|| self.hpa_name_set.clone())
            .unwrap_or_else(|| format!("keda-hpa-{}", self.name))
    }
}

/// A ScaledObject's `spec.scaleTargetRef` (of the object, or of what a list kept of it: only
/// `/spec` is read), defaulted as KEDA defaults it (an `apps/v1` Deployment).
pub fn target_of(object: &Value) -> ScaleTargetRef {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str);
    ScaleTargetRef {
        api_version: s("/spec/scaleTargetRef/apiVersion")
            .unwrap_or("apps/v1")
            .into(),
        kind: s("/spec/scaleTargetRef/kind")
            .unwrap_or("Deployment")
            .into(),
        name: s("/spec/scaleTargetRef/name").unwrap_or_default().into(),
    }
}

impl KedaPause {
    /// Whether KEDA reads these annotations as a pause that stops its scaling (a
    /// `paused-replicas` of any value, or a `paused` that is not a false boolean).
    pub fn pauses(&self) -> bool {
        self.paused_replicas.is_some() || self.paused.as_deref().is_some_and(|v| !is_false(v))
    }

    /// The operator's night: paused at 0, both annotations.
    fn night(spelling: &str) -> KedaPause {
        KedaPause {
            paused_replicas: Some("0".into()),
            paused: Some(spelling.into()),
        }
    }

    /// Whether these are the operator's night (either spelling of `paused`).
    pub fn is_night(&self) -> bool {
        self.paused_replicas.as_deref() == Some("0")
            && self
                .paused
                .as_deref()
                .is_some_and(|v| v == "true" || v == "True")
    }

    /// Whether a value is too long to be recorded in status.
    pub fn too_long(&self) -> bool {
        [&self.paused_replicas, &self.paused]
            .iter()
            .any(|v| v.as_ref().is_some_and(|v| v.len() > MAX_RECORDED))
    }
}

/// The user's own pause, to record before the schedule's replaces it. A pause of the
/// operator's is none. A pause at the current count (`paused` alone) is recorded as a pause at
/// that count (`paused-replicas`): given back as it was after the night, it would freeze the
/// workload at the night's 0.
fn users_pause(so: &ScaledObjectView, replicas: Option<i32>) -> KedaPause {
    if so.pause_ours {
        return KedaPause::default();
    }
    let mut own = so.pause.clone();
    if own.paused_replicas.is_none() && own.pauses() {
        own.paused_replicas = replicas.map(|n| n.to_string());
    }
    own
}

/// Go's `strconv.ParseBool` false spellings: KEDA reads any other value as true.
fn is_false(v: &str) -> bool {
    matches!(v, "0" | "f" | "F" | "false" | "FALSE" | "False")
}

/// What the TDSet has recorded of the ScaledObject before its first write (durable: a count
/// the user must get back is persisted before the change that needs it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Originals {
    /// The user's own pause annotations, while the operator's pause may be on the object.
    pub pause: Option<KedaPause>,
    /// The user's own `minReplicaCount`, while the schedule's floor may be on it.
    pub min: Option<i32>,
    /// The user's own `maxReplicaCount`, while a scheduled ceiling may be on it.
    pub max: Option<i32>,
}

impl Originals {
    /// What a TDSet's `status.target` records of a ScaledObject.
    pub fn of(t: &crate::api::TargetStatus) -> Originals {
        Originals {
            pause: t.original_pause.clone(),
            min: t.original_replicas,
            max: t.original_max_replicas,
        }
    }
}

/// The writes that make a ScaledObject follow the schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The pause annotations to set (None in a value: removed), when they differ.
    pub pause: Option<KedaPause>,
    /// `spec.minReplicaCount` to write, when it differs.
    pub min: Option<i32>,
    /// `spec.maxReplicaCount` to write, when it differs.
    pub max: Option<i32>,
    /// What must be on record, durable, before the writes (None: the record stays as it is).
    pub record: Option<Originals>,
    /// The record once the writes are made (a value given back is no longer to give back).
    pub after: Originals,
    /// The floor in force (0 while asleep).
    pub floor: i32,
    /// The scheduled count, when the ceiling held it lower.
    pub clamped_from: Option<i32>,
    /// The pause written is the user's own, as recorded.
    pub gives_back: bool,
}

impl Plan {
    pub fn writes(&self) -> bool {
        self.pause.is_some() || self.min.is_some() || self.max.is_some()
    }

    /// The plan with its ceiling held back (someone keeps setting `maxReplicaCount` back, and
    /// its contest says later): what was to be given back stays on record. Unchanged where the
    /// floor it writes would stand above the maximum left in place (KEDA refuses that).
    pub fn without_ceiling(mut self, recorded: &Originals, so: &ScaledObjectView) -> Plan {
        if self.min.is_some_and(|m| m > so.max()) {
            return self;
        }
        self.max = None;
        self.after.max = self.record.as_ref().unwrap_or(recorded).max;
        self
    }

    /// The user's own pause given back (not a removal): written under `GIVE_BACK_MANAGER`, so
    /// it reads as the user's afterwards.
    pub fn gives_pause_back(&self) -> bool {
        self.gives_back
            && self
                .pause
                .as_ref()
                .is_some_and(|p| *p != KedaPause::default())
    }
}

/// Whether the unpause the operator wrote for keda#6982 stays where `own` (the pause to give
/// back) is none: while KEDA still says Paused, it is what makes KEDA run again.
fn keeps_unpause(so: &ScaledObjectView, own: Option<&KedaPause>) -> bool {
    own.is_none_or(|o| *o == KedaPause::default())
        && so.pause_ours
        && so.pause == unpause()
        && so.paused == Some(true)
}

/// `scheduled`: the count now (0: asleep); `ceiling`: the schedule's `maxReplica` in force,
/// if any; `recorded`: the originals on record; `replicas`: the workload's count, when read.
/// The user's values are recorded from `so` the first time the operator writes over them.
pub fn plan(
    scheduled: i32,
    ceiling: Option<i32>,
    recorded: &Originals,
    so: &ScaledObjectView,
    replicas: Option<i32>,
) -> Plan {
    let mut record = recorded.clone();
    let own_max = recorded.max.unwrap_or(so.max());
    // The ceiling in force: the schedule's (never below the floor it sets), or the user's own.
    let max = match ceiling {
        Some(c) => c.max(scheduled).max(1),
        None => own_max.max(1),
    };
    if ceiling.is_some() && record.max.is_none() && max != so.max() {
        record.max = Some(so.max());
    }
    let mut plan = Plan {
        max: (max != so.max()).then_some(max),
        ..Plan::default()
    };
    if scheduled <= 0 {
        if record.pause.is_none() && !(so.pause.is_night() && so.pause_ours) {
            record.pause = Some(users_pause(so, replicas));
        }
        // A pause at 0 already (the operator's, or the user's own, recorded): nothing to write.
        if !so.pause.is_night() {
            plan.pause = Some(KedaPause::night("true"));
        }
        // The floor is free while paused: lowered under a lower ceiling (KEDA refuses a
        // minimum above the maximum).
        plan.min = (so.min() > max).then_some(max);
        if plan.min.is_some() && record.min.is_none() {
            record.min = Some(so.min());
        }
    } else {
        match &record.pause {
            _ if keeps_unpause(so, record.pause.as_ref()) => {}
            Some(own) if so.pause != *own => {
                plan.gives_back = true;
                plan.pause = Some(own.clone());
            }
            // Nothing on record, yet a pause of the operator's is on it (a record lost, a
            // takeover, or the unpause written for keda#6982 once KEDA took it): off.
            None if so.pause_ours && so.pause != KedaPause::default() => {
                plan.pause = Some(KedaPause::default())
            }
            _ => {}
        }
        let floor = scheduled.min(max);
        if record.min.is_none() && so.min() != floor {
            record.min = Some(so.min());
        }
        plan.floor = floor;
        plan.min = (so.min_replica_count != Some(floor)).then_some(floor);
        plan.clamped_from = (scheduled > floor).then_some(scheduled);
    }
    plan.after = record.clone();
    if scheduled > 0 {
        // Given back now, or already.
        plan.after.pause = None;
    }
    if ceiling.is_none() && (plan.max.is_some() || so.max() == own_max) {
        plan.after.max = None;
    }
    plan.record = (record != *recorded).then_some(record);
    plan
}

/// What letting go writes: the user's pause given back (or the operator's taken off), the
/// user's own maximum given back, and with `restore` (`onDelete: Restore`) the own minimum.
pub fn released(recorded: &Originals, so: &ScaledObjectView, restore: bool) -> Plan {
    let mut plan = Plan::default();
    match &recorded.pause {
        // The unpause written for keda#6982 stays while KEDA says Paused.
        _ if keeps_unpause(so, recorded.pause.as_ref()) => {}
        Some(own) if so.pause != *own => {
            plan.gives_back = true;
            plan.pause = Some(own.clone());
        }
        // Nothing on record, yet a pause of the operator's is on it (the record was lost): off.
        // One of the user's (a pause at 0 for maintenance, say) stays.
        None if so.pause_ours && so.pause != KedaPause::default() => {
            plan.pause = Some(KedaPause::default())
        }
        _ => {}
    }
    let own_max = recorded.max.unwrap_or(so.max()).max(1);
    let floor = if restore {
        recorded.min.unwrap_or(so.min()).min(own_max)
    } else {
        so.min()
    };
    // The floor that stays raises the own ceiling that comes back, as with an HPA.
    let max = own_max.max(floor);
    plan.max = (max != so.max()).then_some(max);
    plan.min = (floor != so.min()).then_some(floor);
    plan.floor = floor;
    plan
}

/// What KEDA was asked, against what it shows, once the plan's writes are on the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// KEDA shows what was asked.
    Taken,
    /// Paused by the operator, but KEDA has not paused it (yet).
    NotPaused,
    /// Paused, but the workload is not at the paused count: KEDA does not watch it, so it
    /// must be made to reconcile the ScaledObject (the `paused` spelling turned).
    Drifted { replicas: i32 },
    /// Unpaused (no pause annotation left), but KEDA still says Paused (keda#6982).
    StillPaused,
    /// Unpaused and KEDA says so, but the HPA it scales the workload with is not there: nothing
    /// scales the workload (KEDA's operator down, or the HPA deleted while it was).
    HpaMissing,
}

/// `replicas`: the workload's `spec.replicas`, when read; `hpa`: whether KEDA's HPA for it
/// exists, when known.
pub fn check(so: &ScaledObjectView, replicas: Option<i32>, hpa: Option<bool>) -> Check {
    if so.pause.is_night() && so.pause_ours {
        if so.paused != Some(true) {
            return Check::NotPaused;
        }
        return match replicas {
            Some(r) if r != 0 => Check::Drifted { replicas: r },
            _ => Check::Taken,
        };
    }
    if !so.pause.pauses() && so.paused == Some(true) {
        return Check::StillPaused;
    }
    if !so.pause.pauses() && so.paused == Some(false) && hpa == Some(false) {
        return Check::HpaMissing;
    }
    Check::Taken
}

/// After letting go (its writes on the ScaledObject), what is left before the TDSet goes: KEDA
/// says what it took only in its status, and a ScaledObject it leaves paused with no pause on
/// it (keda#6982) would hold the workload at 0 with nobody left to notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// KEDA runs the workload again (or keeps the user's own pause, given back).
    Done,
    /// Not yet: look again soon.
    Wait,
    /// KEDA still says Paused with no pause left, past the grace: `paused: "false"`, as its
    /// documentation allows, once.
    Unpause,
    /// Not done by twice the grace: the TDSet goes all the same, saying what KEDA did not do
    /// (a workload it put to sleep is woken directly).
    GiveUp(Check),
}

/// `replicas`: the workload's `spec.replicas`, when read; `hpa`: whether KEDA's HPA exists,
/// when known; `seen`: how long the operator has seen it not done.
pub fn resume(
    so: &ScaledObjectView,
    replicas: Option<i32>,
    hpa: Option<bool>,
    seen: std::time::Duration,
    grace: std::time::Duration,
) -> Resume {
    let found = check(so, replicas, hpa);
    // Unpaused with a floor, KEDA scales the workload up from 0 to it in its first loop (unless
    // an idle count keeps it at 0 while no trigger is active).
    let left_at_zero = !so.pause.pauses()
        && so.min() > 0
        && so.idle_replica_count.is_none()
        && replicas == Some(0);
    match found {
        Check::Taken if !left_at_zero => Resume::Done,
        _ if seen < grace => Resume::Wait,
        found if seen >= grace * 2 => Resume::GiveUp(found),
        Check::StillPaused if so.pause != unpause() => Resume::Unpause,
        _ => Resume::Wait,
    }
}

/// The operator's pause spelled the other way: the same to KEDA, a change it reconciles on.
pub fn turned(pause: &KedaPause) -> KedaPause {
    let spelling = if pause.paused.as_deref() == Some("true") {
        "True"
    } else {
        "true"
    };
    KedaPause::night(spelling)
}

/// The unpause KEDA's documentation allows where removing the annotations did not take.
pub fn unpause() -> KedaPause {
    KedaPause {
        paused_replicas: None,
        paused: Some("false".into()),
    }
}

/// The merge patch of the plan's writes, guarded by the uid (a ScaledObject deleted and made
/// again meanwhile is never written, and one that is gone is never created) and, where given,
/// by the revision it was read at (`kubectl annotate` between the read and the write is not
/// overwritten: the API server refuses the write, and the next read records what it set).
pub fn patch(
    (uid, read_at): (Option<&str>, Option<&str>),
    pause: Option<&KedaPause>,
    min: Option<i32>,
    max: Option<i32>,
) -> Value {
    let mut body = json!({"metadata": {"uid": uid}});
    if let Some(rv) = read_at {
        body["metadata"]["resourceVersion"] = json!(rv);
    }
    if let Some(p) = pause {
        let mut annotations = Map::new();
        annotations.insert(PAUSED_REPLICAS.into(), json!(p.paused_replicas));
        annotations.insert(PAUSED.into(), json!(p.paused));
        body["metadata"]["annotations"] = Value::Object(annotations);
    }
    let mut spec = Map::new();
    if let Some(n) = min {
        spec.insert("minReplicaCount".into(), json!(n));
    }
    if let Some(n) = max {
        spec.insert("maxReplicaCount".into(), json!(n));
    }
    if !spec.is_empty() {
        body["spec"] = Value::Object(spec);
    }
    body
}

/// KEDA's version from the labels it puts on its HPA (`app.kubernetes.io/version`), as
/// (major, minor); None where it is not a version.
pub fn version_of(labels: &BTreeMap<String, String>) -> Option<(u32, u32)> {
    let v = labels.get("app.kubernetes.io/version")?;
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn so(min: Option<i32>, max: Option<i32>, pause: KedaPause) -> ScaledObjectView {
        ScaledObjectView {
            name: "web".into(),
            uid: Some("u1".into()),
            resource_version: Some("7".into()),
            pause,
            min_replica_count: min,
            max_replica_count: max,
            idle_replica_count: None,
            target: ScaleTargetRef {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
            },
            pause_ours: false,
            paused: None,
            paused_replica_count: None,
            hpa_name: Some("keda-hpa-web".into()),
            hpa_name_set: None,
        }
    }

    /// `so` with the operator's pause on it.
    fn ours(mut v: ScaledObjectView) -> ScaledObjectView {
        v.pause_ours = true;
        v
    }

    fn user_pause(n: &str) -> KedaPause {
        KedaPause {
            paused_replicas: Some(n.into()),
            paused: None,
        }
    }

    #[test]
    fn the_night_pauses_at_zero_with_both_annotations_and_records_the_users_pause_first() {
        let day = so(Some(1), Some(10), KedaPause::default());
        let p = plan(0, None, &Originals::default(), &day, Some(2));
        assert_eq!(p.pause, Some(KedaPause::night("true")));
        assert_eq!((p.min, p.max, p.floor), (None, None, 0));
        // Nothing of the user's: recorded as none, so nothing comes back but the removal.
        assert_eq!(
            p.record.as_ref().and_then(|r| r.pause.clone()),
            Some(KedaPause::default())
        );
        // The user's own pause at 2 is recorded before the operator's replaces it.
        let theirs = so(Some(1), Some(10), user_pause("2"));
        let p = plan(0, None, &Originals::default(), &theirs, Some(2));
        assert_eq!(p.record.unwrap().pause, Some(user_pause("2")));
        // Already the operator's night (either spelling): nothing written, the record stays.
        for spelling in ["true", "True"] {
            let night = ours(so(Some(1), Some(10), KedaPause::night(spelling)));
            let recorded = Originals {
                pause: Some(user_pause("2")),
                ..Originals::default()
            };
            let p = plan(0, None, &recorded, &night, Some(2));
            assert!(!p.writes(), "{spelling}");
            assert_eq!(p.record, None);
            assert_eq!(p.after, recorded);
        }
    }

    #[test]
    fn the_morning_gives_the_users_pause_back_or_takes_the_operators_off() {
        let night = so(Some(1), Some(10), KedaPause::night("true"));
        // The user had none: both annotations removed; the floor set.
        let recorded = Originals {
            pause: Some(KedaPause::default()),
            ..Originals::default()
        };
        let p = plan(3, None, &recorded, &night, Some(2));
        assert_eq!(p.pause, Some(KedaPause::default()));
        assert_eq!((p.min, p.floor), (Some(3), 3));
        assert_eq!(
            p.record.unwrap().min,
            Some(1),
            "the own floor recorded first"
        );
        assert_eq!(p.after.pause, None, "given back, nothing more to give back");
        assert_eq!(p.after.min, Some(1));
        // The user's own pause at 2 comes back as it was.
        let recorded = Originals {
            pause: Some(user_pause("2")),
            min: Some(1),
            max: None,
        };
        let p = plan(3, None, &recorded, &night, Some(2));
        assert_eq!(p.pause, Some(user_pause("2")));
        let body = patch((Some("u1"), Some("7")), p.pause.as_ref(), p.min, p.max);
        assert_eq!(
            body,
            json!({"metadata": {"uid": "u1", "resourceVersion": "7", "annotations": {
                    "autoscaling.keda.sh/paused-replicas": "2",
                    "autoscaling.keda.sh/paused": null}},
                   "spec": {"minReplicaCount": 3}})
        );
        // Given back already (a crash after the write, before the record was cleared).
        let back = so(Some(3), Some(10), user_pause("2"));
        let p = plan(3, None, &recorded, &back, Some(2));
        assert_eq!(p.pause, None);
        assert_eq!(p.after.pause, None);
    }

    #[test]
    fn floors_and_ceilings_follow_the_schedule_and_the_own_come_back() {
        // By day: floor 5, ceiling 50 over the user's 1..20.
        let own = so(Some(1), Some(20), KedaPause::default());
        let p = plan(5, Some(50), &Originals::default(), &own, Some(2));
        assert_eq!((p.min, p.max), (Some(5), Some(50)));
        let rec = p.record.clone().unwrap();
        assert_eq!((rec.min, rec.max), (Some(1), Some(20)));
        // Above the ceiling: clamped and said.
        let p = plan(30, Some(8), &Originals::default(), &own, Some(2));
        assert_eq!((p.min, p.max, p.clamped_from), (Some(30), Some(30), None));
        let p = plan(30, None, &Originals::default(), &own, Some(2));
        assert_eq!((p.min, p.max, p.clamped_from), (Some(20), None, Some(30)));
        // No ceiling any more: the user's 20 comes back, and is no longer on record after.
        let day = so(Some(5), Some(50), KedaPause::default());
        let p = plan(5, None, &rec, &day, Some(2));
        assert_eq!((p.min, p.max), (None, Some(20)));
        assert_eq!(p.after.max, None);
        // There already: nothing to write.
        let p = plan(5, Some(50), &rec, &day, Some(2));
        assert!(!p.writes());
        // Unset fields are KEDA's defaults: 0 and 100.
        let bare = so(None, None, KedaPause::default());
        let p = plan(2, None, &Originals::default(), &bare, Some(2));
        assert_eq!((p.min, p.max), (Some(2), None));
        assert_eq!(p.record.unwrap().min, Some(0));
    }

    #[test]
    fn a_ceiling_held_back_keeps_what_it_would_give_back_on_record() {
        let own = so(Some(1), Some(20), KedaPause::default());
        // The schedule's 50 over the user's 20, held back: the 20 is recorded all the same.
        let p = plan(5, Some(50), &Originals::default(), &own, Some(2));
        let held = p.without_ceiling(&Originals::default(), &own);
        assert_eq!((held.min, held.max), (Some(5), None));
        assert_eq!(held.after.max, Some(20));
        // Giving the user's 20 back, held back: still to give back.
        let rec = Originals {
            max: Some(20),
            ..Originals::default()
        };
        let day = so(Some(5), Some(50), KedaPause::default());
        let p = plan(5, None, &rec, &day, Some(2));
        assert_eq!((p.max, p.after.max), (Some(20), None));
        let held = p.without_ceiling(&rec, &day);
        assert_eq!(
            (held.max, held.after.max, held.writes()),
            (None, Some(20), false)
        );
        // A floor above the maximum in place: the ceiling goes with it.
        let low = so(Some(1), Some(4), KedaPause::default());
        let p = plan(8, Some(10), &Originals::default(), &low, Some(2));
        assert_eq!(p.without_ceiling(&Originals::default(), &low).max, Some(10));
    }

    #[test]
    fn asleep_under_a_lower_ceiling_the_floor_left_in_place_is_lowered_with_it() {
        let day = so(Some(10), Some(20), KedaPause::default());
        let p = plan(0, Some(5), &Originals::default(), &day, Some(2));
        assert_eq!((p.min, p.max), (Some(5), Some(5)));
        let rec = p.record.unwrap();
        assert_eq!(
            (rec.min, rec.max),
            (Some(10), Some(20)),
            "both recorded first"
        );
    }

    #[test]
    fn letting_go_gives_everything_of_the_users_back() {
        let night = ours(so(Some(5), Some(50), KedaPause::night("True")));
        let recorded = Originals {
            pause: Some(user_pause("2")),
            min: Some(1),
            max: Some(20),
        };
        let p = released(&recorded, &night, true);
        assert_eq!(
            (p.pause, p.min, p.max),
            (Some(user_pause("2")), Some(1), Some(20))
        );
        // Keep: the floor stays (under the own ceiling).
        let p = released(&recorded, &night, false);
        assert_eq!((p.min, p.max), (None, Some(20)));
        let high = so(Some(30), Some(50), KedaPause::default());
        let p = released(&recorded, &high, false);
        assert_eq!((p.min, p.max), (None, Some(30)));
        // The record lost, the operator's night still on: taken off.
        let p = released(&Originals::default(), &night, false);
        assert_eq!(p.pause, Some(KedaPause::default()));
        // A pause of the user's own with nothing on record stays.
        let theirs = so(Some(5), Some(50), user_pause("3"));
        assert_eq!(released(&Originals::default(), &theirs, false).pause, None);
    }

    #[test]
    fn letting_go_waits_for_keda_to_run_the_workload_again_within_a_bound() {
        use std::time::Duration as D;
        let g = D::from_secs(30);
        // The schedule's pause just taken off: KEDA still says Paused, the workload at 0.
        let mut off = ours(so(Some(2), Some(10), KedaPause::default()));
        off.paused = Some(true);
        assert_eq!(resume(&off, Some(0), Some(false), D::ZERO, g), Resume::Wait);
        // Past the grace: the unpause KEDA's documentation allows, once; then waited for.
        assert_eq!(resume(&off, Some(0), Some(false), g, g), Resume::Unpause);
        // (Never past the bound, whoever takes it off again.)
        assert_eq!(
            resume(&off, Some(0), Some(false), g * 2, g),
            Resume::GiveUp(Check::StillPaused)
        );
        let mut unpaused = off.clone();
        unpaused.pause = unpause();
        assert_eq!(resume(&unpaused, Some(0), Some(false), g, g), Resume::Wait);
        // Kept while KEDA says Paused, taken off once it does not (what letting go writes),
        // whether the pause on record is none or "none of the user's" (`{}`).
        assert_eq!(
            released(&Originals::default(), &unpaused, false).pause,
            None
        );
        let none_of_theirs = Originals {
            pause: Some(KedaPause::default()),
            ..Originals::default()
        };
        assert_eq!(released(&none_of_theirs, &unpaused, false).pause, None);
        assert_eq!(
            plan(2, None, &none_of_theirs, &unpaused, Some(0)).pause,
            None
        );
        assert_eq!(
            resume(&unpaused, Some(0), Some(false), g * 2, g),
            Resume::GiveUp(Check::StillPaused)
        );
        // KEDA resumed: its HPA there, but the workload not yet off 0 is not done.
        let mut resumed = off.clone();
        resumed.paused = Some(false);
        assert_eq!(resume(&resumed, Some(0), Some(true), g, g), Resume::Wait);
        assert_eq!(
            resume(&resumed, Some(0), Some(true), g * 2, g),
            Resume::GiveUp(Check::Taken)
        );
        assert_eq!(
            resume(&resumed, Some(2), Some(true), D::ZERO, g),
            Resume::Done
        );
        assert_eq!(
            resume(&resumed, Some(2), Some(false), g * 2, g),
            Resume::GiveUp(Check::HpaMissing)
        );
        // A floor of 0 (KEDA scales to zero itself), or an idle count: at 0 is KEDA's to decide.
        let mut to_zero = resumed.clone();
        to_zero.min_replica_count = Some(0);
        assert_eq!(
            resume(&to_zero, Some(0), Some(true), D::ZERO, g),
            Resume::Done
        );
        let mut idle = resumed.clone();
        idle.idle_replica_count = Some(0);
        assert_eq!(resume(&idle, Some(0), Some(true), D::ZERO, g), Resume::Done);
        // The user's own pause given back: KEDA keeps it paused, as the user asked.
        let mut theirs = so(Some(2), Some(10), user_pause("0"));
        theirs.paused = Some(true);
        assert_eq!(resume(&theirs, Some(0), None, D::ZERO, g), Resume::Done);
    }

    #[test]
    fn the_check_says_what_keda_has_not_done() {
        let mut night = ours(so(Some(1), Some(10), KedaPause::night("true")));
        assert_eq!(check(&night, Some(3), None), Check::NotPaused);
        night.paused = Some(true);
        assert_eq!(check(&night, Some(0), Some(false)), Check::Taken);
        assert_eq!(
            check(&night, Some(4), Some(false)),
            Check::Drifted { replicas: 4 }
        );
        assert_eq!(turned(&night.pause), KedaPause::night("True"));
        assert_eq!(turned(&KedaPause::night("True")), KedaPause::night("true"));
        // The morning: annotations gone, KEDA still paused.
        let mut day = so(Some(1), Some(10), KedaPause::default());
        day.paused = Some(true);
        assert_eq!(check(&day, Some(0), Some(false)), Check::StillPaused);
        // Unpaused the way the docs allow, and KEDA took it.
        day.pause = unpause();
        assert!(!day.pause.pauses());
        day.paused = Some(false);
        assert_eq!(check(&day, Some(0), Some(true)), Check::Taken);
        // Resumed, but nothing scales the workload: KEDA's HPA is not there.
        assert_eq!(check(&day, Some(0), Some(false)), Check::HpaMissing);
        assert_eq!(
            check(&day, Some(0), None),
            Check::Taken,
            "not known: not said"
        );
        // Before KEDA has said either way, its HPA is not expected yet.
        day.paused = None;
        assert_eq!(check(&day, Some(0), Some(false)), Check::Taken);
        // The user's own pause by day is theirs: no check of it, and no HPA expected.
        let mut theirs = so(Some(1), Some(10), user_pause("2"));
        theirs.paused = Some(true);
        assert_eq!(check(&theirs, Some(2), Some(false)), Check::Taken);
    }

    #[test]
    fn keda_s_hpa_is_named_as_keda_names_it() {
        let read = |o: Value| ScaledObjectView::from_object(&o).hpa();
        assert_eq!(read(json!({"metadata": {"name": "web"}})), "keda-hpa-web");
        let named = json!({"metadata": {"name": "web"},
            "spec": {"advanced": {"horizontalPodAutoscalerConfig": {"name": "web-hpa"}}}});
        assert_eq!(read(named.clone()), "web-hpa");
        let mut made = named;
        made["status"] = json!({"hpaName": "made-hpa"});
        assert_eq!(read(made), "made-hpa", "the one KEDA says it made");
    }

    #[test]
    fn a_pause_is_read_as_keda_reads_it() {
        let p = |r: Option<&str>, v: Option<&str>| KedaPause {
            paused_replicas: r.map(Into::into),
            paused: v.map(Into::into),
        };
        assert!(!p(None, None).pauses());
        assert!(p(Some("0"), None).pauses());
        assert!(p(None, Some("true")).pauses());
        assert!(p(None, Some("yes")).pauses(), "not a boolean: true to KEDA");
        assert!(!p(None, Some("false")).pauses());
        assert!(!p(None, Some("0")).pauses());
        assert!(p(Some("x".repeat(64).as_str()), None).too_long());
        assert!(!p(Some("0"), Some("true")).too_long());
    }

    #[test]
    fn a_scaled_object_is_read_from_what_the_api_server_returns() {
        let v = ScaledObjectView::from_object(&json!({
            "metadata": {"name": "web", "uid": "u1",
                         "annotations": {"autoscaling.keda.sh/paused-replicas": "0"}},
            "spec": {"scaleTargetRef": {"name": "api"}, "minReplicaCount": 2},
            "status": {"hpaName": "keda-hpa-web", "pausedReplicaCount": 0,
                       "conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "Paused", "status": "True"}]}
        }));
        assert_eq!(v.target.kind, "Deployment");
        assert_eq!(v.target.name, "api");
        assert_eq!((v.min(), v.max()), (2, DEFAULT_MAX));
        assert_eq!(v.paused, Some(true));
        assert_eq!(v.pause.paused_replicas.as_deref(), Some("0"));
        assert_eq!(v.paused_replica_count, Some(0));
        // Nothing but a name: no panic, KEDA's defaults.
        let bare = ScaledObjectView::from_object(&json!({"metadata": {"name": "x"}}));
        assert_eq!((bare.min(), bare.max(), bare.paused), (0, 100, None));
    }

    #[test]
    fn a_pause_that_looks_like_the_night_is_the_operators_only_if_it_wrote_it() {
        // The user's own pause at 0 (maintenance): recorded, given back, left on letting go,
        // and not checked as the schedule's.
        let maintenance = so(Some(1), Some(10), KedaPause::night("true"));
        let p = plan(0, None, &Originals::default(), &maintenance, Some(0));
        assert_eq!(p.record.unwrap().pause, Some(KedaPause::night("true")));
        assert_eq!(
            released(&Originals::default(), &maintenance, false).pause,
            None
        );
        let mut taken = maintenance.clone();
        taken.paused = Some(true);
        assert_eq!(check(&taken, Some(3), Some(true)), Check::Taken);
        // The operator's night with nothing on record (a record lost, a takeover): by day it
        // is taken off, not left to keep the workload asleep.
        let left = ours(so(Some(1), Some(10), KedaPause::night("true")));
        let p = plan(3, None, &Originals::default(), &left, Some(0));
        assert_eq!(p.pause, Some(KedaPause::default()));
        // The unpause written for keda#6982 stays while KEDA still says Paused, and goes after.
        let mut stuck = ours(so(Some(3), Some(10), unpause()));
        stuck.paused = Some(true);
        assert_eq!(
            plan(3, None, &Originals::default(), &stuck, Some(0)).pause,
            None
        );
        stuck.paused = Some(false);
        assert_eq!(
            plan(3, None, &Originals::default(), &stuck, Some(3)).pause,
            Some(KedaPause::default())
        );
        // A ScaledObject read with the operator's manager on the annotations is its.
        let v = ScaledObjectView::from_object(&json!({
            "metadata": {"name": "web", "annotations": {PAUSED_REPLICAS: "0", PAUSED: "true"},
                         "managedFields": [
                             {"manager": "kubectl-annotate", "operation": "Update",
                              "fieldsV1": {"f:metadata": {"f:annotations": {"f:other": {}}}}},
                             {"manager": "tdset-operator", "operation": "Update",
                              "fieldsV1": {"f:metadata": {"f:annotations": {
                                  "f:autoscaling.keda.sh/paused": {},
                                  "f:autoscaling.keda.sh/paused-replicas": {}}}}}]}
        }));
        assert!(v.pause_ours);
        let theirs = ScaledObjectView::from_object(&json!({
            "metadata": {"name": "web", "annotations": {PAUSED_REPLICAS: "0"},
                         "managedFields": [{"manager": "kubectl-annotate", "operation": "Update",
                              "fieldsV1": {"f:metadata": {"f:annotations": {
                                  "f:autoscaling.keda.sh/paused-replicas": {}}}}}]}
        }));
        assert!(!theirs.pause_ours);
    }

    #[test]
    fn a_pause_at_the_current_count_is_recorded_at_that_count() {
        // `paused: "true"` alone freezes the workload where it is: given back after the night
        // it would freeze it at 0. It is recorded, and comes back, as a pause at 5.
        let frozen = so(
            Some(1),
            Some(10),
            KedaPause {
                paused_replicas: None,
                paused: Some("true".into()),
            },
        );
        let p = plan(0, None, &Originals::default(), &frozen, Some(5));
        let own = p.record.unwrap().pause.unwrap();
        assert_eq!(own.paused_replicas.as_deref(), Some("5"));
        assert_eq!(own.paused.as_deref(), Some("true"));
    }

    #[test]
    fn keda_s_version_is_read_from_its_hpa_labels() {
        let labels = |v: &str| BTreeMap::from([("app.kubernetes.io/version".into(), v.into())]);
        assert_eq!(version_of(&labels("2.21.0")), Some((2, 21)));
        assert_eq!(version_of(&labels("v2.19.1")), Some((2, 19)));
        assert_eq!(version_of(&labels("2.20.0-rc1")), Some((2, 20)));
        assert_eq!(version_of(&labels("main")), None);
        assert_eq!(version_of(&BTreeMap::new()), None);
        assert!(version_of(&labels("2.19.0")).unwrap() < ONE_STEP_PAUSE);
    }

    #[test]
    fn only_keda_s_scaled_object_is_one() {
        let r = |v: &str, k: &str| ScaleTargetRef {
            api_version: v.into(),
            kind: k.into(),
            name: "web".into(),
        };
        assert!(r("keda.sh/v1alpha1", "ScaledObject").is_scaled_object());
        assert!(!r("example.com/v1", "ScaledObject").is_scaled_object());
        assert!(!r("keda.sh/v1alpha1", "ScaledJob").is_scaled_object());
    }
}
