//! What every stage of a reconcile shares: the context (clients, caches, the lane, the memos),
//! how a TDSet is named, and what a stage says it did. The lowest room: every other one may use
//! it, it uses none of them but the types it holds.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};

use super::group_index::GroupIndex;
use super::target_index::TargetIndex;
use super::{bookkeeping, discovery, shards, wakeups};
use crate::api::{GroupStatus, TDSet, TargetStatus};
use crate::cache::Cached;
use crate::clock::Clock;
use crate::memo::{OwnWrites, StatusMemo};
use crate::status::{Missing, Notice, Observed, Problem};
use crate::telemetry::Metrics;
use crate::workload::PodForms;
use crate::workload::contest::Contest;

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    /// Status writes and Events, sent after the workload writes.
    pub lane: bookkeeping::Lane,
    /// Which reconciles are writing workloads now (the lane waits for them).
    pub priority: Arc<bookkeeping::Priority>,
    pub metrics: Arc<Metrics>,
    /// Owned Deployments and Services (label-selected), pruned and compact.
    pub deployments: Store<Cached<Deployment>>,
    pub services: Store<Cached<Service>>,
    /// HPAs (pruned): what conflict detection and HPA floors look up.
    pub hpas: Store<HorizontalPodAutoscaler>,
    /// Target kinds, as discovery describes them.
    pub discovery: discovery::Discovery,
    pub statuses: Arc<StatusMemo>,
    /// Owned objects written and not yet seen back through the watch.
    pub own_writes: Arc<OwnWrites>,
    /// Set once every cache holds a full list.
    pub synced: Arc<AtomicBool>,
    /// When each TDSet is reconciled next.
    pub wakeups: Arc<wakeups::Wakeups>,
    /// Which TDSets reference which target, and which of them holds it.
    pub index: TargetIndex,
    /// What each group TDSet selects, in every namespace.
    pub groups: GroupIndex,
    /// Every TDCalendar.
    pub calendars: Store<crate::api::TDCalendar>,
    /// Consecutive failed reconciles per TDSet ("ns/name"), for the error backoff.
    pub failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// Where `container` and `template` TDSets may run pods.
    pub pod_forms: PodForms,
    /// Each TDSet's writes to its target, against another writer ("ns/name").
    pub contests: std::sync::Mutex<std::collections::HashMap<String, Contest>>,
    /// The shard this operator is, if it runs as one.
    pub shard: Option<Arc<shards::Sharding>>,
    /// The TDSets this operator reconciles (a shard's own).
    pub tdsets: Store<Cached<TDSet>>,
}

impl Context {
    /// Runs `f` on the TDSet's record of its writes against other writers.
    pub(crate) fn contest<T>(&self, key: &str, f: impl FnOnce(&mut Contest) -> T) -> T {
        match self.contests.lock() {
            Ok(mut contests) => {
                // Deleted TDSets leave entries behind; one without reverts only costs a revert
                // counted as a first write, so those go when the map grows.
                if contests.len() >= 4096 && !contests.contains_key(key) {
                    contests.retain(|_, c| c.has_reverts());
                }
                f(contests.entry(key.to_string()).or_default())
            }
            Err(_) => f(&mut Contest::default()),
        }
    }

    /// Forgets what is kept per TDSet in memory (it is gone).
    pub(super) fn forget(&self, key: &str) {
        if let Ok(mut c) = self.contests.lock() {
            c.remove(key);
        }
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
        self.metrics.forget_saved(key);
    }
}

/// What happened to an owned object in this reconcile.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Unchanged,
    Created,
    Updated,
}

/// How the controller names a TDSet: it reconciles the cached form (see `Cached`).
pub(crate) type TDSetRef = ObjectRef<Cached<TDSet>>;

/// The name alone (no uid or resourceVersion), of a TDSet or its cached form.
pub(crate) fn tdset_ref(tdset: &impl Resource) -> TDSetRef {
    tdset_ref_named(&tdset.namespace().unwrap_or_default(), &tdset.name_any())
}

pub(crate) fn tdset_ref_named(namespace: &str, name: &str) -> TDSetRef {
    ObjectRef::new(name).within(namespace)
}

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
    /// When this reconcile changed the workload's replica count (or an HPA's floor): the
    /// count before.
    pub scaled: Option<i32>,
    /// With `scaleTargetSelector`: the group's counts.
    pub group: Option<GroupStatus>,
    /// Some of its writes failed (others landed, and are reported): looked at again with the
    /// error policy's backoff, not at a fixed pace.
    pub failed: bool,
    /// What the schedule removes now, when the baseline is known.
    pub saved: Option<crate::workload::savings::Saved>,
}
