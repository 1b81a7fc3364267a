//! The `TDSet` custom resource (`schedule.rs/v1`): spec, status and the OpenAPI schema the
//! API server validates against. Everything the API server can check is declared here, so a
//! bad manifest is rejected at `kubectl apply` with the field's path in the message.

use std::fmt;

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most windows one TDSet may hold: bounds the CEL cost and the overlap check.
pub const MAX_WINDOWS: usize = 64;
/// The most replicas a window or the default may ask for.
pub const MAX_REPLICAS: i32 = 10_000;

/// A workload whose replica count follows the time of day.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
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
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"Replicas of the owned Deployment"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"Ready replicas of the owned Deployment"}"#,
    printcolumn = r#"{"name":"Window","type":"string","jsonPath":".status.activeWindow","description":"The active window; empty when defaultReplica applies"}"#,
    printcolumn = r#"{"name":"Next","type":"string","jsonPath":".status.nextTransitionTime","description":"When the replica count changes next"}"#,
    printcolumn = r#"{"name":"Next-Replicas","type":"integer","jsonPath":".status.nextReplicas","priority":1}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TDSetSpec {
    /// The one container of the owned Deployment.
    pub container: ContainerSpec,
    /// When present, a ClusterIP Service `port -> container.port` is owned too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// The windows. Empty means `defaultReplica` at all times. The first active window in list
    /// order wins.
    #[schemars(length(max = 64))]
    pub scheduling_config: Vec<Window>,
    /// Replicas when no window is active. 0 lets a workload sleep outside its windows.
    #[schemars(range(min = 0, max = 10000))]
    pub default_replica: i32,
    /// The longest wait in minutes between two full checks (a drift safety net, not the
    /// boundary precision). Default 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440))]
    pub interval_mint: Option<i32>,
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
    /// The days on which the window starts; absent means every day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 7), extend("x-kubernetes-list-type" = "set"))]
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

    /// 0 for Monday .. 6 for Sunday.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
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
