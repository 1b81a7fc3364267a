//! The watches that feed the controller, each with a cache that keeps only what a reconcile
//! reads, and the backoff they share.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::api::TDSet;
use crate::cache::{Cached, Prune, TDSetRef, tdset_ref, tdset_ref_named};
use crate::clock::Clock;
use crate::controller::state::{
    CalendarIndex, GroupIndex, PortsHandedOut, Sharding, TargetIndex, Wakeups, api_backoff,
    claim_of, claimed,
};
use crate::memo::StatusMemo;
use crate::workload::intercept;
use crate::workload::owned::{self, FIELD_MANAGER};

/// How the watches receive their initial lists (and their lists after a watch expired).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialList {
    /// Streamed when the API server supports it (probed at start), else in pages.
    Auto,
    /// Streamed, one object at a time (`sendInitialEvents`, Kubernetes' WatchList).
    Stream,
    /// Listed in pages of 500 objects.
    Pages,
}

/// Whether the watches stream their initial lists. A streamed list arrives one object at a
/// time, so a start against 10 000 TDSets never holds a page of 500 decoded Deployments and
/// its response body at once (restart peak 64.8 -> 59.6 MiB, BENCHMARKS.md). The API server
/// refuses `sendInitialEvents` when its WatchList feature is off (the default before 1.32),
/// and kube-runtime's watcher does not fall back, so `auto` asks once.
pub(crate) async fn streams_lists(api: Api<TDSet>, wanted: InitialList) -> bool {
    match wanted {
        InitialList::Stream => true,
        InitialList::Pages => false,
        InitialList::Auto => match probe_streaming_list(api).await {
            Ok(()) => {
                info!("initial lists are streamed (the API server supports WatchList)");
                true
            }
            Err(why) => {
                info!(%why, "initial lists are read in pages");
                false
            }
        },
    }
}

/// A streaming list of TDSets with a label nothing carries: a server that supports it answers
/// at once with the bookmark that ends the (empty) initial list.
async fn probe_streaming_list(api: Api<TDSet>) -> Result<(), String> {
    const PROBE: Duration = Duration::from_secs(10);
    let params = WatchParams::streaming_lists()
        .labels("schedule.rs/watch-list-probe=none")
        .timeout(PROBE.as_secs() as u32);
    let events = api
        .watch(&params, "0")
        .await
        .map_err(|e| format!("the API server refused a streaming list: {e}"))?;
    let mut events = std::pin::pin!(events);
    match tokio::time::timeout(PROBE, events.try_next()).await {
        Ok(Ok(Some(WatchEvent::Bookmark(b))))
            if b.metadata
                .annotations
                .contains_key("k8s.io/initial-events-end") =>
        {
            Ok(())
        }
        Ok(Ok(Some(WatchEvent::Error(e)))) => Err(format!(
            "the API server refused a streaming list: {}",
            e.message
        )),
        Ok(Err(e)) => Err(format!("a streaming list failed: {e}")),
        Ok(Ok(_)) | Err(_) => {
            Err("the API server did not end a streaming list with its bookmark".into())
        }
    }
}

/// What every watch asks for: bookmarks, and the initial list as decided above.
fn config(stream: bool) -> watcher::Config {
    let c = watcher::Config::default();
    if stream { c.streaming_lists() } else { c }
}

/// What the TDSet watch keeps up to date besides its cache.
pub(crate) struct TDSetHooks {
    /// Which TDSets reference which target: every TDSet of the namespaces where this shard
    /// (if it is one) has TDSets, whichever shard reconciles it, so one writer per workload
    /// holds across shards.
    pub index: TargetIndex,
    /// What each group selects: the same TDSets.
    pub groups: GroupIndex,
    pub calendars: CalendarIndex,
    pub statuses: Arc<StatusMemo>,
    pub wakeups: Arc<Wakeups>,
    /// When running as a shard: the cache keeps only the TDSets it matches.
    pub shard: Option<Arc<Sharding>>,
    /// The TDSets a relist has shown so far (from its Init to its InitDone): one deleted while
    /// the watch was down sends no Delete, and is forgotten by the indexes at InitDone.
    pub relisted: Arc<Mutex<Option<HashSet<TDSetRef>>>>,
}

/// A watch of TDSets, cached compactly (see `Cached`); it also keeps the index of targets up
/// to date, tells the status memo what the cache has caught up with, and turns each change
/// into a wakeup (a deletion forgets it). A shard caches only the TDSets it matches: one it
/// stops matching leaves its cache as if deleted, and is let go of. The stream itself
/// triggers nothing: it only has to be driven.
pub(crate) fn tdset_watch(
    api: Api<TDSet>,
    hooks: TDSetHooks,
    stream: bool,
) -> (
    Store<Cached<TDSet>>,
    impl futures::Stream<Item = Result<Cached<TDSet>, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let cached = reader.clone();
    let stream = watcher(api, config(stream))
        .backoff(api_backoff())
        .try_filter_map(move |event| futures::future::ready(Ok(route(&hooks, &cached, event))))
        .map_ok(compact)
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// One TDSet event: the hooks updated, and what the cache is told (a TDSet another shard
/// reconciles arrives as a deletion, or not at all during a list).
fn route(
    hooks: &TDSetHooks,
    cached: &Store<Cached<TDSet>>,
    event: watcher::Event<TDSet>,
) -> Option<watcher::Event<TDSet>> {
    let TDSetHooks {
        index,
        groups,
        calendars,
        statuses,
        wakeups,
        shard,
        relisted,
    } = hooks;
    let wake = |r: &TDSetRef| {
        // A shard wakes only what it caches: a wakeup handed over for a TDSet the controller
        // cannot find would hold its place among the handed ones.
        if shard.is_none() || cached.get(r).is_some() {
            wakeups.now(r.namespace.as_deref().unwrap_or_default(), &r.name);
        }
    };
    let (t, listing) = match event {
        watcher::Event::Apply(t) => (t, false),
        watcher::Event::InitApply(t) => {
            if let Ok(mut seen) = relisted.lock()
                && let Some(seen) = seen.as_mut()
            {
                seen.insert(tdset_ref(&t));
            }
            (t, true)
        }
        watcher::Event::Delete(t) => {
            let ns = t.namespace().unwrap_or_default();
            let unindex = || {
                let mut woken = index.remove(&t);
                woken.extend(groups.remove(&t));
                woken
            };
            // A shard's fill must not put it back (see `shard_scope`).
            let mut woken = match shard {
                Some(s) => s.deleted(&t, unindex),
                None => unindex(),
            };
            // What it held may go to a TDSet of the other form (see below).
            if t.spec.scale_target_selector.is_some() {
                let claim = claim_of(&t);
                woken.extend(index.younger_in_namespace(&ns, &claim));
            }
            if !claimed(&t).is_empty() {
                woken.extend(groups.refs_in_namespace(&ns));
            }
            for other in &woken {
                wake(other);
            }
            calendars.remove(&t);
            statuses.seen(&t, true);
            wakeups.forget(&t.namespace().unwrap_or_default(), &t.name_any());
            if let Some(s) = shard {
                s.forget_wait(&t);
            }
            return Some(watcher::Event::Delete(t));
        }
        watcher::Event::Init => {
            if let Ok(mut seen) = relisted.lock() {
                *seen = Some(HashSet::new());
            }
            if let Some(s) = shard {
                s.list_started();
            }
            return Some(event);
        }
        watcher::Event::InitDone => {
            // A claim or a group whose TDSet was deleted while the watch was down would
            // otherwise hold its workloads forever.
            let seen = relisted.lock().ok().and_then(|mut s| s.take());
            if let Some(seen) = seen {
                let keep = |r: &TDSetRef| seen.contains(r);
                let retain = || {
                    let mut woken = index.retain(keep);
                    woken.extend(groups.retain(keep));
                    woken
                };
                let woken = match shard {
                    Some(s) => s.list_done(&seen, retain),
                    None => retain(),
                };
                for other in woken {
                    wake(&other);
                }
            }
            return Some(event);
        }
    };
    // A claim that moved may hand its old target to another TDSet, or take one. Groups and
    // scaleTargetRefs of a namespace may hold each other's workloads: a scaleTargetRef that
    // moved wakes its namespace's groups (a few), a group that changed the TDSets with a
    // younger claim (only they can have yielded to it). A relist wakes everyone anyway.
    let ns = t.namespace().unwrap_or_default();
    let update = |keep: bool| {
        if !keep {
            // None of the namespace's TDSets is this shard's: nobody to wake.
            index.remove(&t);
            groups.remove(&t);
            return vec![];
        }
        let (moved, mut woken) = index.update_moved(&t);
        let (regrouped, others) = groups.update_changed(&t);
        woken.extend(others);
        if moved && !listing {
            woken.extend(groups.refs_in_namespace(&ns));
        }
        if regrouped && !listing {
            let claim = claim_of(&t);
            woken.extend(index.younger_in_namespace(&ns, &claim));
        }
        woken
    };
    // A shard keeps another shard's TDSet only where it has TDSets of its own.
    let woken = match shard {
        Some(s) => s.admit(&t, listing, update),
        None => update(true),
    };
    for other in woken.iter().filter(|r| r.name != t.name_any()) {
        wake(other);
    }
    if let Some(s) = shard.as_ref().filter(|s| !s.owns(&t)) {
        calendars.remove(&t);
        statuses.seen(&t, true);
        wakeups.forget(&t.namespace().unwrap_or_default(), &t.name_any());
        s.let_go(&t);
        // During a list the cache is rebuilt from what it is given: leaving it out is enough.
        return (!listing).then_some(watcher::Event::Delete(t));
    }
    calendars.update(&t);
    // Our own status write coming back wakes nothing; a relist wakes everything.
    let echo = statuses.seen(&t, false);
    if listing || !(echo && status_only(&t)) {
        wakeups.now(&t.namespace().unwrap_or_default(), &t.name_any());
    }
    let mut t = t;
    if shard.is_none() {
        // Only a shard reads them (see `Prune for TDSet`).
        t.metadata.labels = None;
    }
    Some(if listing {
        watcher::Event::InitApply(t)
    } else {
        watcher::Event::Apply(t)
    })
}

/// Whether nothing but status can have changed since the status on it was computed: the spec
/// it was computed for, and no deletion. A status apply that changes nothing is not stored,
/// and its response carries the revision of someone else's change (a spec edit, a deletion)
/// that came before; that revision must not pass for our write's echo.
fn status_only(t: &TDSet) -> bool {
    t.metadata.deletion_timestamp.is_none()
        && t.metadata.generation.is_some()
        && t.status.as_ref().and_then(|s| s.observed_generation) == t.metadata.generation
}

/// A watch event with its object pruned and compacted for the cache.
fn compact<K>(event: watcher::Event<K>) -> watcher::Event<Cached<K>>
where
    K: Resource + Prune + Serialize + DeserializeOwned,
{
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(Cached::new(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(Cached::new(o)),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(Cached::new(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// HPAs, cached with only what the operator reads (they are small; their scale target is
/// what conflict detection needs).
pub(crate) fn hpa_watch(
    api: Api<HorizontalPodAutoscaler>,
    stream: bool,
) -> (
    Store<HorizontalPodAutoscaler>,
    impl futures::Stream<Item = Result<HorizontalPodAutoscaler, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config(stream))
        .backoff(api_backoff())
        .modify(|h: &mut HorizontalPodAutoscaler| h.prune())
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// The operator's own EndpointSlices (wake on request), by their `managed-by` label, kept
/// whole (they are few and small): what the intercept stage finds present, and a trigger
/// for the TDSet a slice names when someone else changes or deletes one.
pub(crate) fn wake_slice_watch(
    api: Api<EndpointSlice>,
    stream: bool,
    handed_out: Arc<PortsHandedOut>,
    clock: Arc<dyn Clock>,
) -> (
    Store<EndpointSlice>,
    impl futures::Stream<Item = Result<EndpointSlice, watcher::Error>> + Send,
) {
    let (reader, writer) = reflector::store();
    let ours = config(stream).labels(&format!(
        "{}={}",
        intercept::MANAGED_BY_LABEL,
        intercept::MANAGED_BY
    ));
    let mut left = PortsLeft {
        before: reader.clone(),
        handed_out,
        clock,
        relisted: None,
    };
    let stream = watcher(api, ours)
        .backoff(api_backoff())
        // Before the cache takes the event: it still holds the slice as it was.
        .map_ok(move |event| {
            left.saw(&event);
            event
        })
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// Ports the operator's slices let go of without retiring them (see
/// `intercept::ports_left`), kept from other Services while the proxy may still route them:
/// a slice deleted (its TDSet deleted) or narrowed (its Service's port renamed), seen in the
/// watch, also across a relist (a slice gone while the watch was down).
struct PortsLeft {
    /// The cache, before it takes the event.
    before: Store<EndpointSlice>,
    handed_out: Arc<PortsHandedOut>,
    clock: Arc<dyn Clock>,
    /// During a relist: the slices it listed so far.
    relisted: Option<HashSet<reflector::ObjectRef<EndpointSlice>>>,
}

impl PortsLeft {
    fn saw(&mut self, event: &watcher::Event<EndpointSlice>) {
        let now = self.clock.now();
        let changed = |old: Option<&EndpointSlice>, new: Option<&EndpointSlice>| {
            if let Some((service, ports, hold)) = intercept::ports_left(old, new, now) {
                info!(%service, ?ports, hold_s = hold.as_secs(), "proxy ports let go of: kept from other Services while the proxy may still route them");
                self.handed_out.left(&service, &ports, hold);
            }
        };
        match event {
            watcher::Event::Apply(s) => changed(
                self.before
                    .get(&reflector::ObjectRef::from_obj(s))
                    .as_deref(),
                Some(s),
            ),
            watcher::Event::Delete(s) => {
                let old = self.before.get(&reflector::ObjectRef::from_obj(s));
                changed(Some(old.as_deref().unwrap_or(s)), None)
            }
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitApply(s) => {
                let at = reflector::ObjectRef::from_obj(s);
                changed(self.before.get(&at).as_deref(), Some(s));
                if let Some(listed) = self.relisted.as_mut() {
                    listed.insert(at);
                }
            }
            watcher::Event::InitDone => {
                let Some(listed) = self.relisted.take() else {
                    return;
                };
                for old in self.before.state() {
                    if !listed.contains(&reflector::ObjectRef::from_obj(old.as_ref())) {
                        changed(Some(old.as_ref()), None);
                    }
                }
            }
        }
    }
}

/// Changes of every object of a built-in scalable kind that the operator does not own,
/// metadata only and kept nowhere: a trigger for the TDSets that reference one (their
/// reconcile reads the target live). The operator's own Deployments (and the ReplicaSets that
/// inherit their pod labels) are left out: the owned watch already sees them, and at a
/// boundary a second watch of each would double the API server's fan-out for every scale.
pub(crate) fn target_watch<K>(
    api: Api<PartialObjectMeta<K>>,
    stream: bool,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let not_owned = config(stream).labels(&format!("{}!={FIELD_MANAGER}", owned::MANAGED_BY_LABEL));
    watcher(api, not_owned)
        .backoff(api_backoff())
        .touched_objects()
}

/// A watch of the owned objects of kind `K` (by label), cached compactly (see `Cached`).
pub(crate) fn owned_watch<K>(
    api: Api<K>,
    stream: bool,
) -> (
    Store<Cached<K>>,
    impl futures::Stream<Item = Result<Cached<K>, watcher::Error>> + Send,
)
where
    K: Resource<DynamicType = ()>
        + Prune
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let owned = config(stream).labels(&format!("{}={FIELD_MANAGER}", owned::MANAGED_BY_LABEL));
    let stream = watcher(api, owned)
        .backoff(api_backoff())
        .map_ok(compact)
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

pub(crate) fn api_for<K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>>(
    client: &Client,
    ns: &Option<String>,
) -> Api<K> {
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The wake proxy's pods moving (a ready address of its own Service's slices added or gone)
/// reconciles each TDSet whose slices name other addresses than the ready ones (its reconcile
/// reads the proxy's slices live and applies both in one write, so a pod that goes is never
/// the last one named). Compared slice by slice at every settled event, so a change a watch
/// gap hid is caught at the relist, and events that change nothing trigger nothing. With no
/// proxy ready (all restarting), nothing is triggered: the slices keep what they name.
pub(crate) fn proxy_moves(
    api: Api<EndpointSlice>,
    service: &str,
    stream: bool,
    ours: Store<EndpointSlice>,
) -> impl futures::Stream<Item = TDSetRef> + Send + use<> {
    let (reader, writer) = reflector::store();
    let of_proxy = config(stream).labels(&format!("{}={service}", intercept::SERVICE_NAME_LABEL));
    watcher(api, of_proxy)
        .backoff(api_backoff())
        .reflect(writer)
        .filter_map(move |event| {
            // A relist's objects reach the store at its end: compared then, not one by one.
            let settled = match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => true,
                Ok(_) => false,
                Err(e) => {
                    warn!(error = %e, "watching the wake proxy's EndpointSlices; retrying");
                    false
                }
            };
            let stale = settled
                .then(|| stale_slices(&ready_proxies(&reader.state()), &ours.state()))
                .filter(|s| !s.is_empty());
            if let Some(s) = &stale {
                info!(
                    tdsets = s.len(),
                    "the wake proxy's pods moved; rewriting the slices that name them"
                );
            }
            futures::future::ready(stale)
        })
        .flat_map(|stale| {
            futures::stream::iter(
                stale
                    .into_iter()
                    .map(|(ns, name)| tdset_ref_named(&ns, &name)),
            )
        })
}

/// The addresses of the proxy's pods that serve, from its Service's slices.
fn ready_proxies(slices: &[Arc<EndpointSlice>]) -> BTreeSet<String> {
    (slices.iter())
        .flat_map(|s| &s.endpoints)
        .filter(|e| intercept::serves(e))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect()
}

/// The TDSets (namespace, name) whose slices name other addresses of their family than the
/// `ready` proxies; none when no proxy is ready.
fn stale_slices(
    ready: &BTreeSet<String>,
    ours: &[Arc<EndpointSlice>],
) -> BTreeSet<(String, String)> {
    if ready.is_empty() {
        return BTreeSet::new();
    }
    (ours.iter())
        .filter(|s| {
            let v6 = s.address_type == "IPv6";
            let want: BTreeSet<&String> = ready.iter().filter(|a| a.contains(':') == v6).collect();
            let have: BTreeSet<&String> = s.endpoints.iter().flat_map(|e| &e.addresses).collect();
            want != have
        })
        .filter_map(|s| {
            let tdset = s.labels().get(intercept::TDSET_LABEL)?;
            Some((s.namespace()?, tdset.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::TDSetStatus;
    use crate::workload::owned::tests::tdset;

    #[test]
    fn only_a_tdset_whose_status_is_for_its_spec_and_not_deleted_can_be_an_echo() {
        let mut t = tdset("web");
        t.metadata.generation = Some(2);
        t.status = Some(TDSetStatus {
            observed_generation: Some(2),
            ..TDSetStatus::default()
        });
        assert!(status_only(&t));
        // A spec edit the status was not computed for.
        t.metadata.generation = Some(3);
        assert!(!status_only(&t));
        t.metadata.generation = Some(2);
        // A deletion (a metadata change only).
        t.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!status_only(&t));
        t.metadata.deletion_timestamp = None;
        t.status = None;
        assert!(!status_only(&t));
    }

    #[test]
    fn slices_naming_other_proxies_than_the_ready_ones_are_stale() {
        let slice = |tdset: &str, family: &str, addresses: &[&str]| {
            Arc::new(
                serde_json::from_value::<EndpointSlice>(serde_json::json!({
                    "metadata": {"name": format!("{tdset}-{family}"), "namespace": "ns",
                                 "labels": {intercept::TDSET_LABEL: tdset}},
                    "addressType": family,
                    "endpoints": [{"addresses": addresses}],
                }))
                .unwrap(),
            )
        };
        let ours = [
            slice("current", "IPv4", &["10.0.0.7"]),
            slice("current", "IPv6", &["fd00::7"]),
            slice("behind", "IPv4", &["10.0.0.5"]),
        ];
        let ready: BTreeSet<String> = ["10.0.0.7", "fd00::7"].map(String::from).into();
        assert_eq!(
            stale_slices(&ready, &ours),
            BTreeSet::from([("ns".to_string(), "behind".to_string())])
        );
        // No proxy ready: nothing is rewritten to name none.
        assert!(stale_slices(&BTreeSet::new(), &ours).is_empty());
    }
}
