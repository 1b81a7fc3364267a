//! What the proxy sees: the operator's slices (cluster-wide, by their `managed-by` label) give
//! the routes; for each Service routed to, a watch of that Service's own slices gives where
//! its workload answers. Only EndpointSlices are read.
//!
//! A route outlives its slice by `RETIRED_FOR`: the operator removes the slice once the
//! workload's own endpoints are ready, but connections it held still wait for the proxy's
//! own view of those endpoints, and kube-proxy on other nodes keeps sending new ones here
//! for a moment; both are relayed, not dropped. Past that the Service is no longer watched.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::routes::{self, Route, ServiceKey};
use crate::workload::intercept::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};

/// How long a route is kept once its slice is gone: the longest hold, and kube-proxy's lag.
const RETIRED_FOR: Duration = Duration::from_secs(90);
/// How often retired routes past that are let go of.
const SWEEP: Duration = Duration::from_secs(10);

/// What the proxy knows now; connections read it, the watches write it.
pub struct Seen {
    routes: RwLock<Arc<BTreeMap<u16, Route>>>,
    /// Routes whose slice went, and when.
    retired: RwLock<HashMap<u16, (Route, Instant)>>,
    own: RwLock<HashMap<ServiceKey, Arc<Vec<EndpointSlice>>>>,
    /// The `managed-by` values of the slices taken as a Service's own.
    trusted: Vec<String>,
    /// Bumped at every change: held connections look again.
    changed: watch::Sender<u64>,
    /// The operator's slices have been listed once.
    synced: std::sync::atomic::AtomicBool,
    /// The addresses the operator's slices name (proxy pods).
    named: RwLock<BTreeSet<String>>,
}

impl Seen {
    /// `trusted`: the managers whose slices are a Service's own (the EndpointSlice
    /// controller's, `endpointslice-controller.k8s.io`, for every Service with a selector).
    pub fn new(trusted: Vec<String>) -> Seen {
        Seen {
            routes: RwLock::default(),
            retired: RwLock::default(),
            own: RwLock::default(),
            trusted,
            changed: watch::channel(0).0,
            synced: std::sync::atomic::AtomicBool::new(false),
            named: RwLock::default(),
        }
    }

    /// Whether a slice of the operator's still names `address` (a stopping proxy pod waits
    /// until none does: kube-proxy may send it connections until then).
    pub fn names_address(&self, address: &str) -> bool {
        self.named.read().is_ok_and(|n| n.contains(address))
    }

    pub fn route(&self, port: u16) -> Option<Route> {
        if let Some(r) = self.routes.read().ok()?.get(&port) {
            return Some(r.clone());
        }
        let retired = self.retired.read().ok()?;
        let (route, at) = retired.get(&port)?;
        (at.elapsed() < RETIRED_FOR).then(|| route.clone())
    }

    /// Where `service` answers on `port_name` now (empty: asleep, waking, or not yet seen).
    pub fn targets(&self, service: &ServiceKey, port_name: &str) -> Vec<std::net::SocketAddr> {
        let own = self.own.read().ok().and_then(|o| o.get(service).cloned());
        own.map(|own| routes::targets(&own, &service.namespace, port_name, &self.trusted))
            .unwrap_or_default()
    }

    /// Waits until the routes have been read once.
    pub async fn synced(&self) {
        let mut changes = self.changes();
        while !self.synced.load(std::sync::atomic::Ordering::SeqCst) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The routes now; those gone are kept as retired.
    fn set_routes(&self, routes: BTreeMap<u16, Route>) {
        if let (Ok(mut live), Ok(mut retired)) = (self.routes.write(), self.retired.write()) {
            for (port, route) in live.iter() {
                if routes.get(port).is_none_or(|r| r.service != route.service) {
                    retired.insert(*port, (route.clone(), Instant::now()));
                }
            }
            for port in routes.keys() {
                retired.remove(port);
            }
            *live = Arc::new(routes);
        }
        self.bump();
    }

    /// Lets go of retired routes past `RETIRED_FOR`; the Services still routed to, live or
    /// retired.
    fn sweep(&self) -> BTreeSet<ServiceKey> {
        let mut services = BTreeSet::new();
        if let Ok(mut retired) = self.retired.write() {
            retired.retain(|_, (_, at)| at.elapsed() < RETIRED_FOR);
            services.extend(retired.values().map(|(r, _)| r.service.clone()));
        }
        if let Ok(live) = self.routes.read() {
            services.extend(live.values().map(|r| r.service.clone()));
        }
        services
    }

    fn set_own(&self, service: &ServiceKey, slices: Option<Vec<EndpointSlice>>) {
        if let Ok(mut own) = self.own.write() {
            match slices {
                Some(s) => own.insert(service.clone(), Arc::new(s)),
                None => own.remove(service),
            };
        }
        self.bump();
    }
}

/// Runs the watches until the task is dropped: the operator's slices in `namespace`, or in
/// every namespace.
pub async fn follow(client: Client, seen: Arc<Seen>, namespace: Option<String>) {
    let api: Api<EndpointSlice> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let mut followed: HashMap<ServiceKey, JoinHandle<()>> = HashMap::new();
    let mut slices: BTreeMap<(String, String), EndpointSlice> = BTreeMap::new();
    let mut initial: Option<BTreeMap<(String, String), EndpointSlice>> = None;
    // Whether a whole list has been read: only then are the routes worth saying ready for
    // (the sweep's first tick comes before any list).
    let mut listed = false;
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut sweep = tokio::time::interval(SWEEP);
    loop {
        let event = tokio::select! {
            e = events.try_next() => match e {
                Ok(Some(e)) => Some(e),
                Ok(None) => return,
                Err(e) => {
                    warn!(error = %e, "watching the operator's EndpointSlices; retrying");
                    continue;
                }
            },
            _ = sweep.tick() => None,
        };
        let changed = event.is_some();
        match event {
            None => {}
            Some(watcher::Event::Init) => initial = Some(BTreeMap::new()),
            Some(watcher::Event::InitApply(s)) => {
                if let Some(i) = initial.as_mut() {
                    i.insert(key_of(&s), s);
                }
                continue;
            }
            Some(watcher::Event::InitDone) => {
                slices = initial.take().unwrap_or_default();
                listed = true;
            }
            Some(watcher::Event::Apply(s)) => {
                slices.insert(key_of(&s), s);
            }
            Some(watcher::Event::Delete(s)) => {
                slices.remove(&key_of(&s));
            }
        }
        // Mid-relist the old view holds until the new one is whole.
        if changed && initial.is_none() {
            let all: Vec<EndpointSlice> = slices.values().cloned().collect();
            if let Ok(mut named) = seen.named.write() {
                *named = (all.iter())
                    .flat_map(|s| &s.endpoints)
                    .flat_map(|e| e.addresses.iter().cloned())
                    .collect();
            }
            let (routes, contested) = routes::routes(&all);
            for c in &contested {
                warn!(port = c.port, services = ?c.services, "a proxy port the slices of two Services name: the older keeps it");
            }
            seen.set_routes(routes);
        }
        // Follow every Service routed to (live or retired), and no other.
        let wanted = seen.sweep();
        followed.retain(|k, task| {
            let keep = wanted.contains(k);
            if !keep {
                task.abort();
                seen.set_own(k, None);
            }
            keep
        });
        for key in wanted {
            if let std::collections::hash_map::Entry::Vacant(e) = followed.entry(key) {
                let key = e.key().clone();
                info!(namespace = %key.namespace, service = %key.name, "following a Service's endpoints");
                e.insert(tokio::spawn(follow_service(
                    client.clone(),
                    key,
                    seen.clone(),
                )));
            }
        }
        // Said once the first list is whole (not at the sweep's first tick, before it), with a
        // change of its own: `synced` waits on the changes, and with nothing to route the
        // list itself may change nothing.
        if listed && !seen.synced.swap(true, std::sync::atomic::Ordering::SeqCst) {
            seen.bump();
        }
    }
}

/// Keeps `seen`'s copy of one Service's slices (its own and the operator's: `targets` tells
/// them apart) up to date.
async fn follow_service(client: Client, service: ServiceKey, seen: Arc<Seen>) {
    let api: Api<EndpointSlice> = Api::namespaced(client, &service.namespace);
    let config =
        watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={}", service.name));
    let mut slices: BTreeMap<String, EndpointSlice> = BTreeMap::new();
    let mut initial: Option<BTreeMap<String, EndpointSlice>> = None;
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => initial = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(s)) => {
                if let Some(i) = initial.as_mut() {
                    i.insert(s.name_any(), s);
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => slices = initial.take().unwrap_or_default(),
            Ok(watcher::Event::Apply(s)) => {
                slices.insert(s.name_any(), s);
            }
            Ok(watcher::Event::Delete(s)) => {
                slices.remove(&s.name_any());
            }
            Err(e) => {
                warn!(namespace = %service.namespace, service = %service.name, error = %e,
                      "watching a Service's endpoints; retrying");
                continue;
            }
        }
        seen.set_own(&service, Some(slices.values().cloned().collect()));
    }
}

fn key_of(s: &EndpointSlice) -> (String, String) {
    (s.namespace().unwrap_or_default(), s.name_any())
}
