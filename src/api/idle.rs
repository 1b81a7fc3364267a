//! Asleep when idle (`spec.idle`, `status.idle`): how long without traffic makes a TDSet idle,
//! where within its calendar idleness may put it to sleep, and the signals that say whether
//! anyone came (read out of the request path, from the cluster's own metrics). A signal that
//! cannot answer vetoes: unknown is never idle.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Day, TimeOfDay};

/// The most signals one TDSet reads, and windows `during: Windows` lists: bounds the CEL
/// cost and the queries a TDSet adds.
pub const MAX_IDLE_SIGNALS: usize = 4;
pub const MAX_IDLE_WINDOWS: usize = 16;
/// The longest `query`: a query is one per distinct text per interval, for every TDSet.
pub const MAX_IDLE_QUERY: usize = 2048;
/// `after` where it cannot be read (the schema makes that a manifest that never passed an API
/// server).
pub const DEFAULT_IDLE_AFTER: chrono::Duration = chrono::Duration::minutes(30);

/// Idleness within the calendar: `after` with no traffic makes the TDSet idle; `during` says
/// where that may put it to sleep. Every signal that answers must say idle; one that cannot
/// answer keeps it as it is.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.during) && self.during == 'Windows' ? has(self.windows) : !has(self.windows)",
        "message": "spec.idle.windows lists where idleness may sleep with during: Windows, and only then",
        "fieldPath": ".windows",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "self.signals.exists(s, has(s.prometheus))",
        "message": "spec.idle.signals needs a prometheus signal: cpu is a veto only (a busy workload is never idle), it cannot tell that nobody came",
        "fieldPath": ".signals",
        "reason": "FieldValueRequired"
    }
]))]
pub struct Idle {
    /// This long with no traffic makes the TDSet idle (1m..24h, e.g. "30m").
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": "self != '' && duration(self) >= duration('1m') && duration(self) <= duration('24h')",
            "message": "must be a duration from 1m to 24h, e.g. \"30m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub after: String,
    /// Where idleness may put the TDSet to sleep (default RequestWakeUps: a request wake-up
    /// ends early, `wakeFor` its upper bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<IdleDuring>,
    /// With `during: Windows`: the windows (in `spec.timeZone`) inside which idleness may sleep,
    /// beside request wake-ups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_IDLE_WINDOWS))]
    pub windows: Option<Vec<IdleWindow>>,
    /// Requests a second under which a Service counts as idle ("0.5"; default: any request at
    /// all is traffic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 12),
        regex(pattern = r"^[0-9]{1,6}(\.[0-9]{1,3})?$")
    )]
    pub below_requests_per_second: Option<String>,
    /// What tells traffic: every signal that answers must say idle; one that cannot answer
    /// vetoes.
    #[schemars(length(min = 1, max = MAX_IDLE_SIGNALS))]
    pub signals: Vec<IdleSignal>,
}

/// Where idleness may put a TDSet to sleep.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum IdleDuring {
    /// Only a request wake-up, ended early instead of at `wakeFor`.
    #[default]
    RequestWakeUps,
    /// Also the hours the default count keeps awake and no window covers.
    OutsideWindows,
    /// Anywhere but an override (and `kubectl tdset wake --for`): inside windows too, until a
    /// request, `wake`, or the next window's start wakes it.
    Always,
    /// Request wake-ups and inside `idle.windows`.
    Windows,
}

/// A stretch of the day inside which idleness may sleep (`during: Windows`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdleWindow {
    /// Start: an hour 0..23, or "HH:MM".
    pub start_time: TimeOfDay,
    /// End (exclusive): an hour 0..23, or "HH:MM".
    pub end_time: TimeOfDay,
    /// The days on which it starts; absent means every day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "set"))]
    pub days: Option<Vec<Day>>,
}

/// One signal: request counts from Prometheus, or the workload's CPU as a veto.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.prometheus) != has(self.cpu)",
    "message": "a signal is exactly one of prometheus or cpu",
    "reason": "FieldValueInvalid"
}]))]
pub struct IdleSignal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSignal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSignal>,
}

/// Requests a second per Service, from Prometheus (`--prometheus-url`): an ingress's or a
/// mesh's counter by template, or a query of the user's.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.template) != has(self.query)",
        "message": "a prometheus signal is exactly one of template or query",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.query) || (self.query.contains('namespace') && self.query.contains('service'))",
        "message": "a query must give requests a second by namespace and service, e.g. 'sum by (namespace, service) (rate(my_requests_total[2m]))'",
        "fieldPath": ".query",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct PrometheusSignal {
    /// A counter the cluster already has, mapped to (namespace, Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TrafficTemplate>,
    /// A PromQL query giving requests a second, labelled `namespace` and `service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_IDLE_QUERY))]
    pub query: Option<String>,
    /// The Service whose traffic counts (default: every Service of `wakeOnRequest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub service: Option<String>,
}

/// The request counters the operator knows how to read, each mapped to (namespace, Service).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TrafficTemplate {
    #[serde(rename = "traefik")]
    Traefik,
    #[serde(rename = "ingress-nginx")]
    IngressNginx,
    /// Envoy, and Envoy Gateway.
    #[serde(rename = "envoy")]
    Envoy,
    #[serde(rename = "istio")]
    Istio,
    #[serde(rename = "linkerd")]
    Linkerd,
}

/// The workload's CPU, from `metrics.k8s.io`: above `busyAbove` of its requests it is never
/// idle (a veto only).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuSignal {
    /// A share of the pods' CPU requests, "1%".."100%".
    #[schemars(regex(pattern = r"^([1-9][0-9]?|100)%$"))]
    pub busy_above: String,
}

/// Idleness as last read (`spec.idle`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdleStatus {
    pub phase: IdlePhase,
    /// Since when no signal has seen traffic (Quiet and Idle; Unknown, the quiet that had
    /// made it Idle before a signal could no longer answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_since: Option<String>,
    /// Since when a signal cannot answer (Unknown): the TDSet stays as it was then (a sleep by
    /// idleness begun before holds; none begins after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_since: Option<String>,
    /// When idleness would put it to sleep if nothing comes, where `during` lets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleeps_at: Option<String>,
    /// Why it is Unknown (a reason in CamelCase, as the `IdleSignal` condition's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Each signal's last reading.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_IDLE_SIGNALS))]
    pub signals: Vec<IdleSignalStatus>,
}

/// Where idleness stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum IdlePhase {
    /// Traffic within `after`.
    Active,
    /// No traffic since `quietSince`, not yet for `after`.
    Quiet,
    /// No traffic for `after`: asleep where `during` lets it.
    Idle,
    /// A signal could not answer: never idle.
    #[default]
    Unknown,
}

/// One signal's last reading.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdleSignalStatus {
    /// Which signal: `prometheus/<template or query>`, or `cpu`.
    #[schemars(length(max = 128))]
    pub signal: String,
    /// Its value as read ("0.00 req/s", "12%").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at: Option<String>,
    /// Why it could not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub unknown: Option<String>,
}
