//! What the proxy sees: the operator's slices (cluster-wide, by their `managed-by` label) give
//! the routes; for each Service routed to, a watch of that Service's own slices gives where
//! its workload answers. Only EndpointSlices are read; a Service no longer routed to is no
//! longer watched.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::routes::{self, Route, ServiceKey};
use crate::workload::intercept::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};

/// What the proxy knows now; connections read it, the watches write it.
pub struct Seen {
    routes: RwLock<Arc<BTreeMap<u16, Route>>>,
    own: RwLock<HashMap<ServiceKey, Arc<Vec<EndpointSlice>>>>,
    /// Bumped at every change: held connections look again.
    changed: watch::Sender<u64>,
    /// The operator's slices have been listed once.
    synced: std::sync::atomic::AtomicBool,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            routes: RwLock::default(),
            own: RwLock::default(),
            changed: watch::channel(0).0,
            synced: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Seen {
    pub fn route(&self, port: u16) -> Option<Route> {
        self.routes.read().ok()?.get(&port).cloned()
    }

    /// Where `service` answers on `port_name` now (empty: asleep, waking, or not yet seen).
    pub fn targets(&self, service: &ServiceKey, port_name: &str) -> Vec<std::net::SocketAddr> {
        let own = self.own.read().ok().and_then(|o| o.get(service).cloned());
        own.map(|own| routes::targets(&own, port_name))
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

    fn set_routes(&self, routes: BTreeMap<u16, Route>) {
        if let Ok(mut r) = self.routes.write() {
            *r = Arc::new(routes);
        }
        self.bump();
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

/// Runs the watches until the task is dropped.
pub async fn follow(client: Client, seen: Arc<Seen>) {
    let api: Api<EndpointSlice> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let mut followed: HashMap<ServiceKey, JoinHandle<()>> = HashMap::new();
    let mut slices: BTreeMap<(String, String), EndpointSlice> = BTreeMap::new();
    let mut initial: Option<BTreeMap<(String, String), EndpointSlice>> = None;
    let mut events = watcher(api, config).default_backoff().boxed();
    loop {
        let event = match events.try_next().await {
            Ok(Some(e)) => e,
            Ok(None) => return,
            Err(e) => {
                warn!(error = %e, "watching the operator's EndpointSlices; retrying");
                continue;
            }
        };
        match event {
            watcher::Event::Init => initial = Some(BTreeMap::new()),
            watcher::Event::InitApply(s) => {
                if let Some(i) = initial.as_mut() {
                    i.insert(key_of(&s), s);
                }
                continue;
            }
            watcher::Event::InitDone => slices = initial.take().unwrap_or_default(),
            watcher::Event::Apply(s) => {
                slices.insert(key_of(&s), s);
            }
            watcher::Event::Delete(s) => {
                slices.remove(&key_of(&s));
            }
        }
        let all: Vec<EndpointSlice> = slices.values().cloned().collect();
        let (routes, contested) = routes::routes(&all);
        for c in &contested {
            warn!(port = c.port, services = ?c.services, "a proxy port two Services' slices name: routed nowhere until one goes");
        }
        // Follow every Service routed to, and no other.
        let wanted: std::collections::BTreeSet<ServiceKey> =
            routes.values().map(|r| r.service.clone()).collect();
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
        if initial.is_none() {
            seen.synced.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        seen.set_routes(routes);
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
