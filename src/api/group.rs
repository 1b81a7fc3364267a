//! The group form's part of the API: `spec.scaleTargetSelector` (many workloads, one TDSet)
//! and `status.group`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// The most names `exclude` may list.
pub const MAX_EXCLUDE: usize = 256;
/// The most custom kinds `status.group.heldKinds` remembers (more than a cluster serves with
/// `/scale` in practice).
pub const MAX_HELD_KINDS: usize = 64;
/// The most workloads `status.group.notAtSchedule` lists (the counts cover all of them).
pub const MAX_LISTED: usize = 10;
/// The most tiers `order` may list (the workloads in none form one more).
pub const MAX_TIERS: usize = 8;
/// The rule that keeps the operator's own labels out of a selector (of the group, of a tier):
/// holding a workload would change whether it is selected.
const NO_RESERVED_KEYS: &str = "(!has(self.matchLabels) || self.matchLabels.all(k, !k.startsWith('schedule.rs/'))) && (!has(self.matchExpressions) || self.matchExpressions.all(e, !e.key.startsWith('schedule.rs/')))";

/// The most labels, and the most expressions, one tier of `order` may select on.
pub const MAX_TIER_TERMS: usize = 16;
/// How long a tier is waited for when `tierTimeout` is not set.
pub const DEFAULT_TIER_TIMEOUT: chrono::Duration = chrono::Duration::minutes(5);

/// The workloads of the TDSet's namespace that one TDSet schedules together.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetSelector {
    /// The kinds selected: `Deployment`, `StatefulSet`, `CronJob`, or any kind with a `/scale`
    /// subresource as `Kind.group` (e.g. `Rollout.argoproj.io`). Default
    /// `[Deployment, StatefulSet]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub kinds: Vec<GroupKind>,
    /// A label selector over those kinds in the TDSet's namespace; `{}` selects all of them.
    /// `schedule.rs/` keys are the operator's own (it labels what it holds) and may not be
    /// selected on: holding a workload would change whether it is selected.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": NO_RESERVED_KEYS,
        "message": "schedule.rs/ labels are written by the operator and may not be selected on",
        "reason": "FieldValueInvalid"
    }]))]
    pub selector: LabelSelector,
    /// Names left alone, whatever their kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_EXCLUDE),
        extend("x-kubernetes-list-type" = "set"),
        inner(length(min = 1, max = 253))
    )]
    pub exclude: Vec<String>,
    /// Tiers, woken first to last and put to sleep last to first: each a label selector over
    /// the group's workloads (a workload's tier is the first that matches it; those in none
    /// form the last tier). Waking, a tier is written once every workload of the tier before
    /// it is ready at its new count; going to sleep, once the tier after it has no more ready
    /// replicas than its new count. Empty: every workload at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TIERS))]
    pub order: Vec<TierSelector>,
    /// How long a tier of `order` is waited for before the next one is written anyway (the
    /// TDSet says so in a Warning). A duration from 1s to 1h; default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 16),
        regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"),
        extend("x-kubernetes-validations" = [{
            "rule": super::SHORT_DURATION,
            "message": "must be a duration from 1s to 1h, e.g. \"90s\" or \"5m\"",
            "reason": "FieldValueInvalid"
        }])
    )]
    pub tier_timeout: Option<String>,
}

impl ScaleTargetSelector {
    /// The kinds selected, the default applied.
    pub fn kinds(&self) -> Vec<GroupKind> {
        if self.kinds.is_empty() {
            vec![
                GroupKind::Named(NamedKind::Deployment),
                GroupKind::Named(NamedKind::StatefulSet),
            ]
        } else {
            self.kinds.clone()
        }
    }
}

/// One tier of `order`: a label selector over the group's workloads. Its own type so that the
/// rule on `schedule.rs/` keys is checked per item (on the whole list, the API server's cost
/// estimate of the rule is over its budget).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct TierSelector(pub LabelSelector);

impl JsonSchema for TierSelector {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TierSelector".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = LabelSelector::json_schema(generator);
        // Bounds that let the API server estimate the rule's cost within its budget (unbounded,
        // eight tiers of it are over).
        if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
            if let Some(labels) = props.get_mut("matchLabels").and_then(|l| l.as_object_mut()) {
                labels.insert("maxProperties".into(), MAX_TIER_TERMS.into());
            }
            if let Some(exprs) = props
                .get_mut("matchExpressions")
                .and_then(|e| e.as_object_mut())
            {
                exprs.insert("maxItems".into(), MAX_TIER_TERMS.into());
                if let Some(key) = exprs
                    .get_mut("items")
                    .and_then(|i| i.get_mut("properties"))
                    .and_then(|p| p.get_mut("key"))
                    .and_then(|k| k.as_object_mut())
                {
                    key.insert("maxLength".into(), 317.into());
                }
            }
        }
        schema.insert(
            "x-kubernetes-validations".into(),
            serde_json::json!([{
                "rule": NO_RESERVED_KEYS,
                "message": "schedule.rs/ labels are written by the operator and may not be selected on",
                "reason": "FieldValueInvalid"
            }]),
        );
        schema
    }
}

/// A kind a group selects: `Deployment`, `StatefulSet`, `CronJob`, or any kind with a `/scale`
/// subresource as `Kind.group` (kubectl's way of naming a kind of a group, e.g.
/// `Rollout.argoproj.io`), served in the group's preferred version.
///
/// A string, not `{apiVersion, kind}`: a list mixing strings and objects cannot be checked at
/// admission (the API server's structural schemas give a node one type, and CEL cannot read
/// an untyped one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupKind {
    Named(NamedKind),
    Scalable { kind: String, group: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamedKind {
    Deployment,
    StatefulSet,
    CronJob,
}

impl GroupKind {
    /// Reads `Kind` or `Kind.group`; anything else is kept as a kind with no group, which
    /// `validate` reports (the schema rejects it first).
    pub fn parse(s: &str) -> GroupKind {
        let (kind, group) = s.split_once('.').unwrap_or((s, ""));
        match (kind, group) {
            ("Deployment", "" | "apps") => GroupKind::Named(NamedKind::Deployment),
            ("StatefulSet", "" | "apps") => GroupKind::Named(NamedKind::StatefulSet),
            ("CronJob", "" | "batch") => GroupKind::Named(NamedKind::CronJob),
            _ => GroupKind::Scalable {
                kind: kind.to_string(),
                group: group.to_string(),
            },
        }
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        match self {
            GroupKind::Named(NamedKind::CronJob) => "batch",
            GroupKind::Named(_) => "apps",
            GroupKind::Scalable { group, .. } => group,
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            GroupKind::Named(NamedKind::Deployment) => "Deployment",
            GroupKind::Named(NamedKind::StatefulSet) => "StatefulSet",
            GroupKind::Named(NamedKind::CronJob) => "CronJob",
            GroupKind::Scalable { kind, .. } => kind,
        }
    }

    /// Whether this is the same kind as `other`.
    pub fn same_kind(&self, other: &GroupKind) -> bool {
        self.group() == other.group() && self.kind() == other.kind()
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupKind::Named(_) => f.write_str(self.kind()),
            GroupKind::Scalable { kind, group } if group.is_empty() => f.write_str(kind),
            GroupKind::Scalable { kind, group } => write!(f, "{kind}.{group}"),
        }
    }
}

impl Serialize for GroupKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GroupKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| GroupKind::parse(&s))
    }
}

impl JsonSchema for GroupKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GroupKind".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "maxLength": 317,
            "description": "Deployment, StatefulSet, CronJob, or Kind.group of a kind with a /scale subresource (e.g. Rollout.argoproj.io).",
            "x-kubernetes-validations": [{
                "rule": "self in ['Deployment', 'StatefulSet', 'CronJob'] || (self.matches('^[A-Z][A-Za-z0-9]*([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)+$') && !self.startsWith('HorizontalPodAutoscaler.'))",
                "message": "must be Deployment, StatefulSet, CronJob, or Kind.group of a kind with a /scale subresource, e.g. Rollout.argoproj.io (an HPA is scheduled with scaleTargetRef)",
                "reason": "FieldValueInvalid"
            }]
        })
    }
}

/// What the group form reports: how many workloads it holds, and which are not at their
/// scheduled count.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    /// Workloads of the selected kinds whose labels match (the excluded ones included).
    pub matched: i32,
    /// Of those held, how many run their scheduled count.
    pub at_schedule: i32,
    /// Matched but named in `exclude`: never written.
    pub excluded: i32,
    /// Matched but held by another TDSet (the older claim): never written by this one.
    pub conflicting: i32,
    /// `atSchedule/held` for `kubectl get` (held: matched, less excluded and conflicting).
    pub targets: String,
    /// Up to 10 workloads not at their scheduled count, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_LISTED))]
    pub not_at_schedule: Vec<MemberStatus>,
    /// Custom kinds (`Kind.group`) with a workload that may carry this TDSet's record: they are
    /// looked through when it lets go, even once they have left `kinds`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_HELD_KINDS))]
    pub held_kinds: Vec<String>,
    /// An ordered wake-up or sleep under way (`scaleTargetSelector.order`): the tier it
    /// waits on, and for what. Absent when no tier is held back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderStatus>,
}

/// Where an ordered wake-up or sleep stands.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderStatus {
    pub direction: OrderDirection,
    /// The tier waited on, 1 for the first of `order` (the last: the workloads in no tier).
    /// The last tier in the change's direction (`tiers` waking, 1 going to sleep): every tier
    /// is written, and the last is followed until it is there.
    pub tier: i32,
    /// How many tiers there are.
    pub tiers: i32,
    /// When the wait on this tier began (RFC 3339).
    pub since: String,
    /// When the first write of this wake-up or sleep landed (absent: none has yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// What the tier waits for, in a few words.
    #[schemars(length(max = 1024))]
    pub waiting_for: String,
    /// The level the change goes to ("own" or a count): another level is another change.
    #[schemars(length(max = 16))]
    pub level: String,
    /// The spec's generation the change was planned from: an edited spec (another `order`)
    /// walks the tiers again from the first.
    pub generation: i64,
}

/// Which way an ordered change goes: waking first tier first, or going to sleep last first.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OrderDirection {
    Waking,
    Sleeping,
}

/// One workload of a group.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub kind: String,
    pub name: String,
    /// What it runs now (for a CronJob: 0 while suspended, else 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// What the schedule gives it now (absent: its own count, not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<i32>,
    /// Why it is not at its count, in a few words.
    pub message: String,
}
