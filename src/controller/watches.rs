//! The watches that feed the controller, each with a cache that keeps only what a reconcile
//! reads, and the backoff they share.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use super::calendars::CalendarIndex;
use super::context::{TDSetRef, tdset_ref, tdset_ref_named};
use super::group_index::GroupIndex;
use super::shards::Sharding;
use super::wakeups::Wakeups;
use crate::api::TDSet;
use crate::cache::{Cached, Prune};
use crate::memo::StatusMemo;
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
pub(super) async fn streams_lists(api: Api<TDSet>, wanted: InitialList) -> bool {
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
pub(super) struct TDSetHooks {
    /// Which TDSets reference which target: every TDSet, whichever shard reconciles it, so
    /// one writer per workload holds across shards.
    pub index: TargetIndex,
    /// What each group selects: every TDSet, whichever shard reconciles it, too.
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
pub(super) fn tdset_watch(
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
            let mut woken = index.remove(&t);
            woken.extend(groups.remove(&t));
            // What it held may go to a TDSet of the other form (see below).
            if t.spec.scale_target_selector.is_some() {
                let claim = super::group_index::claim_of(&t);
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
            return Some(event);
        }
        watcher::Event::InitDone => {
            // A claim or a group whose TDSet was deleted while the watch was down would
            // otherwise hold its workloads forever.
            let seen = relisted.lock().ok().and_then(|mut s| s.take());
            if let Some(seen) = seen {
                let keep = |r: &TDSetRef| seen.contains(r);
                for other in index.retain(keep).into_iter().chain(groups.retain(keep)) {
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
    let (moved, mut woken) = index.update_moved(&t);
    let (regrouped, others) = groups.update_changed(&t);
    woken.extend(others);
    if moved && !listing {
        woken.extend(groups.refs_in_namespace(&ns));
    }
    if regrouped && !listing {
        let claim = super::group_index::claim_of(&t);
        woken.extend(index.younger_in_namespace(&ns, &claim));
    }
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

/// (namespace, group, kind, name) of a referenced object.
type TargetKey = (String, String, String, String);

/// Which TDSets reference which object, so a change of a target (or of an HPA that scales it)
/// reconciles exactly the TDSets concerned, without scanning every TDSet per event. It also
/// says which of them holds the object: the oldest claim (creationTimestamp, then name).
#[derive(Clone, Default)]
pub struct TargetIndex(Arc<RwLock<Index>>);

/// A TDSet's claim on a target, ordered as holding goes: older first, then by name.
type Claim = (String, String);

#[derive(Default)]
struct Index {
    by_target: HashMap<TargetKey, BTreeSet<Claim>>,
    by_tdset: HashMap<TDSetRef, Claims>,
}

/// A target's key as the index keeps it.
fn owned_key((ns, group, kind, name): (&str, &str, &str, &str)) -> TargetKey {
    (ns.into(), group.into(), kind.into(), name.into())
}

/// What one TDSet claims, and the original count its status records.
#[derive(PartialEq)]
struct Claims {
    keys: Vec<TargetKey>,
    claim: Claim,
    recorded: Option<Recorded>,
    /// Being deleted: it lets go of what it holds, so nothing is handed over to it.
    deleting: bool,
}

/// The count a TDSet's status records as its target's own (`originalReplicas`), and of which
/// object (uid).
#[derive(PartialEq)]
struct Recorded {
    key: TargetKey,
    uid: String,
    original: i32,
    /// The count it sets (`desiredReplicas`): its original is the own count of an object
    /// only while the object runs what it set.
    sets: Option<i32>,
}

fn recorded(tdset: &TDSet) -> Option<Recorded> {
    let t = tdset.status.as_ref()?.target.as_ref()?;
    let group = t.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some(Recorded {
        key: (
            tdset.namespace().unwrap_or_default(),
            group.to_string(),
            t.kind.clone(),
            t.name.clone(),
        ),
        uid: t.uid.clone()?,
        original: t.original_replicas?,
        sets: tdset.status.as_ref()?.desired_replicas,
    })
}

/// What a TDSet claims: the target its spec names, and the one its status still records. The
/// latter differs only while a retargeted TDSet has not yet let go of its old target (given
/// its count back): until its status names the new one, nobody else takes the old one over,
/// or it would record the count this TDSet set as its own original.
fn claimed(tdset: &TDSet) -> Vec<TargetKey> {
    let ns = tdset.namespace().unwrap_or_default();
    let spec = tdset.spec.scale_target_ref.as_ref().map(|r| {
        (
            ns.clone(),
            r.group().to_string(),
            r.kind.clone(),
            r.name.clone(),
        )
    });
    let recorded = tdset
        .status
        .as_ref()
        .and_then(|s| s.target.as_ref())
        .filter(|t| !t.name.is_empty())
        .map(|t| {
            let group = t.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            (
                ns.clone(),
                group.to_string(),
                t.kind.clone(),
                t.name.clone(),
            )
        });
    let mut keys: Vec<TargetKey> = spec.into_iter().chain(recorded).collect();
    keys.dedup();
    keys
}

impl TargetIndex {
    /// Records the TDSet's targets (see `claimed`); returns the other TDSets whose claim may
    /// have changed hands (those on a target it left or joined), to be reconciled.
    pub fn update(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        self.update_moved(tdset).1
    }

    /// `update`, and whether the TDSet's claims moved (a target taken or left).
    pub fn update_moved(&self, tdset: &TDSet) -> (bool, Vec<TDSetRef>) {
        let Ok(mut index) = self.0.write() else {
            return (false, vec![]);
        };
        let me = tdset_ref(tdset);
        let ns = tdset.namespace().unwrap_or_default();
        let keys = claimed(tdset);
        let claims = Claims {
            claim: super::group_index::claim_of(tdset),
            recorded: recorded(tdset),
            deleting: tdset.metadata.deletion_timestamp.is_some(),
            keys,
        };
        match index.by_tdset.get(&me) {
            Some(known) if *known == claims => return (false, vec![]),
            Some(known) if known.keys == claims.keys && known.claim == claims.claim => {
                // Only the recorded original (or the deletion) changed: nobody's claim moved.
                index.by_tdset.insert(me, claims);
                return (false, vec![]);
            }
            None if claims.keys.is_empty() => return (false, vec![]),
            _ => {}
        }
        let mut others = index.unlink(&me);
        if !claims.keys.is_empty() {
            for key in &claims.keys {
                let set = index.by_target.entry(key.clone()).or_default();
                others.extend(set.iter().map(|(_, name)| tdset_ref_named(&ns, name)));
                set.insert(claims.claim.clone());
            }
            index.by_tdset.insert(me, claims);
        }
        (true, others)
    }

    /// The original TDSet `who`'s status records for the object `uid` (durably: what the
    /// watch has seen), whatever it sets now; none while it is being deleted (it gives its
    /// targets back, nothing is handed to it).
    pub fn original_of(&self, key: (&str, &str, &str, &str), uid: &str, who: &str) -> Option<i32> {
        let (ns, key) = (key.0, owned_key(key));
        let index = self.0.read().ok()?;
        let claims = index.by_tdset.get(&tdset_ref_named(ns, who))?;
        let r = claims.recorded.as_ref().filter(|_| !claims.deleting)?;
        (r.key == key && r.uid == uid).then_some(r.original)
    }

    /// The TDSets of the namespace whose claims are younger than `than`: those a group with
    /// that claim may hold workloads of (an older claim holds whatever the group does). An
    /// HPA's claim beats any group's, so TDSets that claim HPAs are left out.
    pub fn younger_in_namespace(&self, ns: &str, than: &Claim) -> Vec<TDSetRef> {
        self.0
            .read()
            .map(|index| {
                index
                    .by_tdset
                    .iter()
                    .filter(|(r, c)| {
                        r.namespace.as_deref() == Some(ns)
                            && c.claim > *than
                            && c.keys.iter().any(|k| k.2 != "HorizontalPodAutoscaler")
                    })
                    .map(|(r, _)| r.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The own count another TDSet's status records for the object `uid` (its original), if
    /// the object runs `current`, the count that TDSet sets: what a TDSet taking the object
    /// over from it (an older claim arriving) must take for the own count, rather than the
    /// count that TDSet set. A record of a TDSet that did not set `current` (it waited,
    /// someone changed the count since) says nothing of it.
    pub fn original_elsewhere(
        &self,
        key: (&str, &str, &str, &str),
        uid: &str,
        me: &str,
        current: i32,
    ) -> Option<(String, i32)> {
        let (ns, key) = (key.0, owned_key(key));
        let index = self.0.read().ok()?;
        index.by_target.get(&key)?.iter().find_map(|(_, other)| {
            if other == me {
                return None;
            }
            let r = index
                .by_tdset
                .get(&tdset_ref_named(ns, other))?
                .recorded
                .as_ref()?;
            (r.key == key && r.uid == uid && r.sets == Some(current))
                .then(|| (other.clone(), r.original))
        })
    }

    /// Forgets the TDSet; returns the others that claimed its target.
    pub fn remove(&self, tdset: &TDSet) -> Vec<TDSetRef> {
        self.0
            .write()
            .map(|mut index| index.unlink(&tdset_ref(tdset)))
            .unwrap_or_default()
    }

    /// Forgets every TDSet `keep` refuses (not in a relist); returns the others that claimed
    /// their targets.
    pub fn retain(&self, keep: impl Fn(&TDSetRef) -> bool) -> Vec<TDSetRef> {
        let Ok(mut index) = self.0.write() else {
            return vec![];
        };
        let gone: Vec<TDSetRef> = index
            .by_tdset
            .keys()
            .filter(|r| !keep(r))
            .cloned()
            .collect();
        gone.iter()
            .flat_map(|r| index.unlink(r))
            .filter(|r| keep(r))
            .collect()
    }

    pub fn lookup(&self, ns: &str, group: &str, kind: &str, name: &str) -> Vec<TDSetRef> {
        self.claims(ns, group, kind, name)
            .iter()
            .map(|(_, n)| tdset_ref_named(ns, n))
            .collect()
    }

    /// The TDSet that holds the object: the oldest of those that reference it.
    pub fn holder(&self, ns: &str, group: &str, kind: &str, name: &str) -> Option<String> {
        self.claims(ns, group, kind, name)
            .into_iter()
            .next()
            .map(|(_, n)| n)
    }

    /// The claims on an object, oldest first.
    pub fn claims(&self, ns: &str, group: &str, kind: &str, name: &str) -> Vec<Claim> {
        let key = (
            ns.to_string(),
            group.to_string(),
            kind.to_string(),
            name.to_string(),
        );
        self.0
            .read()
            .ok()
            .and_then(|index| {
                index
                    .by_target
                    .get(&key)
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }
}

impl Index {
    /// Removes the TDSet's claims; returns the TDSets left claiming what it claimed.
    fn unlink(&mut self, me: &TDSetRef) -> Vec<TDSetRef> {
        let Some(Claims {
            keys: old, claim, ..
        }) = self.by_tdset.remove(me)
        else {
            return vec![];
        };
        let mut others = Vec::new();
        for key in old {
            let Some(set) = self.by_target.get_mut(&key) else {
                continue;
            };
            set.remove(&claim);
            others.extend(set.iter().map(|(_, name)| tdset_ref_named(&key.0, name)));
            if set.is_empty() {
                self.by_target.remove(&key);
            }
        }
        others
    }
}

/// HPAs, cached with only what the operator reads (they are small; their scale target is
/// what conflict detection needs).
pub(super) fn hpa_watch(
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

/// Changes of every object of a built-in scalable kind that the operator does not own,
/// metadata only and kept nowhere: a trigger for the TDSets that reference one (their
/// reconcile reads the target live). The operator's own Deployments (and the ReplicaSets that
/// inherit their pod labels) are left out: the owned watch already sees them, and at a
/// boundary a second watch of each would double the API server's fan-out for every scale.
pub(super) fn target_watch<K>(
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
pub(super) fn owned_watch<K>(
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

/// Retries against an unreachable API server every few seconds at most: kube's default grows
/// to 30 s per layer, and the watch and the controller each back off, so an operator could sit
/// idle for a minute after the API server was already back.
#[derive(Clone, Copy, Debug)]
pub(super) struct ApiBackoff {
    next: Duration,
}

impl ApiBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(5);
}

impl Iterator for ApiBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for ApiBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

pub(super) fn api_backoff() -> ApiBackoff {
    ApiBackoff {
        next: ApiBackoff::MIN,
    }
}

pub(super) fn api_for<K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>>(
    client: &Client,
    ns: &Option<String>,
) -> Api<K> {
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
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

    fn claiming(name: &str, created: &str, target: &str) -> TDSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "schedule.rs/v1", "kind": "TDSet",
            "metadata": {"name": name, "namespace": "dev", "creationTimestamp": created},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "schedulingConfig": [], "defaultReplica": 1}
        }))
        .unwrap()
    }

    fn recording(mut t: TDSet, target: &str) -> TDSet {
        t.status = Some(TDSetStatus {
            target: Some(crate::api::TargetStatus {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: target.into(),
                field: "spec.replicas".into(),
                original_replicas: Some(1),
                ..Default::default()
            }),
            ..TDSetStatus::default()
        });
        t
    }

    /// A retargeted TDSet holds its old target until its status no longer records it (it has
    /// given the count back): a younger claim taking it over sooner would record the count the
    /// older one set as the workload's own.
    #[test]
    fn a_retargeted_tdset_holds_its_old_target_until_its_status_lets_go() {
        let index = TargetIndex::default();
        let holder = |name: &str| index.holder("dev", "apps", "Deployment", name);
        let older = recording(claiming("older", "2026-01-01T00:00:00Z", "web"), "web");
        index.update(&older);
        index.update(&claiming("younger", "2026-02-01T00:00:00Z", "web"));
        assert_eq!(holder("web").as_deref(), Some("older"));

        // Pointed elsewhere; the status still records web.
        let moved = recording(claiming("older", "2026-01-01T00:00:00Z", "api"), "web");
        let woken = index.update(&moved);
        assert_eq!(holder("web").as_deref(), Some("older"));
        assert_eq!(holder("api").as_deref(), Some("older"));
        assert!(woken.iter().all(|r| r.name == "younger"), "{woken:?}");

        // Web given back: the status records api now, and the younger is woken to take web.
        let woken = index.update(&recording(moved, "api"));
        assert_eq!(holder("web").as_deref(), Some("younger"));
        assert_eq!(holder("api").as_deref(), Some("older"));
        assert!(woken.iter().any(|r| r.name == "younger"), "{woken:?}");
        // Nothing changed, nobody woken.
        let same = recording(claiming("older", "2026-01-01T00:00:00Z", "api"), "api");
        assert!(index.update(&same).is_empty());
    }
}
