//! Shards, the controller's side of the rule in `crate::shard`: claiming a TDSet before any
//! write for it, letting go of the TDSets this shard no longer matches, and reading another
//! shard's Lease when its claim has not been let go of.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::group_index::GroupIndex;
use super::shard_scope::Scope;
use super::target_index::TargetIndex;
use super::wakeups::Wakeups;
use crate::api::{TDSet, TDSetStatus};
use crate::cache::{Cached, tdset_ref_named};
use crate::controller::lane::Lane;
use crate::memo::StatusMemo;
use crate::shard::{self, LeaseRecord, ShardSpec};
use crate::telemetry::Metrics;
use crate::workload::owned::FIELD_MANAGER;

/// How a shard is run: what it selects, and where the other shards' Leases are.
#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub spec: ShardSpec,
    /// Shard `x`'s Lease is `<lease_prefix>-x` ...
    pub lease_prefix: String,
    /// ... in this namespace (the same for every shard of one installation).
    pub lease_namespace: String,
}

impl ShardOptions {
    pub fn lease_name(&self, shard: &str) -> String {
        format!("{}-{shard}", self.lease_prefix)
    }
}

/// Another shard's Lease is read at most this often (one read serves every TDSet it holds).
const LEASE_READ_EVERY: Duration = Duration::from_secs(1);
/// Lettings-go sent at once.
const RELEASES_AT_ONCE: usize = 8;

/// One shard's state, shared by the watch, the reconciles and the task that lets go.
pub struct Sharding {
    pub options: ShardOptions,
    leases: Api<Lease>,
    /// Reconciles running per TDSet ("ns/name"), and whether it is being let go of.
    slots: Mutex<HashMap<String, Slot>>,
    /// TDSets to let go of: key -> (namespace, name, uid).
    to_release: Mutex<HashMap<String, (String, String, String)>>,
    work: tokio::sync::Notify,
    /// TDSets waiting for another shard's claim, with what was seen of its Lease.
    waits: Mutex<HashMap<String, Waiting>>,
    /// Another shard's Lease as last read: shard -> (when, record).
    leases_seen: Mutex<HashMap<String, (Instant, Option<LeaseRecord>)>>,
    /// Which other shards' TDSets the indexes hold (see `shard_scope`).
    scope: Scope,
}

#[derive(Default)]
struct Slot {
    running: u32,
    releasing: bool,
}

struct Waiting {
    watch: Option<shard::Watch>,
    since: Instant,
    warned: bool,
}

/// A reconcile of a TDSet in progress; letting go of it waits until none is.
pub struct Running {
    sharding: Arc<Sharding>,
    key: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut ended = false;
        if let Ok(mut slots) = self.sharding.slots.lock()
            && let Some(slot) = slots.get_mut(&self.key)
        {
            slot.running = slot.running.saturating_sub(1);
            if slot.running == 0 && !slot.releasing {
                slots.remove(&self.key);
                ended = true;
            }
        }
        if ended {
            self.sharding.idle(&self.key);
        }
    }
}

fn key_of(t: &impl Resource) -> String {
    format!("{}/{}", t.namespace().unwrap_or_default(), t.name_any())
}

impl Sharding {
    /// `targets` and `groups`: the indexes the TDSet watch feeds, of which this shard keeps
    /// other shards' TDSets only where it needs them.
    pub fn new(
        options: ShardOptions,
        client: Client,
        targets: TargetIndex,
        groups: GroupIndex,
        metrics: &Metrics,
    ) -> Arc<Sharding> {
        Arc::new(Sharding {
            leases: Api::namespaced(client, &options.lease_namespace),
            options,
            slots: Mutex::default(),
            to_release: Mutex::default(),
            work: tokio::sync::Notify::new(),
            waits: Mutex::default(),
            leases_seen: Mutex::default(),
            scope: Scope::new(
                targets,
                groups,
                metrics.shard_others_indexed.clone(),
                metrics.shard_index_fills.clone(),
            ),
        })
    }

    /// Whether a reconcile of a TDSet of the namespace runs, or one is being let go of.
    fn busy_in(&self, ns: &str) -> bool {
        let prefix = format!("{ns}/");
        self.slots
            .lock()
            .map_or(true, |slots| slots.keys().any(|k| k.starts_with(&prefix)))
    }

    /// A TDSet the watch shows: `index(keep)` puts it into the indexes or takes it out of
    /// them (see `shard_scope`).
    pub fn admit<R>(&self, t: &TDSet, listing: bool, index: impl FnOnce(bool) -> R) -> R {
        self.scope
            .admit(t, self.owns(t), listing, &|ns| self.busy_in(ns), index)
    }

    /// A TDSet the watch shows deleted: `unindex` takes it out of the indexes.
    pub fn deleted<R>(&self, t: &TDSet, unindex: impl FnOnce() -> R) -> R {
        self.scope.deleted(t, &|ns| self.busy_in(ns), unindex)
    }

    /// An initial list begins.
    pub fn list_started(&self) {
        self.scope.list_started(&|ns| self.busy_in(ns));
    }

    /// An initial list ended, having shown `seen`: `retain` takes what it did not show out of
    /// the indexes.
    pub fn list_done<R>(
        &self,
        seen: &std::collections::HashSet<crate::cache::TDSetRef>,
        retain: impl FnOnce() -> R,
    ) -> R {
        self.scope.list_done(seen, &|ns| self.busy_in(ns), retain)
    }

    /// Whether the claims of the namespace are all known: this shard's TDSets there may be
    /// written.
    pub fn index_ready(&self, ns: &str) -> bool {
        self.scope.ready(ns)
    }

    /// The reconciles of TDSet `key` ("ns/name") have ended.
    fn idle(&self, key: &str) {
        let ns = key.split_once('/').map_or(key, |(ns, _)| ns);
        self.scope.idle(ns, &|ns| self.busy_in(ns));
    }

    pub fn name(&self) -> &str {
        &self.options.spec.name
    }

    /// Whether this shard reconciles the TDSet (its labels match the selector).
    pub fn owns(&self, t: &TDSet) -> bool {
        self.options.spec.matches(t.labels())
    }

    /// Starts a reconcile of `key`; `None` while this shard is letting go of it.
    pub fn enter(self: &Arc<Self>, key: &str) -> Option<Running> {
        let mut slots = self.slots.lock().ok()?;
        let slot = slots.entry(key.to_string()).or_default();
        if slot.releasing {
            return None;
        }
        slot.running += 1;
        Some(Running {
            sharding: self.clone(),
            key: key.to_string(),
        })
    }

    /// The watch saw a TDSet this shard does not match: if this shard's name is its claim,
    /// no reconcile of it starts from now on, and it is let go of once those running end.
    pub fn let_go(&self, t: &TDSet) {
        let claimed = t.status.as_ref().and_then(|s| s.shard.as_deref());
        let Some(uid) = t.meta().uid.clone() else {
            return;
        };
        self.forget_wait(t);
        if claimed != Some(self.name()) {
            return;
        }
        let key = key_of(t);
        if let Ok(mut slots) = self.slots.lock() {
            slots.entry(key.clone()).or_default().releasing = true;
        }
        if let Ok(mut r) = self.to_release.lock() {
            r.insert(key, (t.namespace().unwrap_or_default(), t.name_any(), uid));
        }
        self.work.notify_one();
    }

    /// The TDSet is no longer this shard's (or is gone): nothing to wait for.
    pub fn forget_wait(&self, t: &impl Resource) {
        if let Ok(mut w) = self.waits.lock() {
            w.remove(&key_of(t));
        }
    }

    /// How many TDSets wait for another shard's claim.
    pub(crate) fn waiting(&self) -> usize {
        self.waits.lock().map_or(0, |w| w.len())
    }

    fn running(&self, key: &str) -> u32 {
        self.slots
            .lock()
            .map(|s| s.get(key).map_or(0, |s| s.running))
            .unwrap_or(0)
    }

    /// The other shard's Lease, read at most once a second unless `fresh`; `Err` when it could
    /// not be read.
    async fn lease_of(&self, shard: &str, fresh: bool) -> Result<Option<LeaseRecord>, ()> {
        if !fresh
            && let Ok(seen) = self.leases_seen.lock()
            && let Some((at, record)) = seen.get(shard)
            && at.elapsed() < LEASE_READ_EVERY
        {
            return Ok(record.clone());
        }
        let name = self.options.lease_name(shard);
        let read = tokio::time::timeout(Duration::from_secs(5), self.leases.get_opt(&name)).await;
        let record = match read {
            Ok(Ok(lease)) => lease.map(|l| {
                let spec = l.spec.unwrap_or_default();
                let time = |t: Option<String>| t.unwrap_or_default();
                LeaseRecord {
                    holder: spec.holder_identity.unwrap_or_default(),
                    acquired: time(
                        spec.acquire_time
                            .and_then(|t| serde_json::to_string(&t).ok()),
                    ),
                    transitions: spec.lease_transitions.unwrap_or(0),
                    renewed: time(spec.renew_time.and_then(|t| serde_json::to_string(&t).ok())),
                    duration: Duration::from_secs(
                        spec.lease_duration_seconds.unwrap_or(15).max(1) as u64
                    ),
                    selector: l
                        .metadata
                        .annotations
                        .and_then(|mut a| a.remove(shard::SELECTOR_ANNOTATION)),
                }
            }),
            Ok(Err(e)) => {
                debug!(lease = %name, error = %e, "could not read another shard's Lease");
                return Err(());
            }
            Err(_) => return Err(()),
        };
        if let Ok(mut seen) = self.leases_seen.lock() {
            seen.insert(shard.to_string(), (Instant::now(), record.clone()));
        }
        Ok(record)
    }

    /// Whether the claim of `holder` on this TDSet may be taken over now.
    pub(crate) async fn may_take_over(&self, t: &TDSet, holder: &str) -> bool {
        let key = key_of(t);
        // The first look at a claim is a fresh read: only what happens after it may count.
        let first = self.waits.lock().map_or(true, |w| !w.contains_key(&key));
        let Ok(lease) = self.lease_of(holder, first).await else {
            return false;
        };
        let Ok(mut waits) = self.waits.lock() else {
            return false;
        };
        let now = Instant::now();
        let w = waits.entry(key.clone()).or_insert_with(|| {
            info!(tdset = %key, holder, "this shard matches the TDSet; waiting for shard {holder} to let go of it");
            Waiting {
                watch: None,
                since: now,
                warned: false,
            }
        });
        let verdict = shard::may_take_over(
            &mut w.watch,
            holder,
            lease.as_ref(),
            t.labels(),
            now.into_std(),
        );
        let long = lease
            .as_ref()
            .map_or(Duration::from_secs(30), |l| l.duration * 2);
        match verdict {
            shard::Takeover::Take(why) => {
                info!(tdset = %key, holder, waited = ?now.duration_since(w.since), "taking the TDSet over from shard {holder}: {why}");
                waits.remove(&key);
                true
            }
            shard::Takeover::Wait(why) => {
                if !w.warned && now.duration_since(w.since) > long {
                    w.warned = true;
                    warn!(tdset = %key, holder, "shard {holder} has not let go of the TDSet: {why}; this shard writes nothing to it meanwhile");
                }
                false
            }
        }
    }
}

/// Lets go of the TDSets handed to `let_go`, a few at a time, until the controller stops
/// (aborting this aborts those in progress: a shard that lost its Lease writes nothing).
pub(crate) async fn let_go_loop(
    sharding: Arc<Sharding>,
    client: Client,
    lane: Lane,
    statuses: Arc<StatusMemo>,
    wakeups: Arc<Wakeups>,
    store: Store<Cached<TDSet>>,
    metrics: Arc<Metrics>,
) {
    let limit = Arc::new(tokio::sync::Semaphore::new(RELEASES_AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    loop {
        let work = sharding.work.notified();
        let batch: Vec<_> = sharding
            .to_release
            .lock()
            .map(|mut r| r.drain().collect())
            .unwrap_or_default();
        for (key, (ns, name, uid)) in batch {
            let (sharding, client, lane, statuses, wakeups, store, metrics, limit) = (
                sharding.clone(),
                client.clone(),
                lane.clone(),
                statuses.clone(),
                wakeups.clone(),
                store.clone(),
                metrics.clone(),
                limit.clone(),
            );
            running.spawn(async move {
                let Ok(_permit) = limit.acquire_owned().await else {
                    return;
                };
                // Reconciles that started before the move end first; none starts meanwhile.
                while sharding.running(&key) > 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let mut delay = Duration::from_secs(1);
                loop {
                    let me = sharding.name().to_string();
                    let sent = lane
                        .without_status(&uid, release(&client, &metrics, &ns, &name, &uid, &me))
                        .await;
                    match sent {
                        Ok(Some((status, produced))) => {
                            // Until the cache shows the release, a reconcile of a stale copy
                            // (moved back meanwhile) must not read its old claim as still held.
                            statuses.replace(&uid, status, produced);
                            break;
                        }
                        Ok(None) => {
                            statuses.forget(&uid);
                            break;
                        }
                        Err(e) => {
                            warn!(tdset = %key, error = %e, retry_in = ?delay, "could not let go of the TDSet; retrying");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(30));
                        }
                    }
                }
                if let Ok(mut slots) = sharding.slots.lock()
                    && let Some(slot) = slots.get_mut(&key)
                {
                    slot.releasing = false;
                    if slot.running == 0 {
                        slots.remove(&key);
                    }
                }
                sharding.idle(&key);
                // Moved back meanwhile: this shard reconciles it again (claiming it anew).
                if store.get(&tdset_ref_named(&ns, &name)).is_some() {
                    wakeups.now(&ns, &name);
                }
            });
        }
        while running.try_join_next().is_some() {}
        work.await;
    }
}

/// Removes this shard's name from `status.shard`, only if it is still there on the same TDSet
/// (JSON patch tests). A TDSet gone, replaced, or claimed by another shard: nothing to do.
async fn release(
    client: &Client,
    metrics: &Metrics,
    ns: &str,
    name: &str,
    uid: &str,
    me: &str,
) -> crate::Result<Option<(TDSetStatus, Option<String>)>> {
    let api: Api<TDSet> = Api::namespaced(client.clone(), ns);
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/status/shard", "value": me},
        {"op": "remove", "path": "/status/shard"},
    ]))
    .map_err(|source| crate::Error::Serialize {
        what: "a shard release",
        source,
    })?;
    metrics.write("tdsets/status", "patch");
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch_status(name, &pp, &Patch::Json::<()>(patch)).await {
        Ok(released) => {
            info!(tdset = %format!("{ns}/{name}"), shard = me, "let go of the TDSet: it no longer matches this shard's selector");
            Ok(Some((
                released.status.unwrap_or_default(),
                released.metadata.resource_version,
            )))
        }
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_invalid() || s.is_conflict() => {
            debug!(tdset = %format!("{ns}/{name}"), "nothing to let go of (gone, or no longer this shard's)");
            Ok(None)
        }
        Err(e) => Err(crate::Error::kube(format!(
            "letting go of TDSet {ns}/{name}"
        ))(e)),
    }
}

/// Page size of a fill's list: 50 TDSets of the largest spec the schema allows are 7.5 MB.
const FILL_PAGE: u32 = 50;
/// Namespaces filled at once.
const FILLS_AT_ONCE: usize = 4;

/// Lists the namespaces whose index is incomplete when this shard's first TDSet arrives there
/// (see `shard_scope`), and wakes that shard's TDSets there once it is done (those the cache
/// has: a wakeup for one the controller cannot find would hold a place among those handed
/// over).
pub(crate) async fn fill_loop(
    sharding: Arc<Sharding>,
    client: Client,
    wakeups: Arc<Wakeups>,
    store: Store<Cached<TDSet>>,
) {
    let limit = Arc::new(tokio::sync::Semaphore::new(FILLS_AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    loop {
        let ns = sharding.scope.next_fill().await;
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (sharding, wakeups, store) = (sharding.clone(), wakeups.clone(), store.clone());
        let api: Api<TDSet> = Api::namespaced(client.clone(), &ns);
        running.spawn(async move {
            let _permit = permit;
            let mut delay = Duration::from_secs(1);
            while let Err(e) = fill(&sharding, &api, &ns).await {
                warn!(namespace = %ns, error = %e, retry_in = ?delay, "could not list the namespace's TDSets; its TDSets of this shard wait");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            let woken = sharding.scope.fill_done(&ns, &|n| sharding.busy_in(n));
            debug!(namespace = %ns, tdsets = woken.len(), "other shards' TDSets of the namespace indexed");
            for name in woken {
                if store.get(&tdset_ref_named(&ns, &name)).is_some() {
                    wakeups.now(&ns, &name);
                }
            }
        });
        while running.try_join_next().is_some() {}
    }
}

/// One fill's list, page by page (a fresh, consistent read: what it shows is no older than
/// anything the watch has shown); read again from the start when an initial list of the watch
/// ended meanwhile.
async fn fill(sharding: &Sharding, api: &Api<TDSet>, ns: &str) -> Result<(), kube::Error> {
    'read: loop {
        let read = sharding.scope.fill_reading();
        let mut params = kube::api::ListParams::default().limit(FILL_PAGE);
        loop {
            let page = api.list(&params).await?;
            if !sharding.scope.fill_page(ns, read, &page.items) {
                debug!(namespace = %ns, "the watch listed again meanwhile; listing the namespace again");
                continue 'read;
            }
            match page.metadata.continue_ {
                Some(next) if !next.is_empty() => params = params.continue_token(&next),
                _ => return Ok(()),
            }
        }
    }
}
