//! The `TDSet` custom resource (`schedule.rs/v1`): spec, status and the OpenAPI schema the
//! API server validates against. Everything the API server can check is declared here, so a
//! bad manifest is rejected at `kubectl apply` with the field's path in the message.

use std::fmt;

mod group;
mod idle;
mod selector;
mod source;
mod wake;
pub use group::*;
pub use idle::*;
pub use selector::Selector;
pub use source::Source;
pub use wake::*;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most windows one TDSet may hold: bounds the CEL cost and the overlap check.
pub const MAX_WINDOWS: usize = 64;
/// The most replicas a window or the default may ask for.
pub const MAX_REPLICAS: i32 = 10_000;

/// A workload whose replica count follows the time of day.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "schedule.rs",
    version = "v1",
    kind = "TDSet",
    plural = "tdsets",
    singular = "tdset",
    shortname = "tds",
    namespaced,
    status = "TDSetStatus",
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.desiredReplicas","description":"Replicas the schedule wants now"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"Replicas of the workload"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Ready replicas of the workload"}"#,
    printcolumn = r#"{"name":"Window","type":"string","jsonPath":".status.activeWindow","description":"The active window; empty when defaultReplica applies"}"#,
    printcolumn = r#"{"name":"Override","type":"string","jsonPath":".status.activeOverride","priority":1,"description":"The active override"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend","description":"True while the operator writes nothing to the workload"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextTransitionTime","description":"When the replica count changes next"}"#,
    printcolumn = r#"{"name":"Next-Replicas","type":"integer","jsonPath":".status.nextReplicas","priority":1}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".status.desiredMaxReplicas","priority":1,"description":"HPA form: the maxReplicas the schedule sets now (absent: the HPA's own)"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status","priority":1}"#,
    printcolumn = r#"{"name":"Target","type":"string","jsonPath":".status.target.name","priority":1,"description":"The referenced object (scaleTargetRef)"}"#,
    printcolumn = r#"{"name":"Targets","type":"string","jsonPath":".status.group.targets","description":"Group form: workloads at their scheduled count / workloads held"}"#,
    printcolumn = r#"{"name":"Shard","type":"string","jsonPath":".status.shard","priority":1,"description":"The shard that reconciles it (when the operator runs in shards)"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.container), has(self.template), has(self.scaleTargetRef), has(self.scaleTargetSelector)].filter(x, x).size() == 1",
        "message": "exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector must be set",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "has(self.defaultReplica) || has(self.scaleTargetSelector)",
        "message": "spec.defaultReplica is required; only the group form (spec.scaleTargetSelector) may omit it, for the level own (each workload runs its own count)",
        "fieldPath": ".defaultReplica",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "has(self.scaleTargetSelector) || !has(self.overrides) || self.overrides.all(o, has(o.replica))",
        "message": "an override's replica is required; only the group form (spec.scaleTargetSelector) may omit it, for the level own",
        "fieldPath": ".overrides",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.ramp) || (has(self.defaultReplica) && (!has(self.overrides) || self.overrides.all(o, has(o.replica))))",
        "message": "a ramp needs a number at every level: set spec.defaultReplica and every override's replica (a ramp cannot lead to or from the level own)",
        "fieldPath": ".ramp",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.service) || !(has(self.scaleTargetRef) || has(self.scaleTargetSelector))",
        "message": "spec.service needs an owned Deployment (spec.container or spec.template); a referenced or selected workload's Service is managed with it",
        "fieldPath": ".service",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.defaultMaxReplica) || !has(self.defaultReplica) || self.defaultMaxReplica >= self.defaultReplica",
        "message": "spec.defaultMaxReplica (the HPA's ceiling) must be at least spec.defaultReplica (its floor)",
        "fieldPath": ".defaultMaxReplica",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "(!has(self.defaultMaxReplica) && self.schedulingConfig.all(w, !has(w.maxReplica)) && (!has(self.overrides) || self.overrides.all(o, !has(o.maxReplica)))) || (has(self.scaleTargetRef) && ((self.scaleTargetRef.kind == 'HorizontalPodAutoscaler' && self.scaleTargetRef.apiVersion.startsWith('autoscaling/')) || (self.scaleTargetRef.kind == 'ScaledObject' && self.scaleTargetRef.apiVersion.startsWith('keda.sh/'))) && !has(self.ramp))",
        "message": "maxReplica and defaultMaxReplica set an autoscaler's maximum: they need spec.scaleTargetRef to a HorizontalPodAutoscaler or a KEDA ScaledObject, and no spec.ramp",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.wakeOnRequest) || !has(self.ramp) || !has(self.scaleTargetSelector)",
        "message": "spec.wakeOnRequest wakes a group to the level own (each workload its own count), which a ramp cannot step toward: remove spec.ramp or spec.wakeOnRequest",
        "fieldPath": ".wakeOnRequest",
        "reason": "FieldValueForbidden"
    },
    {
        "rule": "!has(self.idle) || has(self.wakeOnRequest) || (has(self.idle.during) && self.idle.during != 'RequestWakeUps')",
        "message": "spec.idle.during RequestWakeUps (its default) ends request wake-ups early, which needs spec.wakeOnRequest; for a TDSet no request wakes, set spec.idle.during to OutsideWindows, Always or Windows",
        "fieldPath": ".idle",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.idle) || has(self.wakeOnRequest) || self.idle.signals.all(s, !has(s.prometheus) || has(s.prometheus.service))",
        "message": "a prometheus signal's service defaults to the Services of spec.wakeOnRequest: without it, name the Service (spec.idle.signals[].prometheus.service)",
        "fieldPath": ".idle",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.onDelete) || has(self.scaleTargetRef)",
        "message": "spec.onDelete applies to spec.scaleTargetRef only; an owned Deployment is deleted with its TDSet",
        "fieldPath": ".onDelete",
        "reason": "FieldValueForbidden"
    }
]))]
pub struct TDSetSpec {
    /// The seed's form: one container, run by a Deployment the TDSet owns. Exactly one of
    /// `container`, `template` and `scaleTargetRef` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSpec>,
    /// A full pod template for a Deployment the TDSet owns. The operator adds its selector
    /// label to the template's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Box<PodTemplateSpec>>,
    /// An existing object in the TDSet's namespace whose replica count the schedule sets:
    /// any kind with a `/scale` subresource, or an autoscaling/v2 HorizontalPodAutoscaler
    /// whose `minReplicas` becomes the scheduled floor. Never created, owned or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_target_ref: Option<ScaleTargetRef>,
    /// The group form: every workload of the selected kinds whose labels match, in the TDSet's
    /// namespace, follows the schedule. Each workload's own count is recorded on it before its
    /// first change and given back when the level is `own` or it leaves the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_target_selector: Option<ScaleTargetSelector>,
    /// With `scaleTargetRef`: what happens to the target when the TDSet is deleted. `Keep`
    /// (default) leaves it as it is; `Restore` puts back the count it had when the TDSet took
    /// it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_delete: Option<OnDelete>,
    /// When present, a ClusterIP Service `port -> the container's port` is owned too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// The windows. Empty means `defaultReplica` at all times. The first active window in list
    /// order wins.
    #[schemars(length(max = 64))]
    pub scheduling_config: Vec<Window>,
    /// Replicas when no window is active. 0 lets a workload sleep outside its windows.
    /// Required, except in the group form, where omitting it means `own`: each workload runs
    /// its own count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub default_replica: Option<i32>,
    /// HPA form only: the HPA's `maxReplicas` when no window is active, at least
    /// `defaultReplica`. Absent: the HPA's own `maxReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub default_max_replica: Option<i32>,
    /// The longest wait in minutes between two full checks (a drift safety net, not the
    /// boundary precision). Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440))]
    pub interval_mint: Option<i32>,
    /// Dates (`YYYY-MM-DD`) or inclusive date ranges (`YYYY-MM-DD/YYYY-MM-DD`) in `timeZone`.
    /// On these dates a window with a `days` list starts only if the list names `Hol`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 366))]
    pub holidays: Vec<Holiday>,
    /// Names of `TDCalendar`s whose holidays apply too, each date read in `timeZone`. A
    /// calendar that does not exist contributes nothing and is reported (`CalendarNotFound`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_CALENDARS), extend("x-kubernetes-list-type" = "set"))]
    pub calendars: Vec<CalendarName>,
    /// Time-bounded counts that win over windows, holidays and `defaultReplica` while active
    /// (`start <= t < end`); the first active one in list order applies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["start", "end"])
    )]
    pub overrides: Vec<Override>,
    /// While true the operator keeps computing and reporting, but writes nothing to the
    /// workload. Setting it back applies the schedule at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Move toward a new level gradually: at most `step` replicas every `every`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Scale-ups written ahead of their transition, so that the higher count is serving at
    /// it; scale-downs are never early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<WarmUp>,
    /// While the schedule has the workloads asleep, a request to one of these Services wakes
    /// them for a while (see docs/wake-on-request.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_on_request: Option<WakeOnRequest>,
    /// Asleep when nobody comes: idleness, read from the cluster's own metrics, within the
    /// calendar (see docs/idle.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Idle>,
    /// IANA time zone in which window times are wall-clock times. Default "UTC".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")
    )]
    pub time_zone: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ContainerSpec {
    /// Container image reference.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^\S+$"))]
    pub image: String,
    /// The port the container listens on.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// The most calendars one TDSet may name.
pub const MAX_CALENDARS: usize = 8;

/// The name of a `TDCalendar` (a DNS subdomain).
#[derive(
    Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(transparent)]
pub struct CalendarName(
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub String,
);

/// Holidays shared by many TDSets: each names the calendar in `spec.calendars`, and reads its
/// dates in its own time zone. Cluster-wide policy: the operator reads calendars, and only
/// those who may write cluster-scoped objects change them.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "schedule.rs",
    version = "v1",
    kind = "TDCalendar",
    plural = "tdcalendars",
    singular = "tdcalendar",
    shortname = "tdcal",
    status = "TDCalendarStatus",
    printcolumn = r#"{"name":"Days","type":"integer","jsonPath":".status.days","description":"Days the calendar's dates and ranges cover"}"#,
    printcolumn = r#"{"name":"Used-By","type":"integer","jsonPath":".status.usedBy","description":"TDSets that name it (of those the operator watches)"}"#,
    printcolumn = r#"{"name":"Problem","type":"string","jsonPath":".status.problem","description":"Dates the operator cannot read; its TDSets schedule without them","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TDCalendarSpec {
    /// Dates (`YYYY-MM-DD`) or inclusive date ranges (`YYYY-MM-DD/YYYY-MM-DD`), as a TDSet's
    /// `spec.holidays`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 366))]
    pub holidays: Vec<Holiday>,
    /// More dates, from an iCalendar (RFC 5545) document in a ConfigMap: all-day events,
    /// date ranges and yearly rules, as published holiday files and calendar exports hold
    /// them. An edit of the ConfigMap reaches the TDSets at once. A document the operator
    /// cannot read (an event with a time of day, a rule other than yearly, a malformed line,
    /// more than 1 MiB) is said in `status.problem`, and none of this calendar's dates apply
    /// until it is fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ics: Option<IcsSource>,
}

/// Where a calendar's iCalendar document is.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IcsSource {
    pub config_map_ref: ConfigMapKeyRef,
}

/// A key of a ConfigMap, in any namespace (a calendar is cluster policy).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct ConfigMapKeyRef {
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
    /// The data key that holds the document, e.g. `holidays.ics`.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// What the operator reports on a calendar.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TDCalendarStatus {
    /// How many days its dates and ranges cover (overlaps counted once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<i64>,
    /// How many TDSets name it, of those the operator watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<i64>,
    /// Dates the operator cannot read (stored before the schema checked them): until they
    /// are fixed, the TDSets that name this calendar schedule without any of its dates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub problem: Option<String>,
}

/// A holiday: a date, or an inclusive range of dates, in the TDSet's time zone.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct Holiday(
    #[schemars(
        length(min = 10, max = 21),
        regex(pattern = r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])(/[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))?$"),
        extend("x-kubernetes-validations" = [{
            "rule": "self.size() != 21 || self.substring(11, 21) >= self.substring(0, 10)",
            "message": "a date range must not end before it starts (YYYY-MM-DD/YYYY-MM-DD, both inclusive)",
            "reason": "FieldValueInvalid"
        }, {
            // The pattern lets 2027-02-29 or 2026-04-31 through; a date the operator cannot
            // read would otherwise be found only when a TDSet evaluates it.
            "rule": "self.size() < 10 || (!format.date().validate(self.substring(0, 10)).hasValue() && (self.size() != 21 || !format.date().validate(self.substring(11, 21)).hasValue()))",
            "message": "not a real date: every date must exist (YYYY-MM-DD; there is no 2027-02-29 or 2026-04-31)",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub String,
);

/// A count that applies from `start` (inclusive) to `end` (exclusive), above everything else.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "timestamp(self.end) > timestamp(self.start)",
    "message": "end must be after start",
    "fieldPath": ".end",
    "reason": "FieldValueInvalid"
}, {
    "rule": "!has(self.maxReplica) || !has(self.replica) || self.maxReplica >= self.replica",
    "message": "maxReplica (the HPA's ceiling) must be at least replica (its floor)",
    "fieldPath": ".maxReplica",
    "reason": "FieldValueInvalid"
}]))]
pub struct Override {
    /// RFC 3339 instant with an offset or Z, e.g. "2026-11-27T08:00:00+01:00".
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub start: String,
    /// RFC 3339 instant (exclusive); must be after `start`.
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub end: String,
    /// The count while active. Required, except in the group form, where omitting it means
    /// `own` (each workload runs its own count: a manual wake-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub replica: Option<i32>,
    /// HPA form only: the HPA's `maxReplicas` while the override is active, at least
    /// `replica`. Absent: the HPA's own `maxReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_replica: Option<i32>,
    /// Shown in status and Events, e.g. "product launch".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub reason: Option<String>,
}

impl Override {
    /// Its `reason`, or `start-end`.
    pub fn label(&self) -> String {
        self.reason
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.start, self.end))
    }
}

/// At a change of level, the count moves by at most `step` replicas every `every`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ramp {
    /// Replicas per step, >= 1.
    #[schemars(range(min = 1, max = 10000))]
    pub step: i32,
    /// A duration such as "30s", "15m" or "1h30m", from 1m to 24h.
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": "self != '' && duration(self) >= duration('1m') && duration(self) <= duration('24h')",
            "message": "must be a duration from 1m to 24h, e.g. \"15m\" or \"1h30m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub every: String,
    /// Both (default): ramp up before a rise and down after a fall; Up or Down: one only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<RampDirection>,
}

/// A duration of the warm-up or of a tier's timeout: "30s", "2m", "1h"; from 1s to 1h.
const SHORT_DURATION: &str =
    "self != '' && duration(self) >= duration('1s') && duration(self) <= duration('1h')";

/// When a scale-up is written: `lead` ahead of its transition (`Fixed`), or ahead by what the
/// workload was measured to need (`Measured`), at most `max`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.mode) || self.mode != 'Fixed' || has(self.lead)",
        "message": "mode Fixed writes every scale-up spec.warmUp.lead ahead: set it",
        "fieldPath": ".lead",
        "reason": "FieldValueRequired"
    },
    {
        "rule": "!has(self.lead) || duration(self.lead) <= (has(self.max) ? duration(self.max) : duration('10m'))",
        "message": "spec.warmUp.lead is longer than spec.warmUp.max (default 10m), which caps every lead",
        "fieldPath": ".lead",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct WarmUp {
    /// Off (default): every change is written at its instant. Fixed: scale-ups `lead` ahead.
    /// Measured: scale-ups ahead by the workload's measured time to Ready. In YAML write
    /// "Off" quoted: unquoted, YAML reads it as false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<WarmUpMode>,
    /// Fixed: the lead. Measured: the lead until the workload has been measured. A duration
    /// such as "30s", "2m" or "1h", from 1s to 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": SHORT_DURATION,
            "message": "must be a duration from 1s to 1h, e.g. \"90s\" or \"2m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub lead: Option<String>,
    /// A cap on any lead, measured or not. Default 10m, at most 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": SHORT_DURATION,
            "message": "must be a duration from 1s to 1h, e.g. \"10m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub max: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WarmUpMode {
    #[default]
    Off,
    Fixed,
    Measured,
}

/// The cap on a lead when `warmUp.max` is not set.
pub const DEFAULT_WARM_UP_MAX: chrono::Duration = chrono::Duration::minutes(10);

impl WarmUp {
    pub fn mode(&self) -> WarmUpMode {
        self.mode.unwrap_or_default()
    }
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RampDirection {
    #[default]
    Both,
    Up,
    Down,
}

/// An object in the TDSet's own namespace (there is no namespace field, on purpose).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// `group/version` (e.g. `apps/v1`, `autoscaling/v2`, `argoproj.io/v1alpha1`) or `v1`.
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$"
        )
    )]
    pub api_version: String,
    /// The kind, e.g. `Deployment`, `StatefulSet`, `HorizontalPodAutoscaler`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// The object's name, in the TDSet's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// The API group of an `apiVersion` (empty for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

impl ScaleTargetRef {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// Whether this names a HorizontalPodAutoscaler (whose minReplicas is the floor).
    pub fn is_hpa(&self) -> bool {
        self.group() == "autoscaling" && self.kind == "HorizontalPodAutoscaler"
    }

    /// Whether this names a KEDA ScaledObject (paused and floored where KEDA keeps them).
    pub fn is_scaled_object(&self) -> bool {
        self.group() == "keda.sh" && self.kind == "ScaledObject"
    }
}

impl fmt::Display for ScaleTargetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnDelete {
    #[default]
    Keep,
    Restore,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ServiceSpec {
    /// The Service port, forwarded to `container.port`.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// One scheduling window `[startTime, endTime)` in wall-clock time; `startTime > endTime`
/// wraps midnight, so `endTime: 0` means "until midnight".
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    // Only compares well-formed times; a malformed one is reported by its own field's rule.
    "rule": "!((type(self.startTime) == int || self.startTime.matches('^[0-9][0-9]:[0-9][0-9]$')) && (type(self.endTime) == int || self.endTime.matches('^[0-9][0-9]:[0-9][0-9]$'))) || (type(self.startTime) == int ? self.startTime * 60 : int(self.startTime.substring(0, 2)) * 60 + int(self.startTime.substring(3, 5))) != (type(self.endTime) == int ? self.endTime * 60 : int(self.endTime.substring(0, 2)) * 60 + int(self.endTime.substring(3, 5)))",
    "message": "endTime must differ from startTime (a window needs a length; use startTime > endTime to wrap midnight)",
    "fieldPath": ".endTime",
    "reason": "FieldValueInvalid"
}, {
    "rule": "!has(self.maxReplica) || self.maxReplica >= self.replica",
    "message": "maxReplica (the HPA's ceiling) must be at least replica (its floor)",
    "fieldPath": ".maxReplica",
    "reason": "FieldValueInvalid"
}]))]
pub struct Window {
    /// Optional label shown in status, events and metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([A-Za-z0-9_.\-]*[A-Za-z0-9])?$")
    )]
    pub name: Option<String>,
    /// Start: an hour 0..23, or "HH:MM".
    pub start_time: TimeOfDay,
    /// End (exclusive): an hour 0..23, or "HH:MM".
    pub end_time: TimeOfDay,
    /// Replicas while this window is active.
    #[schemars(range(min = 0, max = 10000))]
    pub replica: i32,
    /// HPA form only: the HPA's `maxReplicas` while this window is active (its ceiling), at
    /// least `replica`. Absent: the HPA's own `maxReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_replica: Option<i32>,
    /// The days on which the window starts; absent means every day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "set"))]
    pub days: Option<Vec<Day>>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
    /// A date in `spec.holidays`, whatever its weekday.
    Hol,
}

impl Day {
    pub const ALL: [Day; 7] = [
        Day::Mon,
        Day::Tue,
        Day::Wed,
        Day::Thu,
        Day::Fri,
        Day::Sat,
        Day::Sun,
    ];

    pub fn from_chrono(w: chrono::Weekday) -> Day {
        Day::ALL[w.num_days_from_monday() as usize]
    }

    /// 0 for Monday .. 6 for Sunday, 7 for `Hol`.
    pub fn index(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// A wall-clock time of day at minute precision. Written either as an integer hour (the seed
/// operator's form) or as an `"HH:MM"` string; it serialises back in the form it was written,
/// so a round trip through the operator never rewrites a user's manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimeOfDay {
    minute_of_day: u16,
    written_as_hour: bool,
}

impl TimeOfDay {
    pub fn hour(h: u8) -> Option<Self> {
        (h < 24).then_some(Self {
            minute_of_day: u16::from(h) * 60,
            written_as_hour: true,
        })
    }

    pub fn hm(h: u8, m: u8) -> Option<Self> {
        (h < 24 && m < 60).then_some(Self {
            minute_of_day: u16::from(h) * 60 + u16::from(m),
            written_as_hour: false,
        })
    }

    /// Minutes since local midnight, 0..1440.
    pub fn minute_of_day(self) -> u16 {
        self.minute_of_day
    }

    /// Parses `"HH:MM"` exactly as the schema's pattern does (two digits each).
    pub fn parse_hhmm(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 5
            || b[2] != b':'
            || !b
                .iter()
                .enumerate()
                .all(|(i, c)| i == 2 || c.is_ascii_digit())
        {
            return None;
        }
        let h = (b[0] - b'0') * 10 + (b[1] - b'0');
        let m = (b[3] - b'0') * 10 + (b[4] - b'0');
        Self::hm(h, m)
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02}:{:02}",
            self.minute_of_day / 60,
            self.minute_of_day % 60
        )
    }
}

impl Serialize for TimeOfDay {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.written_as_hour {
            s.serialize_u16(self.minute_of_day / 60)
        } else {
            s.collect_str(self)
        }
    }
}

impl<'de> Deserialize<'de> for TimeOfDay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TimeOfDay;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"an hour 0..23 or a "HH:MM" string"#)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TimeOfDay, E> {
                u8::try_from(v)
                    .ok()
                    .and_then(TimeOfDay::hour)
                    .ok_or_else(|| E::custom(format!("hour {v} is out of range 0..23")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TimeOfDay, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("hour {v} is out of range 0..23")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<TimeOfDay, E> {
                // YAML/JSON numbers may arrive as floats (e.g. through serde_json::Value).
                if v.fract() == 0.0 && (0.0..24.0).contains(&v) {
                    self.visit_u64(v as u64)
                } else {
                    Err(E::custom(format!("hour {v} is not a whole number 0..23")))
                }
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TimeOfDay, E> {
                TimeOfDay::parse_hhmm(v).ok_or_else(|| {
                    E::custom(format!(r#""{v}" is not a time "HH:MM" (00:00..23:59)"#))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for TimeOfDay {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TimeOfDay".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // int-or-string: the API server only allows the bare `anyOf [integer, string]` shape here,
    // so ranges and the HH:MM format are CEL rules, each with a message naming the form.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            // Bounds the CEL cost estimate; "HH:MM" is five characters (ignored for integers).
            "maxLength": 5,
            "description": "An hour 0..23 or \"HH:MM\" (24-hour clock).",
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == int ? (self >= 0 && self <= 23) : self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$')",
                    "message": "must be an hour 0..23 or a time \"HH:MM\" between 00:00 and 23:59",
                    "reason": "FieldValueInvalid"
                }
            ]
        })
    }
}

/// What the operator last observed and decided, as `kubectl get/describe` shows it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TDSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_window: Option<String>,
    /// The active override (its `reason`, or `start-end`), absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_override: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_replicas: Option<i32>,
    /// HPA form with a scheduled ceiling (`maxReplica`): the HPA's `maxReplicas` the schedule
    /// sets now; absent: the HPA's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_max_replicas: Option<i32>,
    /// The ceiling from the next transition on (see `desiredMaxReplicas`); a transition may
    /// change the ceiling alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_max_replicas: Option<i32>,
    /// When the next change's write starts, when that is before `nextTransitionTime`: a
    /// scale-up written ahead so that its replicas are ready by then (`spec.warmUp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_write_time: Option<String>,
    /// With `scaleTargetRef`: the object and the field the schedule sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetStatus>,
    /// With `scaleTargetSelector`: the workloads held, and those not at their count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupStatus>,
    /// What the schedule saves now (see docs/resource.md, "Savings", for each figure's baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savings: Option<SavingsStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The shard that reconciles this TDSet, when the operator runs in shards (`run --shard`).
    /// Another shard writes it only after this one has let go, or is proven gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// With `spec.warmUp`: the lead the next scale-up is written with, and what it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<WarmUpStatus>,
    /// With `spec.idle`: where idleness stands, and each signal's last reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleStatus>,
    /// The last changes of the workload's count, newest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_HISTORY))]
    pub history: Vec<HistoryEntry>,
    /// With `spec.wakeOnRequest`: the wake-up by a request in force or the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_wake: Option<RequestWakeStatus>,
}

/// The lead of the next scale-up (`spec.warmUp`), and the measured times it is taken from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WarmUpStatus {
    /// How far ahead of its transition the next scale-up is written ("45s"; "0s": at it).
    pub lead: String,
    /// Where the lead comes from.
    pub basis: LeadBasis,
    /// Seconds from each measured scale-up's write until its count was ready, newest first
    /// (at most 10). Kept across restarts: the lead is not learnt again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WARM_UP_SAMPLES))]
    pub samples: Vec<i32>,
}

/// How many measured times to Ready `status.warmUp.samples` keeps.
pub const MAX_WARM_UP_SAMPLES: usize = 10;

/// Where a warm-up lead comes from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum LeadBasis {
    /// `warmUp.lead` (mode Fixed).
    #[default]
    Fixed,
    /// The measured samples: their 90th percentile plus a margin, at most `warmUp.max`.
    Measured,
    /// `warmUp.lead` (or none), until a scale-up has been measured (mode Measured).
    Guess,
    /// `warmUp.lead`: the workload does not report ready replicas, so nothing is measured.
    NotReported,
}

impl TDSetStatus {
    /// The measured times to Ready (`warmUp.samples`), none when there are none.
    pub fn warm_up_samples(&self) -> &[i32] {
        self.warm_up.as_ref().map_or(&[], |w| &w.samples)
    }
}

impl HistoryEntry {
    /// A change that raised a known count to a higher known count (not one to or from `own`).
    pub fn rises(&self) -> bool {
        matches!((self.from, self.to), (Some(f), Some(t)) if t > f)
    }
}

/// What the schedule removes now, against the workload's own count (group form,
/// `scaleTargetRef`) or the highest count the spec sets (owned forms).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavingsStatus {
    /// Replicas not running now that the baseline would run.
    pub replicas: i64,
    /// CPU cores their pods would request, as a decimal ("1.5").
    pub cpu: String,
    /// Memory their pods would request ("512Mi", or bytes).
    pub memory: String,
}

/// How many changes `status.history` keeps.
pub const MAX_HISTORY: usize = 10;

/// One change of the workload's count: a scheduled transition, or a change made for another
/// reason (a spec edit, a count put back).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The scheduled instant of the transition (RFC 3339), or when an unscheduled change was
    /// decided.
    pub at: String,
    /// When the workload write succeeded; absent while it has not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<String>,
    /// A scale-up: when its new count was first seen ready (ready replicas, summed over a
    /// group's workloads). Later than `at`: it was late by the difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<String>,
    /// The count before, when it was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<i32>,
    /// The count the change set (or was to set); absent for the level `own` (group form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i32>,
    /// The group form: the level the change set (`own`, or the count each held workload gets);
    /// `from` and `to` are then the sums of the held workloads' counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// Why, in a few words: the window, override, holiday, default or ramp step.
    pub reason: String,
    /// Why the write failed (the last failure, when it succeeded after retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The referenced object and what the operator sets on it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The object's uid when the original was recorded: the original is put back only onto
    /// this very object, never onto one created later under the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `spec.replicas` (through /scale) or `spec.minReplicas` (an HPA's floor).
    pub field: String,
    /// The value the field had when the TDSet first took the target over; put back on
    /// deletion with `onDelete: Restore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_replicas: Option<i32>,
    /// With an HPA's floor and a scheduled ceiling (`maxReplica`): the HPA's own
    /// `maxReplicas`, recorded before the TDSet first set it; given back when no ceiling
    /// applies, and when the TDSet lets go of the HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_replicas: Option<i32>,
    /// With an HPA's floor: the HPA's workload this TDSet put to sleep (an HPA cannot hold 0),
    /// recorded before it was; woken to the HPA's own floor when the TDSet lets go, or when the
    /// HPA goes or points at another workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asleep: Option<Asleep>,
    /// With a KEDA ScaledObject: the user's own pause annotations (none: an empty object),
    /// recorded before the schedule's first pause; given back when the schedule wakes it and
    /// when the TDSet lets go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_pause: Option<KedaPause>,
}

/// A KEDA ScaledObject's pause annotations (`autoscaling.keda.sh/paused-replicas`,
/// `autoscaling.keda.sh/paused`), as values.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KedaPause {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub paused_replicas: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub paused: Option<String>,
}

/// A workload put to sleep through its HPA: which one, and the very object (its uid).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Asleep {
    #[serde(flatten)]
    pub target: ScaleTargetRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub uid: Option<String>,
}

impl TargetStatus {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// Whether this is what `r` references (the same apiVersion, kind and name).
    pub fn names(&self, r: &ScaleTargetRef) -> bool {
        self.api_version == r.api_version && self.kind == r.kind && self.name == r.name
    }
}

/// Same wire shape as `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339; changes only when `status` flips.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl TDSetSpec {
    pub fn time_zone_name(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }

    pub fn is_suspended(&self) -> bool {
        self.suspend == Some(true)
    }

    /// `warmUp.mode`, `Off` when `warmUp` is not set.
    pub fn warm_up_mode(&self) -> WarmUpMode {
        self.warm_up.as_ref().map(WarmUp::mode).unwrap_or_default()
    }

    /// The drift safety net as a duration (5 minutes unless set).
    pub fn check_interval(&self) -> std::time::Duration {
        let minutes = self.interval_mint.unwrap_or(5).clamp(1, 1440);
        std::time::Duration::from_secs(minutes as u64 * 60)
    }
}

impl Window {
    /// The label for status, events and metrics: its name, or `"HH:MM-HH:MM"`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("{}-{}", self.start_time, self.end_time),
        }
    }
}

/// The CRD as installed (what `tdset-operator crd` prints and `crds/` holds): the derived
/// schema, with the pod template's schema made fit for the API server's front door:
///
/// - its field descriptions are left out: they are the Kubernetes API's own (`kubectl explain
///   deployment.spec.template` shows them) and would make the CRD about 590 KB, too large for
///   the `last-applied-configuration` annotation of a client-side `kubectl apply` (256 KiB);
///   without them it is about 70 KB, while every field keeps its type, so typos and wrong
///   types are still rejected at `kubectl apply`;
/// - quantities (`resources.limits.cpu` ...) must parse as quantities, and every container
///   needs an image, both checked at admission rather than when the Deployment is written.
pub fn crd() -> crate::Result<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
> {
    use kube::CustomResourceExt;
    let serialize = |source| crate::Error::Serialize {
        what: "the CRD",
        source,
    };
    let mut crd = serde_json::to_value(TDSet::crd()).map_err(serialize)?;
    for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
        let spec = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        if let Some(group) = spec.get_mut("scaleTargetSelector") {
            bound_selector(&mut group["properties"]["selector"]);
        }
        if let Some(template) = spec.get_mut("template") {
            tighten_pod_template(template);
            template["description"] = serde_json::Value::String(
                "A full pod template for a Deployment the TDSet owns (the fields of a \
                 Deployment's spec.template; see `kubectl explain deployment.spec.template`). \
                 The operator adds its selector label to the template's labels."
                    .into(),
            );
        }
    }
    serde_json::from_value(crd).map_err(serialize)
}

/// The `TDCalendar` CustomResourceDefinition.
pub fn calendar_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    TDCalendar::crd()
}

/// The most labels a group's selector may name, and the most expressions: it is matched
/// against every change of every workload it may select, and sent with every list.
pub const MAX_SELECTOR_LABELS: usize = 32;
pub const MAX_SELECTOR_EXPRESSIONS: usize = 16;
/// The most values one expression may list.
pub const MAX_SELECTOR_VALUES: usize = 64;

/// Bounds on a group's label selector (k8s-openapi's `LabelSelector` has none): a label value
/// is at most 63 characters and a key at most 317 (a 253-character prefix, `/`, 63), as the
/// API server checks labels.
fn bound_selector(selector: &mut serde_json::Value) {
    use serde_json::json;
    let props = &mut selector["properties"];
    let labels = &mut props["matchLabels"];
    labels["maxProperties"] = json!(MAX_SELECTOR_LABELS);
    labels["additionalProperties"]["maxLength"] = json!(63);
    let exprs = &mut props["matchExpressions"];
    exprs["maxItems"] = json!(MAX_SELECTOR_EXPRESSIONS);
    let item = &mut exprs["items"]["properties"];
    item["key"]["maxLength"] = json!(317);
    item["operator"]["maxLength"] = json!(16);
    item["values"]["maxItems"] = json!(MAX_SELECTOR_VALUES);
    item["values"]["items"]["maxLength"] = json!(63);
}

fn tighten_pod_template(template: &mut serde_json::Value) {
    use serde_json::json;
    strip_descriptions(template);
    // Bounds that keep the CEL cost estimate of the quantity rules within the API server's
    // budget: at most 64 containers of each kind and 16 resources per limits/requests map.
    for key in ["containers", "initContainers"] {
        let list = &mut template["properties"]["spec"]["properties"][key];
        if list.is_null() {
            continue;
        }
        list["maxItems"] = json!(64);
        let item = &mut list["items"];
        if let Some(required) = item["required"].as_array_mut()
            && !required.iter().any(|r| r == "image")
        {
            required.push(json!("image"));
        }
        for map in ["limits", "requests"] {
            let resources = &mut item["properties"]["resources"]["properties"][map];
            if resources.is_null() {
                continue;
            }
            resources["maxProperties"] = json!(16);
            let quantity = &mut resources["additionalProperties"];
            quantity["maxLength"] = json!(64);
            quantity["x-kubernetes-validations"] = json!([{
                "rule": "type(self) == string ? isQuantity(self) : true",
                "message": "must be a quantity such as 500m, 0.5, 2, 128Mi or 1Gi",
                "reason": "FieldValueInvalid"
            }]);
        }
    }
}

fn strip_descriptions(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}
