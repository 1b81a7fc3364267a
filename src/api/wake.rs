//! Woken by a request (`spec.wakeOnRequest`, `status.requestWake`): which Services' requests
//! wake a TDSet asleep by its schedule, for how long, and what the wake-up in progress is.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most Services one TDSet intercepts, and ports per Service: bounds the CEL cost, the
/// proxy's listeners and the operator's slices per TDSet.
pub const MAX_WAKE_SERVICES: usize = 16;
pub const MAX_WAKE_PORTS: usize = 16;
/// The most `ignore` patterns of each kind, and the longest one.
pub const MAX_IGNORE: usize = 16;
pub const MAX_PATTERN: usize = 256;
/// `wakeFor` and `hold` when not set.
pub const DEFAULT_WAKE_FOR: chrono::Duration = chrono::Duration::minutes(30);
pub const DEFAULT_HOLD: chrono::Duration = chrono::Duration::seconds(10);

/// While the schedule has the workloads asleep, a request to one of these Services wakes them
/// for `wakeFor`; the first request is held for up to `hold` until they answer.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WakeOnRequest {
    /// Services in the TDSet's namespace that front its workloads.
    #[schemars(
        length(min = 1, max = MAX_WAKE_SERVICES),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub services: Vec<WakeService>,
    /// How long a request keeps the TDSet awake (1m..24h, default 30m); each request seen
    /// while the proxy is in the path extends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": "self != '' && duration(self) >= duration('1m') && duration(self) <= duration('24h')",
            "message": "must be a duration from 1m to 24h, e.g. \"30m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub wake_for: Option<String>,
    /// How long the first request is held for the workload's answer (1s..60s, default 10s);
    /// then it is answered 503 with a Retry-After.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": "self != '' && duration(self) >= duration('1s') && duration(self) <= duration('60s')",
            "message": "must be a duration from 1s to 60s, e.g. \"10s\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub hold: Option<String>,
    /// Requests answered without waking anything (probes, bots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<WakeIgnore>,
}

/// A Service whose requests wake the TDSet.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WakeService {
    /// The Service's name, in the TDSet's namespace.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Its ports (names or numbers) that wake; absent: every TCP port of the Service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_WAKE_PORTS))]
    pub ports: Vec<ServicePort>,
}

/// A Service port by its name (`http`) or its number (`8080`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ServicePort {
    Name(String),
    Number(i32),
}

impl ServicePort {
    /// Whether a Service port with this name and number is the one meant.
    pub fn matches(&self, name: Option<&str>, number: i32) -> bool {
        match self {
            ServicePort::Name(n) => name == Some(n.as_str()),
            ServicePort::Number(p) => *p == number,
        }
    }
}

impl fmt::Display for ServicePort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServicePort::Name(n) => f.write_str(n),
            ServicePort::Number(p) => write!(f, "{p}"),
        }
    }
}

impl Serialize for ServicePort {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ServicePort::Name(n) => s.serialize_str(n),
            ServicePort::Number(p) => s.serialize_i32(*p),
        }
    }
}

impl<'de> Deserialize<'de> for ServicePort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(i64),
            Name(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => i32::try_from(n)
                .map(ServicePort::Number)
                .map_err(|_| serde::de::Error::custom(format!("port {n} is out of range"))),
            // A string is a name, as Kubernetes reads a port name (it has a letter).
            Raw::Name(s) => Ok(ServicePort::Name(s)),
        }
    }
}

impl JsonSchema for ServicePort {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ServicePort".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // int-or-string: the API server allows only the bare anyOf shape, so the rest is CEL.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 15,
            "description": "A Service port's name (e.g. http) or number (1..65535).",
            "x-kubernetes-validations": [{
                "rule": "type(self) == int ? (self >= 1 && self <= 65535) : (self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]'))",
                "message": "must be a Service port's name (lower-case letters, digits and '-', with a letter, at most 15) or its number 1..65535",
                "reason": "FieldValueInvalid"
            }]
        })
    }
}

/// Requests answered without waking: a user agent matching one of `userAgents` (regular
/// expressions), or a path equal to one of `paths` (a trailing `*` makes it a prefix).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WakeIgnore {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_IGNORE),
        inner(length(min = 1, max = MAX_PATTERN)),
        extend("x-kubernetes-validations" = [{
            // An invalid expression makes `matches` fail, which rejects the object; the
            // operator checks the same with its own engine (the syntaxes differ at the edges).
            "rule": "self.all(r, ''.matches(r) || !''.matches(r))",
            "message": "every user agent pattern must be a valid regular expression (RE2 syntax)",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub user_agents: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_IGNORE),
        inner(length(min = 1, max = MAX_PATTERN), regex(pattern = r"^/"))
    )]
    pub paths: Vec<String>,
}

/// A wake-up by a request, as the TDSet keeps it. `since`, `until`, `request` and `requests`
/// are written by the operator's wake endpoint (field manager `tdset-operator-wake`) when the
/// proxy reports a request; `phase` by the reconcile. Never in the spec.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestWakeStatus {
    /// What the reconcile made of it last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RequestWakePhase>,
    /// The first request of this wake-up (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub since: Option<String>,
    /// When a request last extended it (RFC 3339): it ends at most `wakeFor` after this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub extended_at: Option<String>,
    /// When it ends unless a request extends it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub until: Option<String>,
    /// The request that woke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<WakeRequest>,
    /// Requests reported during this wake-up (each report of the proxy adds the requests it
    /// saw since its last; at least this many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<i64>,
}

impl RequestWakeStatus {
    /// The part the reconcile writes (`phase`): the rest is the wake endpoint's, and a status
    /// apply that carried it would take it over, stale or not.
    pub fn reconciles_part(&self) -> Option<RequestWakeStatus> {
        self.phase.map(|phase| RequestWakeStatus {
            phase: Some(phase),
            ..Default::default()
        })
    }
}

/// What a request wake-up is doing, as the reconcile saw it.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RequestWakePhase {
    /// The count is written; the workloads are not all ready yet.
    Waking,
    /// Awake by the request, until `until`.
    Awake,
    /// In force, but the schedule decides the count: an override (even at 0), or a window or
    /// default above 0.
    Superseded,
    /// Over: the schedule applies again.
    Ended,
}

impl fmt::Display for RequestWakePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The request that woke a TDSet, as far as the proxy read it (its head only).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WakeRequest {
    /// The Service (and port) it arrived on.
    #[schemars(length(max = 80))]
    pub service: String,
    /// Absent for plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub user_agent: Option<String>,
}

impl WakeRequest {
    /// "GET web.example/docs (curl/8.5)", for reasons and Events.
    pub fn describe(&self) -> String {
        let mut s = match (&self.method, &self.host, &self.path) {
            (Some(m), h, p) => format!(
                "{m} {}{}",
                h.as_deref().unwrap_or(""),
                p.as_deref().unwrap_or("/")
            ),
            (None, ..) => format!("a connection to {}", self.service),
        };
        if let Some(ua) = &self.user_agent {
            s.push_str(&format!(" ({ua})"));
        }
        s
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary (what the proxy reports must fit
/// the schema's bounds whatever a client sent).
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The wake endpoint's wire format (`POST /v1/wake`), spoken by the wake proxy and the
/// operator. One request the proxy saw on a Service of a TDSet (with those counted since its last
/// report for that TDSet).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WakeReport {
    pub namespace: String,
    pub tdset: String,
    pub service: String,
    #[serde(default)]
    pub requests: i64,
    pub request: WakeRequest,
}

/// What the endpoint answers a report with.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WakeAnswer {
    /// When the wake-up in force ends (RFC 3339).
    pub until: Option<String>,
    /// Whether this report was written (else the wake-up already reached far enough).
    pub written: bool,
}
