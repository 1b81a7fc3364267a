//! What every reconcile shares: the clients, the caches, the lane, the memos and the indexes.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::runtime::reflector::Store;

use super::group_index::GroupIndex;
use super::target_index::TargetIndex;
use super::{discovery, sharding, wakeups};
use crate::api::TDSet;
use crate::cache::Cached;
use crate::clock::Clock;
use crate::controller::lane;
use crate::memo::{OwnWrites, StatusMemo};
use crate::telemetry::Metrics;
use crate::workload::AllowedIn;
use crate::workload::contest::Contest;

/// Everything a reconcile needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub clock: Arc<dyn Clock>,
    /// Status writes and Events, sent after the workload writes.
    pub lane: lane::Lane,
    /// Which reconciles are writing workloads now (the lane waits for them).
    pub priority: Arc<lane::Priority>,
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
    /// The iCalendar documents calendars take dates from (`spec.ics`).
    pub ics: Arc<super::ics_sources::IcsSources>,
    /// Failed reconciles per TDSet ("ns/name") for the error backoff: how many counted, and
    /// until when another failure does not count (see `backoff::Failures`).
    pub failures: std::sync::Mutex<std::collections::HashMap<String, super::backoff::Failures>>,
    /// Where `container` and `template` TDSets may run pods.
    pub pod_forms: AllowedIn,
    /// Where group TDSets may write what they select.
    pub group_form: AllowedIn,
    /// The most workloads one group reads per reconcile, past those it holds.
    pub group_max_workloads: usize,
    /// Each TDSet's writes to its target, against another writer ("ns/name").
    pub contests: std::sync::Mutex<std::collections::HashMap<String, Contest>>,
    /// The shard this operator is, if it runs as one.
    pub shard: Option<Arc<sharding::Sharding>>,
    /// The TDSets this operator reconciles (a shard's own).
    pub tdsets: Store<Cached<TDSet>>,
    /// When this operator began reconciling: a scale-up written before then may have been
    /// ready long before anyone looked, and is no sample of its time to Ready.
    pub leading_since: chrono::DateTime<chrono::Utc>,
    /// Where the wake proxy runs (`wakeOnRequest`); `None`: no proxy, nothing intercepted.
    pub wake_proxy: Option<WakeProxyRef>,
    /// Where `spec.idle` reads traffic, and what it last read; `None`: nowhere.
    pub traffic: Option<(super::traffic::TrafficOptions, Arc<super::traffic::Traffic>)>,
    /// The operator's own EndpointSlices (wake on request), cluster-wide.
    pub wake_slices: Store<EndpointSlice>,
    /// Proxy ports handed out and not yet, perhaps, in `wake_slices`.
    pub ports_handed_out: Arc<super::ports::PortsHandedOut>,
}

/// The wake proxy, as the operator finds it: its Service (whose slices list its pods) and the
/// range of ports it listens on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WakeProxyRef {
    pub namespace: String,
    pub service: String,
    pub ports: (u16, u16),
    /// The most of those ports the Services of one namespace may hold at once.
    pub per_namespace: u16,
    /// The managers whose slices are a Service's own (as the proxy trusts them).
    pub trusted: Vec<String>,
}

impl Context {
    /// The managers whose slices are a Service's own, as the wake proxy trusts them.
    pub(crate) fn trusted_endpoint_managers(&self) -> &[String] {
        self.wake_proxy
            .as_ref()
            .map_or(&[], |p| p.trusted.as_slice())
    }

    /// Runs `f` on the TDSet's record of its writes against other writers.
    pub(crate) fn contest<T>(&self, key: &str, f: impl FnOnce(&mut Contest) -> T) -> T {
        match self.contests.lock() {
            Ok(mut contests) => {
                // Deleted TDSets leave entries behind; one without reverts only costs a revert
                // counted as a first write (or a failed write's backoff started afresh), so
                // those go when the map grows; not one that times a wait (`seen_for`), which
                // would start its bound again.
                if contests.len() >= 4096 && !contests.contains_key(key) {
                    contests.retain(|_, c| c.has_reverts() || c.waits());
                }
                f(contests.entry(key.to_string()).or_default())
            }
            Err(_) => f(&mut Contest::default()),
        }
    }

    /// Forgets one contest (what it waited out is over).
    pub(crate) fn forget_contest(&self, key: &str) {
        if let Ok(mut c) = self.contests.lock() {
            c.remove(key);
        }
    }

    /// Forgets what is kept per TDSet in memory (it is gone).
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut c) = self.contests.lock() {
            // Its parts, and what it keeps per object it writes (`{key}/{kind}/{name}`, and
            // their parts): a name has no `/`, so nothing of another TDSet's starts so.
            let prefix = format!("{key}/");
            c.retain(|k, _| k != key && !k.starts_with(&prefix));
        }
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
        self.metrics.forget_saved(key);
    }
}
