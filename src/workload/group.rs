//! The group form, as pure functions: which workloads a TDSet holds, what each is to run at a
//! level, and the writes that get it there with its own count recorded on it first.
//!
//! The memory lives on the workload itself (annotations), so no crash, restart, change of
//! leader or deletion of the TDSet can lose a count the user must get back:
//!
//! - `schedule.rs/held-by`: the TDSet that changed it;
//! - `schedule.rs/own-replicas` (or `own-suspend` for a CronJob): the count it runs when no
//!   TDSet changes it;
//! - `schedule.rs/scheduled-replicas` (or `scheduled-suspend`): what that TDSet set. A value
//!   that differs from it was set by someone else (a Helm upgrade, `kubectl scale`) and becomes
//!   the workload's own count.
//!
//! A custom kind's count is set through its `/scale`, a second request after the record's; the
//! record then also says `schedule.rs/previous-scheduled-replicas` (the value before that
//! change), so a crash between the two requests is not taken for someone else's change.
//!
//! With the record, a label `schedule.rs/held-by-uid` (the TDSet's uid) lets the TDSet list
//! what it holds server-side, however many other workloads the namespace has. The record is
//! written in the same request as the first change (one apply, guarded by the resourceVersion
//! it was planned from), and removed in the same request that gives the own count back.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value as Json, json};

use crate::api::{GroupStatus, MAX_LISTED, MemberStatus};
use crate::schedule::Count;
use crate::workload::keda;

pub const HELD_BY: &str = "schedule.rs/held-by";
/// The label on a held workload: the holding TDSet's uid (a name may be longer than a label).
pub const HELD_BY_UID: &str = "schedule.rs/held-by-uid";
pub const OWN_REPLICAS: &str = "schedule.rs/own-replicas";
pub const OWN_SUSPEND: &str = "schedule.rs/own-suspend";
pub const SCHEDULED_REPLICAS: &str = "schedule.rs/scheduled-replicas";
pub const SCHEDULED_SUSPEND: &str = "schedule.rs/scheduled-suspend";
pub const OWN_MIN_REPLICAS: &str = "schedule.rs/own-min-replicas";
pub const SCHEDULED_MIN_REPLICAS: &str = "schedule.rs/scheduled-min-replicas";
/// On a workload whose count and record are two requests: its value before the change the
/// record announces (what a crash between the two leaves).
pub const PREVIOUS_SCHEDULED: &str = "schedule.rs/previous-scheduled-replicas";
/// After a ScaledObject's recorded floor: the operator's pause was on it too.
const KEDA_PAUSED: &str = ",paused";

pub use crate::api::Selector;

pub mod order;

/// What the schedule sets on a workload: its replica count, (a CronJob) whether it is
/// suspended, or (the HPA of an autoscaled workload) its floor, or (the KEDA ScaledObject of
/// one) its floor and the operator's pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Replicas(i32),
    Suspended(bool),
    /// An HPA's `minReplicas`.
    Floor(i32),
    /// A ScaledObject's `spec.minReplicaCount`, and whether it carries the operator's night
    /// (KEDA's pause at 0, both annotations: see `workload::keda`).
    Keda {
        floor: i32,
        paused: bool,
    },
}

impl Value {
    /// The count it amounts to (a CronJob: 0 while suspended, else 1).
    pub fn replicas(self) -> i32 {
        match self {
            Value::Replicas(n) | Value::Floor(n) => n,
            Value::Suspended(s) => i32::from(!s),
            Value::Keda { paused: true, .. } => 0,
            Value::Keda { floor, .. } => floor,
        }
    }

    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Value::Replicas(_) => (OWN_REPLICAS, SCHEDULED_REPLICAS),
            Value::Suspended(_) => (OWN_SUSPEND, SCHEDULED_SUSPEND),
            Value::Floor(_) | Value::Keda { .. } => (OWN_MIN_REPLICAS, SCHEDULED_MIN_REPLICAS),
        }
    }

    fn encode(self) -> String {
        match self {
            Value::Replicas(n) | Value::Floor(n) => n.to_string(),
            Value::Suspended(s) => s.to_string(),
            Value::Keda {
                floor,
                paused: true,
            } => format!("{floor}{KEDA_PAUSED}"),
            Value::Keda { floor, .. } => floor.to_string(),
        }
    }

    /// Reads a value of the same shape as `self` from an annotation.
    fn decode_like(self, s: &str) -> Option<Value> {
        match self {
            Value::Replicas(_) => s
                .trim()
                .parse()
                .ok()
                .filter(|n| *n >= 0)
                .map(Value::Replicas),
            Value::Suspended(_) => s.trim().parse().ok().map(Value::Suspended),
            Value::Floor(_) => s.trim().parse().ok().filter(|n| *n >= 1).map(Value::Floor),
            Value::Keda { .. } => {
                let s = s.trim();
                let (n, paused) = match s.strip_suffix(KEDA_PAUSED) {
                    Some(n) => (n, true),
                    None => (s, false),
                };
                let floor = n.trim().parse().ok().filter(|n| *n >= 0)?;
                Some(Value::Keda { floor, paused })
            }
        }
    }

    /// The value a level gives a workload whose own value is `own`.
    pub fn at(level: Count, own: Value) -> Value {
        match (level, own) {
            (Count::Own, own) => own,
            (Count::Replicas(n), Value::Replicas(_)) => Value::Replicas(n),
            // A CronJob sleeps at 0 and runs as its own at any other count.
            (Count::Replicas(0), Value::Suspended(_)) => Value::Suspended(true),
            (Count::Replicas(_), own @ Value::Suspended(_)) => own,
            // An HPA's workload sleeps at 0 (the HPA idles), so its floor stays its own; any
            // other count is the floor (an HPA cannot hold 0).
            (Count::Replicas(0), own @ Value::Floor(_)) => own,
            (Count::Replicas(n), Value::Floor(_)) => Value::Floor(n),
            // A ScaledObject's workload sleeps through KEDA's pause, its floor left its own;
            // awake, the count is the floor (KEDA scales a workload below it up to it).
            (Count::Replicas(0), Value::Keda { floor, .. }) => Value::Keda {
                floor,
                paused: true,
            },
            (Count::Replicas(n), Value::Keda { .. }) => Value::Keda {
                floor: n,
                paused: false,
            },
        }
    }

    /// The spec fields that carry it, for an apply body.
    fn spec(self) -> Json {
        match self {
            Value::Replicas(n) => json!({"replicas": n}),
            Value::Suspended(s) => json!({"suspend": s}),
            Value::Floor(n) => json!({"minReplicas": n}),
            Value::Keda { floor, .. } => json!({"minReplicaCount": floor}),
        }
    }

    /// The annotations that carry it besides the record (KEDA's pause at 0).
    fn annotations(self) -> Option<Json> {
        match self {
            Value::Keda { paused: true, .. } => Some(json!({
                keda::PAUSED_REPLICAS: "0",
                keda::PAUSED: "true",
            })),
            _ => None,
        }
    }
}

impl Value {
    /// A few characters: "3", "suspended", "running".
    pub fn short(self) -> String {
        match self {
            Value::Replicas(n) => n.to_string(),
            Value::Suspended(true) => "suspended".into(),
            Value::Suspended(false) => "running".into(),
            Value::Floor(n) => format!("floor {n}"),
            Value::Keda { paused: true, .. } => "paused".into(),
            Value::Keda { floor, .. } => format!("min {floor}"),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Replicas(n) => write!(f, "{n} replicas"),
            Value::Suspended(true) => f.write_str("suspended"),
            Value::Suspended(false) => f.write_str("not suspended"),
            Value::Floor(n) => write!(f, "minReplicas {n}"),
            Value::Keda { paused: true, .. } => f.write_str("paused at 0 (KEDA)"),
            Value::Keda { floor, .. } => write!(f, "minReplicaCount {floor}"),
        }
    }
}

/// What a TDSet recorded on a workload it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: String,
    pub own: Value,
    pub scheduled: Value,
    /// Where the record is written before the count (a custom kind): the value before it.
    pub previous: Option<Value>,
}

impl Record {
    /// The record in a workload's annotations, read with the shape of `current`. A record
    /// whose values cannot be read is no record; the value now is then the best knowledge of
    /// the own count.
    pub fn read(annotations: &BTreeMap<String, String>, current: Value) -> Option<Record> {
        let (own_key, scheduled_key) = current.keys();
        Some(Record {
            holder: annotations.get(HELD_BY)?.clone(),
            own: current.decode_like(annotations.get(own_key)?)?,
            scheduled: current.decode_like(annotations.get(scheduled_key)?)?,
            previous: annotations
                .get(PREVIOUS_SCHEDULED)
                .filter(|_| matches!(current, Value::Replicas(_)))
                .and_then(|p| current.decode_like(p)),
        })
    }

    /// Whether `value` is what this record's holder set (or, between its two requests, what
    /// it was about to change): anything else was set by someone else.
    pub fn set(&self, value: Value) -> bool {
        match (self.scheduled, value) {
            // A ScaledObject's floor: whether the pause on it is the operator's is told apart
            // by the placing (its annotations), not here.
            (Value::Keda { floor: a, .. }, Value::Keda { floor: b, .. }) => a == b,
            _ => self.scheduled == value || self.previous == Some(value),
        }
    }

    fn annotations(&self) -> Json {
        let (own_key, scheduled_key) = self.own.keys();
        let mut a = json!({
            HELD_BY: self.holder,
            own_key: self.own.encode(),
            scheduled_key: self.scheduled.encode(),
        });
        if let Some(p) = self.previous {
            a[PREVIOUS_SCHEDULED] = json!(p.encode());
        }
        a
    }
}

/// One workload as observed (from a cache or a live read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// `apiVersion` and kind, as written to it.
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub resource_version: Option<String>,
    /// What it runs now: `spec.replicas` (the API server's default of 1 when absent), or a
    /// CronJob's `spec.suspend`.
    pub value: Value,
    /// The record of a TDSet on it, if any.
    pub record: Option<Record>,
    pub place: Place,
    /// The HorizontalPodAutoscaler that scales it, if one does. It is put to sleep (0: the HPA
    /// idles) and given its own count back (the HPA resumes); any other count is its HPA's
    /// floor (a member of its own, `floor_of`), never written to the workload.
    pub autoscaled_by: Option<String>,
    /// `autoscaled_by` names a KEDA ScaledObject: the workload is never written (KEDA scales
    /// it up from any 0 written to it); it sleeps through the ScaledObject's pause, and any
    /// other count is the ScaledObject's floor (a member of its own, `floor_of`).
    pub keda: bool,
    /// For an HPA (or a ScaledObject): the autoscaled workload whose floor it is, and its
    /// `maxReplicas` (a floor above it is clamped, as in the HPA form). Not counted as a
    /// workload of the group.
    pub floor_of: Option<(String, i32)>,
    /// Its count and its record are two requests (a custom kind: the record on the object, the
    /// count through `/scale`), the record first.
    pub two_step: bool,
    /// Not held by this TDSet (outside the selector, excluded, or the group let go of), and
    /// another TDSet holds it now: the count is that one's to write, so only this TDSet's
    /// record is taken off (its count stays).
    pub handed_to: Option<String>,
}

#[cfg(test)]
impl Member {
    /// A member held by the TDSet planning, with no record, autoscaler or floor: what tests
    /// build theirs from.
    pub(crate) fn held(api_version: &str, kind: &str, name: &str, value: Value) -> Member {
        Member {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: None,
            value,
            record: None,
            place: Place::Held,
            autoscaled_by: None,
            keda: false,
            floor_of: None,
            two_step: false,
            handed_to: None,
        }
    }
}

impl Member {
    /// Whether this member is `workload`'s floor: the HPA (or ScaledObject) that scales it, by
    /// name and kind, never one of a same-named workload of another kind.
    pub fn is_floor_of(&self, workload: &Member) -> bool {
        workload.autoscaled_by.as_deref() == Some(self.name.as_str())
            && (self.kind == keda::KIND) == workload.keda
            && self
                .floor_of
                .as_ref()
                .is_some_and(|(w, _)| *w == workload.name)
    }

    /// Its own count: the record's, unless someone else set the value since (a value that
    /// differs from what the record says was set), or the value now when there is no record.
    pub fn own(&self) -> Value {
        own_of(self.record.as_ref(), self.value)
    }
}

fn own_of(record: Option<&Record>, value: Value) -> Value {
    match (record, value) {
        (Some(r), _) if r.set(value) => r.own,
        // A pause is never a ScaledObject's own: the operator's is taken off, and one of
        // someone else's leaves it to them (see `place`).
        (_, Value::Keda { floor, .. }) => Value::Keda {
            floor,
            paused: false,
        },
        _ => value,
    }
}

/// A workload's own replica count, read from its annotations and `spec.replicas`: what a
/// `scaleTargetRef` TDSet taking it over from a group records as its original. The group's
/// sleeping count is not the workload's own.
pub fn own_replicas(annotations: &BTreeMap<String, String>, replicas: i32) -> i32 {
    own_of(
        Record::read(annotations, Value::Replicas(replicas)).as_ref(),
        Value::Replicas(replicas),
    )
    .replicas()
}

/// An HPA's own floor, read from its annotations and `spec.minReplicas`: what a
/// `scaleTargetRef` TDSet on the HPA taking it over from a group records as its original.
pub fn own_floor(annotations: &BTreeMap<String, String>, min: i32) -> i32 {
    own_of(
        Record::read(annotations, Value::Floor(min)).as_ref(),
        Value::Floor(min),
    )
    .replicas()
}

/// Where a workload stands with the TDSet planning for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Selected and held by this TDSet: it follows the schedule.
    Held,
    /// Selected but named in `exclude`.
    Excluded,
    /// Selected, but another TDSet holds it (an older claim, or its owner).
    HeldElsewhere(String),
    /// Not selected (any more); only planned for while it carries this TDSet's record.
    Outside,
}

/// Why a write is made, for the Event and the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The schedule's level applies (a boundary, or a workload joining the group).
    Schedule,
    /// Someone else set the count while the TDSet held it: that is now its own count, and the
    /// level is applied again.
    ChangedElsewhere { to: Value },
    /// The level is `own`: the own count is given back.
    Own,
    /// It is no longer held: the own count is given back.
    Left(LeaveReason),
    /// Only the record changes, never the count: a workload KEDA scales, asleep through its
    /// ScaledObject (see `keda_record`).
    Record,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaveReason {
    NoLongerSelected,
    Excluded,
    HeldElsewhere(String),
    /// The TDSet is being deleted (or no longer has the group form).
    Released,
}

impl fmt::Display for LeaveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaveReason::NoLongerSelected => f.write_str("it no longer matches the selector"),
            LeaveReason::Excluded => f.write_str("it is excluded"),
            LeaveReason::HeldElsewhere(h) => write!(f, "TDSet {h} holds it (the older claim)"),
            LeaveReason::Released => f.write_str("the TDSet let go of its group"),
        }
    }
}

/// One write to one workload: set `to`, and either record (holding) or drop the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub member: usize,
    pub from: Value,
    pub to: Value,
    /// The record to leave on the workload; `None` removes it.
    pub record: Option<Record>,
    pub why: Why,
}

impl Write {
    /// The server-side apply body: the value and the record with the holder's label (or,
    /// without a record, no annotations or labels of ours, which removes them), guarded by the
    /// uid and the resourceVersion the plan was made from, so a write planned from a stale read
    /// is refused (409), never applied over someone else's newer change.
    pub fn body(&self, m: &Member, holder_uid: &str) -> Json {
        let mut metadata = json!({"name": m.name, "uid": m.uid});
        if let Some(rv) = &m.resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        if let Some(r) = &self.record {
            metadata["annotations"] = r.annotations();
            metadata["labels"] = json!({HELD_BY_UID: holder_uid});
        }
        if let Some(Json::Object(value)) = self.to.annotations() {
            let annotations = metadata["annotations"].as_object_mut();
            match annotations {
                Some(a) => a.extend(value),
                None => metadata["annotations"] = Json::Object(value),
            }
        }
        json!({
            "apiVersion": m.api_version,
            "kind": m.kind,
            "metadata": metadata,
            "spec": self.to.spec(),
        })
    }
}

/// Why a held workload does not get the level's count even when every write lands: an
/// autoscaled one whose HPA (or ScaledObject) cannot be set (not found among the group's
/// members).
fn held_back(level: Count, m: &Member, floors: &[&Member]) -> Option<String> {
    if let (Count::Replicas(_), Some(so), true) = (level, &m.autoscaled_by, m.keda) {
        return (!floors.iter().any(|f| f.is_floor_of(m))).then(|| {
            format!(
                "ScaledObject {so} scales it, and it cannot be paused or floored: it runs under \
                 KEDA as it is"
            )
        });
    }
    match (level, &m.autoscaled_by) {
        (Count::Replicas(n), Some(hpa)) if n > 0 && !floors.iter().any(|f| f.is_floor_of(m)) => {
            Some(format!(
                "HorizontalPodAutoscaler {hpa} scales it, and its floor cannot be set: it runs under \
                 the HPA as it is"
            ))
        }
        _ => None,
    }
}

/// The writes for a group at a level, and the status they lead to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub status: GroupStatus,
}

/// The most objects carrying its label a group reads in one reconcile: twice what it may take
/// of its own (`--group-max-workloads`), so that what younger groups yield to it (which it
/// takes over past that) is read too. Anyone who can read a TDSet's uid can put its label on
/// anything: a bound, not everything labelled.
pub fn held_reads(room: usize) -> usize {
    room.saturating_mul(2)
}

/// What to write to each member for `level`, as TDSet `me`, when nothing is written ahead
/// and nothing bounds what it takes (see `plan_within`).
pub fn plan(me: &str, level: Count, members: &[Member]) -> Plan {
    plan_within(me, level, level, members, usize::MAX)
}

/// What to write to each member for `level`, as TDSet `me`, while the schedule itself is at
/// `scheduled` (a rise written ahead of its transition, `warmUp`, has `level` above it), taking
/// no workload past `room` held in all.
///
/// - A CronJob follows `scheduled`, never the lead: its suspend is no capacity to warm up,
///   and lifted early it would let jobs start before the window does.
/// - A held workload goes to the level's value; its own count is the record's (or, where the
///   value now differs from what the record says was set, the value now), or, without a
///   record, the value now. A change is recorded in the same write.
/// - Where the level gives it its own count, it is released: own value back, record removed.
/// - A workload that carries this TDSet's record but is no longer held is released too.
/// - Nothing else is written: not an excluded workload, not one held elsewhere, not one
///   carrying another TDSet's record while not held.
/// - A workload held but not read would never be given its own count back, and what the
///   TDSet holds is listed by its label, at most `held_reads(room)` objects a reconcile
///   (`room`: `--group-max-workloads`). It takes a workload no other TDSet records while it
///   holds fewer than `room`; one a younger TDSet yields to it (that one's record on it, and
///   nobody else would wake it) while it holds fewer than `held_reads(room)`. One past that
///   runs as it is, and is said in the status.
pub fn plan_within(
    me: &str,
    level: Count,
    scheduled: Count,
    members: &[Member],
    room: usize,
) -> Plan {
    // What it holds and keeps (those it lets go of now are given back in this same round).
    let mut holding = (members.iter())
        .filter(|m| m.place == Place::Held && m.record.as_ref().is_some_and(|r| r.holder == me))
        .count();
    let held_at_first = holding;
    let mut writes = Vec::new();
    let mut status = GroupStatus::default();
    let mut held = 0;
    let floors: Vec<&Member> = members
        .iter()
        .filter(|m| m.floor_of.is_some() && m.place == Place::Held)
        .collect();
    for (i, m) in members.iter().enumerate() {
        let mine = m.record.as_ref().filter(|r| r.holder == me);
        // An HPA is a floor, not a workload: it counts through its workload.
        let counted = m.floor_of.is_none();
        if m.place != Place::Outside && counted {
            status.matched += 1;
        }
        let leave = match &m.place {
            Place::Held => None,
            Place::Excluded => {
                status.excluded += u32::from(counted) as i32;
                Some(LeaveReason::Excluded)
            }
            Place::HeldElsewhere(h) => {
                status.conflicting += u32::from(counted) as i32;
                Some(LeaveReason::HeldElsewhere(h.clone()))
            }
            Place::Outside => Some(LeaveReason::NoLongerSelected),
        };
        if let Some(reason) = leave {
            // Only a record of this TDSet's is taken back; a workload held elsewhere is the
            // holder's to write (it reads this record's own count when it takes over).
            // A workload KEDA scales keeps it until KEDA runs it again (see `keda_record`).
            let asleep = m.keda && !keda_resumed(m, members.iter());
            if mine.is_some() && !matches!(reason, LeaveReason::HeldElsewhere(_)) && !asleep {
                writes.push(Write {
                    member: i,
                    from: m.value,
                    // KEDA's workload is never written: its ScaledObject is given back.
                    to: if m.handed_to.is_some() || m.keda {
                        m.value
                    } else {
                        m.own()
                    },
                    record: None,
                    why: Why::Left(reason),
                });
            }
            continue;
        }
        held += u32::from(counted) as i32;
        let write = held_write(me, (level, scheduled), (i, m), members, &floors);
        // A take: this TDSet's record where there was none of its own (a take-over: where
        // another TDSet's was).
        let taking = mine.is_none() && write.as_ref().is_some_and(|w| w.record.is_some());
        // An HPA's floor is held with its workload, which was taken within the room.
        let limit = match m.record {
            _ if m.floor_of.is_some() => usize::MAX,
            Some(_) => held_reads(room),
            None => room,
        };
        let past_room = taking && holding >= limit;
        if taking && !past_room {
            holding += 1;
        }
        if let Some(w) = write.filter(|_| !past_room) {
            writes.push(w);
        }
        if !counted {
            continue;
        }
        let back = if past_room {
            Some(format!(
                "not taken: the TDSet holds {held_at_first} workloads, as many as it may take \
                 (--group-max-workloads {room}, HPAs included); it runs as it is"
            ))
        } else {
            held_back(level, m, &floors)
        };
        match back {
            Some(message) => {
                if status.not_at_schedule.len() < MAX_LISTED {
                    status.not_at_schedule.push(MemberStatus {
                        kind: m.kind.clone(),
                        name: m.name.clone(),
                        replicas: Some(m.value.replicas()),
                        scheduled: level.replicas(),
                        message,
                    });
                }
            }
            // Counted as reached: the plan gets it there; `not_reached` takes back failed
            // writes.
            None => status.at_schedule += 1,
        }
    }
    status.targets = format!("{}/{held}", status.at_schedule);
    Plan { writes, status }
}

/// The write that takes held member `i` to the level (`scheduled`: the schedule's own, where
/// a rise is written ahead), recording its own count in the same write, or gives its own
/// count back; none where it is there already.
fn held_write(
    me: &str,
    (level, scheduled): (Count, Count),
    (i, m): (usize, &Member),
    members: &[Member],
    floors: &[&Member],
) -> Option<Write> {
    if m.keda {
        return keda_record(me, level, (i, m), floors);
    }
    // Someone else's change while a TDSet held it becomes its own count.
    let own = m.own();
    let changed_elsewhere = m.record.as_ref().is_some_and(|r| !r.set(m.value));
    let effective = match (level, &m.autoscaled_by, m.floor_of.as_ref()) {
        // Its HPA carries any count but 0.
        (Count::Replicas(n), Some(_), _) if n > 0 => Count::Own,
        (Count::Replicas(n), _, Some((_, max))) => Count::Replicas(n.min(*max)),
        _ if matches!(own, Value::Suspended(_)) => scheduled,
        _ => level,
    };
    let to = Value::at(effective, own);
    let why = if changed_elsewhere {
        Why::ChangedElsewhere { to: m.value }
    } else if to == own {
        Why::Own
    } else {
        Why::Schedule
    };
    if to == own {
        // Its own count: nothing of the TDSet's stays on it.
        return (m.record.is_some() || m.value != own).then_some(Write {
            member: i,
            from: m.value,
            to,
            record: None,
            why,
        });
    }
    // A ScaledObject is paused once its workload carries the record that wakes it should the
    // ScaledObject go: in the round after that record's write.
    if matches!(to, Value::Keda { paused: true, .. }) && !recorded_asleep(me, m, members) {
        return None;
    }
    // Two requests: what a crash between them leaves is announced, and dropped once the value
    // is there (else a count set to it later by someone else would pass for ours).
    let previous = (m.two_step && m.value != to).then_some(m.value);
    let record = Record {
        holder: me.to_string(),
        own,
        scheduled: to,
        previous,
    };
    (m.value != to || m.record.as_ref() != Some(&record)).then_some(Write {
        member: i,
        from: m.value,
        to,
        record: Some(record),
        why,
    })
}

/// The write of the record on a workload KEDA scales (never of its count). While its
/// ScaledObject sleeps by this TDSet, the record says what to wake the workload to should the
/// ScaledObject go (deleted, or pointed elsewhere: KEDA leaves the workload at 0, and nothing
/// else would take it off): its count before, or where it already ran 0 its ScaledObject's
/// own floor (at least 1). Otherwise no record of this TDSet's stays on it.
fn keda_record(
    me: &str,
    level: Count,
    (i, m): (usize, &Member),
    floors: &[&Member],
) -> Option<Write> {
    let mine = m.record.as_ref().filter(|r| r.holder == me);
    let floor = floors.iter().find(|f| f.is_floor_of(m));
    let asleep = matches!(level, Count::Replicas(0)) && floor.is_some();
    let record = match (asleep, mine) {
        (false, None) => return None,
        (true, Some(r)) if r.scheduled == Value::Replicas(0) => return None,
        (false, Some(_)) if !keda_resumed(m, floors.iter().copied()) => return None,
        (false, Some(_)) => None,
        (true, _) => Some(Record {
            holder: me.to_string(),
            // Its own count (another TDSet's record taken over), else the ScaledObject's own
            // floor, at least 1, where it already runs 0.
            own: Value::Replicas(match m.own().replicas() {
                n if n > 0 => n,
                _ => floor.map_or(1, |f| f.own().replicas().max(1)),
            }),
            scheduled: Value::Replicas(0),
            previous: None,
        }),
    };
    Some(Write {
        member: i,
        from: m.value,
        to: m.value,
        record,
        why: Why::Record,
    })
}

/// Whether KEDA runs workload `m` again: the ScaledObject that scales it (among `floors`)
/// read back without the operator's pause, and the workload off 0. Until then its record of
/// the night stays (a ScaledObject deleted meanwhile, or a KEDA that stays paused, keda#6982,
/// leaves the workload to it).
fn keda_resumed<'a>(m: &Member, mut floors: impl Iterator<Item = &'a Member>) -> bool {
    m.value.replicas() > 0
        && floors.all(|f| !f.is_floor_of(m) || !matches!(f.value, Value::Keda { paused: true, .. }))
}

/// Where letting go of a group (the TDSet deleted, or another form) leaves a workload that
/// KEDA scales and that sleeps on this TDSet's record: its ScaledObject's pause is given back
/// (in the same round, or before), and KEDA is waited for, bounded, as the `scaleTargetRef`
/// form waits (a ScaledObject KEDA leaves paused, keda#6982, or a KEDA that is down, would hold
/// the workload at 0 with the record that wakes it gone with the TDSet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KedaRelease {
    /// KEDA runs it again, may keep it at 0 (a floor of 0, an `idleReplicaCount`), or someone
    /// else holds it now: the record goes, the count is theirs.
    Resumed,
    /// Not yet: the record stays, and the TDSet (its finalizer) with it.
    Wait,
    /// Not within the bound: the record's own count is written directly, as a workload no
    /// ScaledObject scales gets it.
    Wake,
}

/// What a release reads of the ScaledObject that scales a workload asleep on record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KedaSeen {
    pub value: Value,
    /// The holder its record names (this TDSet's while its pause is not given back yet).
    pub holder: Option<String>,
    /// KEDA says it is paused (its `Paused` condition).
    pub keda_paused: bool,
    /// It has an `idleReplicaCount`.
    pub idle: bool,
}

/// How long a release has waited for KEDA: since its first wait, and since it first saw the
/// ScaledObject's pause given back (`None`: not yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KedaWaited {
    pub since_first: std::time::Duration,
    pub since_unpaused: Option<std::time::Duration>,
}

/// KEDA is given this long after the pause reads back off (twice the form's grace).
pub const KEDA_RESUME_BOUND: std::time::Duration = std::time::Duration::from_secs(60);
/// A pause that cannot be given back (refused, failing) holds the release no longer than this.
pub const KEDA_RELEASE_AT_MOST: std::time::Duration = std::time::Duration::from_secs(300);

/// The decision for workload `m`, asleep on `me`'s record, scaled through `so`.
pub fn keda_release(me: &str, m: &Member, so: &KedaSeen, waited: KedaWaited) -> KedaRelease {
    let past = |bound| match waited.since_unpaused {
        Some(d) if d >= bound => KedaRelease::Wake,
        _ if waited.since_first >= KEDA_RELEASE_AT_MOST => KedaRelease::Wake,
        _ => KedaRelease::Wait,
    };
    let ours = so.holder.as_deref() == Some(me);
    match so.value {
        // Held by another now (a TDSet's claim, the ScaledObject's record another's): only
        // this TDSet's record goes.
        _ if m.handed_to.is_some() || (so.holder.is_some() && !ours) => KedaRelease::Resumed,
        // This TDSet's pause, not given back yet.
        Value::Keda { paused: true, .. } if ours => past(KEDA_RELEASE_AT_MOST),
        // A night pause that is someone else's keeps it; theirs to wake.
        Value::Keda { paused: true, .. } => KedaRelease::Resumed,
        _ if so.keda_paused => past(KEDA_RESUME_BOUND),
        Value::Keda { floor, .. } if floor == 0 || so.idle || m.value.replicas() > 0 => {
            KedaRelease::Resumed
        }
        _ => past(KEDA_RESUME_BOUND),
    }
}

/// The writes that give workload `m` back when TDSet `me` lets go of its group; `keda`, where
/// a ScaledObject scales it and it sleeps on record, what `keda_release` decided.
pub fn released(me: &str, m: &Member, keda: Option<KedaRelease>) -> Vec<Write> {
    let why = Why::Left(LeaveReason::Released);
    let writes = match keda {
        Some(KedaRelease::Wait) => return Vec::new(),
        // Its count is KEDA's: only the record goes.
        Some(KedaRelease::Resumed) => {
            return vec![Write {
                member: 0,
                from: m.value,
                to: m.value,
                record: None,
                why,
            }];
        }
        Some(KedaRelease::Wake) => {
            let direct = Member {
                keda: false,
                ..m.clone()
            };
            plan(me, Count::Own, std::slice::from_ref(&direct)).writes
        }
        None => plan(me, Count::Own, std::slice::from_ref(m)).writes,
    };
    (writes.into_iter())
        .map(|w| Write {
            why: why.clone(),
            ..w
        })
        .collect()
}

/// Whether `m` sleeps on `me`'s record (what the TDSet's letting go must give back).
pub fn asleep_on_record(me: &str, m: &Member) -> bool {
    (m.record.as_ref()).is_some_and(|r| r.holder == me && r.scheduled == Value::Replicas(0))
}

/// Whether the workload ScaledObject `so` scales carries this TDSet's record of its sleep.
fn recorded_asleep(me: &str, so: &Member, members: &[Member]) -> bool {
    (members.iter()).any(|w| so.is_floor_of(w) && asleep_on_record(me, w))
}

/// Marks the workloads whose write failed as not at their count (the first `MAX_LISTED`).
pub fn not_reached(
    status: &mut GroupStatus,
    members: &[Member],
    failed: &[(usize, Value, String)],
) {
    for (i, to, message) in failed {
        // An HPA's floor counts through its workload, never on its own.
        if members.get(*i).is_some_and(|m| m.floor_of.is_none()) {
            status.at_schedule -= 1;
        }
        if status.not_at_schedule.len() < MAX_LISTED
            && let Some(m) = members.get(*i)
        {
            status.not_at_schedule.push(MemberStatus {
                kind: m.kind.clone(),
                name: m.name.clone(),
                replicas: Some(m.value.replicas()),
                scheduled: Some(to.replicas()),
                message: message.clone(),
            });
        }
    }
    let held = status.matched - status.excluded - status.conflicting;
    status.targets = format!("{}/{held}", status.at_schedule);
}

#[cfg(test)]
mod tests;
