//! What the proxy sees: the operator's slices (cluster-wide, by their `managed-by` label) give
//! the routes; for each Service routed to, a watch of that Service's own slices gives where
//! its workload answers. Only EndpointSlices are read.
//!
//! A slice the operator takes out of the path stays 90 s emptied before it goes (its ports
//! not handed out meanwhile), and the proxy routes it all that time: connections it held
//! still wait for the proxy's own view of the workload's endpoints, and kube-proxy on other
//! nodes keeps sending new ones here for a moment; both are relayed, not dropped. A route
//! also outlives its slice by `RETIRED_FOR`, for slices deleted at once (their TDSet deleted,
//! the garbage collector removing them); a new route on its port replaces it.

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

use super::metrics::ProxyMetrics;
use super::routes::{self, Answering, Kept, MAX_OWN_SLICES, Route, ServiceKey};
use crate::workload::intercept::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};

/// How long a route is kept once its slice is gone: the longest hold, and kube-proxy's lag.
const RETIRED_FOR: Duration = Duration::from_secs(90);
/// How often retired routes past that are let go of.
const SWEEP: Duration = Duration::from_secs(10);
/// How many of a Service's own slices one page of a list holds: each is decoded whole.
const OWN_PAGE: u32 = 8;

/// What the proxy knows now; connections read it, the watches write it.
pub struct Seen {
    routes: RwLock<Arc<BTreeMap<u16, Route>>>,
    /// Routes whose slice went, and when.
    retired: RwLock<HashMap<u16, (Route, Instant)>>,
    /// Of each Service followed, where its own slices (by name) say it answers.
    own: RwLock<HashMap<ServiceKey, BTreeMap<String, Answering>>>,
    /// The `managed-by` values of the slices taken as a Service's own.
    trusted: Vec<String>,
    metrics: Arc<ProxyMetrics>,
    /// Bumped at every change of the routes: a connection waiting for its port's route
    /// looks again.
    changed: watch::Sender<u64>,
    /// Bumped at every change of one Service's own slices: the connections held for it look
    /// again (and no others: a slice event anywhere does not wake every held connection).
    own_changed: RwLock<HashMap<ServiceKey, watch::Sender<u64>>>,
    /// The operator's slices have been listed once.
    synced: std::sync::atomic::AtomicBool,
    /// The addresses the operator's slices name (proxy pods).
    named: RwLock<BTreeSet<String>>,
}

impl Seen {
    /// `trusted`: the managers whose slices are a Service's own (the EndpointSlice
    /// controller's, `endpointslice-controller.k8s.io`, for every Service with a selector).
    pub fn new(trusted: Vec<String>, metrics: Arc<ProxyMetrics>) -> Seen {
        Seen {
            routes: RwLock::default(),
            retired: RwLock::default(),
            own: RwLock::default(),
            trusted,
            metrics,
            changed: watch::channel(0).0,
            own_changed: RwLock::default(),
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
        let Ok(own) = self.own.read() else {
            return Vec::new();
        };
        (own.get(service))
            .map(|own| routes::targets(own.values(), port_name))
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

    /// Changes of where `service` answers (see `targets`).
    pub fn service_changes(&self, service: &ServiceKey) -> watch::Receiver<u64> {
        // (A writer that panicked holding the lock left the map whole: it is used as it is.)
        let mut senders = self.own_changed.write().unwrap_or_else(|e| e.into_inner());
        (senders.entry(service.clone()))
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn bump_service(&self, service: &ServiceKey) {
        let senders = self.own_changed.read().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = senders.get(service) {
            sender.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    /// The routes now (live, not retired).
    fn live_routes(&self) -> Arc<BTreeMap<u16, Route>> {
        self.routes.read().map(|r| r.clone()).unwrap_or_default()
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
        if let Ok(mut senders) = self.own_changed.write() {
            // Nobody waits on them any more.
            senders.retain(|_, s| s.receiver_count() > 0);
        }
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

    /// All of a Service's own slices (a whole list), or none: no longer followed.
    fn set_own(&self, service: &ServiceKey, slices: Option<BTreeMap<String, Answering>>) {
        if let Ok(mut own) = self.own.write() {
            match slices {
                Some(s) => own.insert(service.clone(), s),
                None => own.remove(service),
            };
            self.count_own(&own);
        }
        self.bump_service(service);
    }

    /// One of a Service's own slices changed (None: gone); whether it is kept.
    fn own_slice(&self, service: &ServiceKey, name: String, slice: Option<Answering>) -> Kept {
        let kept = match self.own.write() {
            Ok(mut own) => {
                let kept = routes::keep(own.entry(service.clone()).or_default(), name, slice);
                self.count_own(&own);
                kept
            }
            Err(_) => return Kept::Gone,
        };
        self.bump_service(service);
        kept
    }

    fn count_own(&self, own: &HashMap<ServiceKey, BTreeMap<String, Answering>>) {
        let n: usize = own.values().map(BTreeMap::len).sum();
        self.metrics.own_slices.set(n as i64);
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
            if let Ok(mut named) = seen.named.write() {
                *named = (slices.values())
                    .flat_map(|s| &s.endpoints)
                    .flat_map(|e| e.addresses.iter().cloned())
                    .collect();
            }
            let (routes, contested) = routes::routes(slices.values(), &seen.live_routes());
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

/// Keeps `seen`'s view of where one Service answers up to date. Only the slices of the
/// trusted managers are asked for: the API server selects them, so no slice another writer
/// piles on the Service is ever sent here, and of those, only what `Answering` keeps is kept,
/// at most `MAX_OWN_SLICES` of them.
async fn follow_service(client: Client, service: ServiceKey, seen: Arc<Seen>) {
    let Some(selector) = own_selector(&service.name, &seen.trusted) else {
        warn!(namespace = %service.namespace, service = %service.name,
              "no manager trusted for a Service's own EndpointSlices: held connections are never relayed");
        return;
    };
    let api: Api<EndpointSlice> = Api::namespaced(client, &service.namespace);
    let config = watcher::Config::default()
        .labels(&selector)
        .page_size(OWN_PAGE);
    let answering = |s: &EndpointSlice| Answering::of(s, &service.namespace, &seen.trusted);
    let mut initial: Option<BTreeMap<String, Answering>> = None;
    let mut left_out = false;
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let kept = match event {
            Ok(watcher::Event::Init) => {
                initial = Some(BTreeMap::new());
                continue;
            }
            Ok(watcher::Event::InitApply(s)) => match initial.as_mut() {
                Some(i) => routes::keep(i, s.name_any(), answering(&s)),
                None => continue,
            },
            Ok(watcher::Event::InitDone) => {
                seen.set_own(&service, Some(initial.take().unwrap_or_default()));
                continue;
            }
            Ok(watcher::Event::Apply(s)) => seen.own_slice(&service, s.name_any(), answering(&s)),
            Ok(watcher::Event::Delete(s)) => seen.own_slice(&service, s.name_any(), None),
            Err(e) => {
                warn!(namespace = %service.namespace, service = %service.name, error = %e,
                      "watching a Service's endpoints; retrying");
                continue;
            }
        };
        if kept == Kept::LeftOut {
            seen.metrics.own_slices_left_out.inc();
            if !std::mem::replace(&mut left_out, true) {
                warn!(namespace = %service.namespace, service = %service.name, cap = MAX_OWN_SLICES,
                      "more EndpointSlices for a Service than the proxy keeps; the rest are left out");
            }
        }
    }
}

/// The label selector of a Service's own slices: its name, and a trusted manager. None: no
/// manager is trusted (or none is a label value the API server would take).
fn own_selector(service: &str, trusted: &[String]) -> Option<String> {
    let valid = |v: &String| {
        !v.is_empty()
            && v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let managers: Vec<&str> = (trusted.iter())
        .filter(|m| valid(m) && m.as_str() != MANAGED_BY)
        .map(String::as_str)
        .collect();
    (!managers.is_empty()).then(|| {
        format!(
            "{SERVICE_NAME_LABEL}={service},{MANAGED_BY_LABEL} in ({})",
            managers.join(",")
        )
    })
}

fn key_of(s: &EndpointSlice) -> (String, String) {
    (s.namespace().unwrap_or_default(), s.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ServiceKey {
        ServiceKey {
            namespace: "a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_held_connection_is_woken_by_its_own_services_slices_and_no_others() {
        let metrics = Arc::new(ProxyMetrics::register(&prometheus::Registry::new()).unwrap());
        let seen = Seen::new(vec!["endpointslice-controller.k8s.io".into()], metrics);
        let mut web = seen.service_changes(&key("web"));
        // Another Service's slices change, again and again: web's waiters sleep on.
        for i in 0..3 {
            seen.own_slice(&key("api"), format!("api-{i}"), Some(Answering::default()));
        }
        seen.set_own(&key("api"), None);
        assert!(!web.has_changed().unwrap());
        // Its own do.
        seen.own_slice(&key("web"), "web-1".into(), Some(Answering::default()));
        assert!(web.has_changed().unwrap());
        web.mark_unchanged();
        seen.set_own(&key("web"), None);
        assert!(web.has_changed().unwrap());
        // Once nobody waits, its sender goes with the next sweep.
        drop(web);
        seen.sweep();
        assert!(seen.own_changed.read().unwrap().is_empty());
    }
}
