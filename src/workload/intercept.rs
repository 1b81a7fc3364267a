//! Woken by a request, the data plane as pure functions: which ports of a Service the wake
//! proxy intercepts (or why the Service cannot be intercepted), the proxy port each gets, the
//! operator's own EndpointSlices for the Service (the proxy's ready pods, one slice per
//! address family), and whether they must be in place. Nothing of the user's is written: the
//! Service's own slices stay as they are; kube-proxy and every gateway that reads slices see
//! one more set of endpoints.
//!
//! Make before break: the slices are wanted whenever what is written is 0, so the reconcile
//! applies them before the write that takes the count to 0; waking, they stay until the
//! workload's own endpoints are ready, then leave the path (retired: emptied, and deleted
//! later, `retire`), and nothing is in the path while awake.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use crate::api::{ServicePort, WakeIgnore};

mod mesh;
mod retire;
pub use mesh::{Marks, Mesh, MeshSeen, PeerAuthentication, black_hole, sidecar_injected};
pub use retire::{Leaving, RETIRED_ANNOTATION, leave, ports_left, retire_for, retired_at};

/// `endpointslice.kubernetes.io/managed-by` on the operator's slices: the EndpointSlice
/// controller leaves slices managed by another alone.
pub const MANAGED_BY: &str = "tdset.schedule.rs";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The TDSet a slice is for (the proxy reports requests to it).
pub const TDSET_LABEL: &str = "schedule.rs/tdset";

/// Why a Service cannot be woken through: reported as Degraded with a Warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `clusterIP: None`: clients resolve the pods themselves; there is no address to stand in.
    Headless,
    /// No selector: its endpoints are the user's own, kept by hand.
    NoSelector,
    ExternalName,
    /// `sessionAffinity: ClientIP` would pin clients to the proxy after it left.
    ClientIpAffinity,
    /// None of the named ports is a TCP port of the Service.
    NoPort(String),
    /// Its selector picks none of the TDSet's workloads' pods.
    SelectsNone,
    /// No such Service in the TDSet's namespace.
    NotFound,
    /// Every port of the proxy's range is taken; the namespace holding the most, and how many.
    RangeFull(Option<(String, usize)>),
    /// The namespace's Services already hold its share of the range.
    NamespaceShare {
        holds: usize,
        share: usize,
    },
    /// A mesh would black-hole it asleep (`mesh`).
    Mesh(Mesh),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Headless => f.write_str(
                "is headless (clusterIP: None): its clients find the pods by DNS, so there is no \
                 address the wake proxy can answer on",
            ),
            Refusal::NoSelector => f.write_str(
                "has no selector: its endpoints are kept by hand, and the operator adds none",
            ),
            Refusal::ExternalName => f.write_str("is an ExternalName Service: it has no endpoints"),
            Refusal::ClientIpAffinity => f.write_str(
                "has sessionAffinity: ClientIP, which would keep sending a client to the wake \
                 proxy after the workload woke",
            ),
            Refusal::NoPort(which) => write!(f, "has no TCP port {which}"),
            Refusal::SelectsNone => {
                f.write_str("selects none of the pods of the TDSet's workloads")
            }
            Refusal::NotFound => f.write_str("does not exist"),
            Refusal::RangeFull(busiest) => {
                f.write_str(
                    "cannot be given a proxy port: every port of the wake proxy's range is taken",
                )?;
                if let Some((ns, n)) = busiest {
                    write!(f, " (namespace {ns} holds {n}, the most)")?;
                }
                f.write_str(" (widen --wake-proxy-ports on the operator and the proxy)")
            }
            Refusal::NamespaceShare { holds, share } => write!(
                f,
                "cannot be given a proxy port: this namespace's Services hold {holds} of the \
                 wake proxy's ports, and a namespace may hold {share} \
                 (--wake-proxy-ports-per-namespace, the chart's wakeOnRequest.portsPerNamespace)"
            ),
            Refusal::Mesh(mesh) => mesh.fmt(f),
        }
    }
}

/// A port of the Service the proxy stands in for: its name (as the slices must name it) and
/// number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Intercepted {
    pub name: Option<String>,
    pub port: i32,
}

/// The ports of `service` the proxy intercepts: those `wanted` names (every TCP port when it
/// names none), or why it cannot. `workload_labels`: the pod template labels of the TDSet's
/// workloads, which the Service's selector must pick one of.
pub fn intercepted(
    service: &Service,
    wanted: &[ServicePort],
    workload_labels: Option<&[&BTreeMap<String, String>]>,
) -> Result<Vec<Intercepted>, Refusal> {
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(Refusal::ExternalName);
    }
    if spec.cluster_ip.as_deref() == Some("None") {
        return Err(Refusal::Headless);
    }
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() {
        return Err(Refusal::NoSelector);
    }
    if spec.session_affinity.as_deref() == Some("ClientIP") {
        return Err(Refusal::ClientIpAffinity);
    }
    // Labels the workload's controller adds to each pod (a StatefulSet's per-pod Service
    // selects one) are not in its template: not held against it.
    let added = [
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
        "pod-template-hash",
        "controller-revision-hash",
    ];
    let picks = |labels: &&BTreeMap<String, String>| {
        (selector.iter())
            .filter(|(k, _)| !added.contains(&k.as_str()))
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    if workload_labels.is_some_and(|labels| !labels.iter().any(picks)) {
        return Err(Refusal::SelectsNone);
    }
    let tcp: Vec<Intercepted> = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .map(|p| Intercepted {
            name: p.name,
            port: p.port,
        })
        .collect();
    if wanted.is_empty() {
        return match tcp.is_empty() {
            true => Err(Refusal::NoPort("at all".into())),
            false => Ok(tcp),
        };
    }
    let mut out = Vec::new();
    for w in wanted {
        match tcp.iter().find(|p| w.matches(p.name.as_deref(), p.port)) {
            Some(p) => out.push(p.clone()),
            None => return Err(Refusal::NoPort(w.to_string())),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Which of two slices claims a proxy port first: the wake proxy routes a port that two
/// Services' slices name to the first (the older, then by namespace and name), and the
/// operator moves the other off it.
pub fn claim_cmp(a: &EndpointSlice, b: &EndpointSlice) -> std::cmp::Ordering {
    fn key(s: &EndpointSlice) -> (Option<&Time>, Option<&String>, Option<&String>) {
        let m = &s.metadata;
        (
            m.creation_timestamp.as_ref(),
            m.namespace.as_ref(),
            m.name.as_ref(),
        )
    }
    key(a).cmp(&key(b))
}

/// The proxy ports that `mine` (one Service's slices) name and a slice of another Service
/// claims first (`claim_cmp`): the proxy sends their connections to that other Service, so
/// `mine` must move off them. Two operators (shards whose port ranges overlap) that gave out a
/// port at the same moment leave such a pair; the younger slice moves.
pub fn contested<'a>(
    mine: &[EndpointSlice],
    all: impl Iterator<Item = &'a EndpointSlice>,
) -> BTreeSet<u16> {
    let service = |s: &EndpointSlice| {
        let label = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL));
        (s.metadata.namespace.clone(), label.cloned())
    };
    let ports = |s: &EndpointSlice| -> BTreeSet<u16> {
        (s.ports.iter().flatten())
            .filter_map(|p| u16::try_from(p.port?).ok())
            .collect()
    };
    let Some(first) = mine.first() else {
        return BTreeSet::new();
    };
    let ours = service(first);
    let held: Vec<(&EndpointSlice, BTreeSet<u16>)> = mine.iter().map(|m| (m, ports(m))).collect();
    let mut out = BTreeSet::new();
    // Only slices the proxy routes by (`wake::routes`): labelled, owned by their TDSet.
    let routed = |s: &EndpointSlice| {
        let labels = s.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty());
        let owned = |tdset: &String| {
            (s.metadata.owner_references.iter().flatten())
                .any(|o| o.kind == "TDSet" && o.name == *tdset && o.controller == Some(true))
        };
        label(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
            && label(SERVICE_NAME_LABEL).is_some()
            && s.metadata.namespace.is_some()
            && label(TDSET_LABEL).is_some_and(owned)
    };
    for other in all.filter(|o| routed(o) && service(o) != ours) {
        for p in ports(other) {
            let lost = held
                .iter()
                .any(|(m, ps)| ps.contains(&p) && claim_cmp(other, m) == std::cmp::Ordering::Less);
            if lost {
                out.insert(p);
            }
        }
    }
    out
}

/// The proxy port for `key` (`namespace/service/port`) in `range`, avoiding `used`: where its
/// hash lands, or the next free one after it, so a port keeps its number across restarts
/// while it is free. `None`: the range is full.
pub fn allocate(key: &str, range: (u16, u16), used: &BTreeSet<u16>) -> Option<u16> {
    let (lo, hi) = range;
    if hi < lo {
        return None;
    }
    let size = u32::from(hi - lo) + 1;
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    key.hash(&mut h);
    let start = (h.0 % u64::from(size)) as u32;
    (0..size)
        .map(|i| lo + ((start + i) % size) as u16)
        .find(|p| !used.contains(p))
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Whether an endpoint of a slice takes connections: ready (a missing `ready` means ready,
/// the API's own reading) and not terminating. The one reading of it for the operator and
/// the proxy.
pub fn serves(endpoint: &Endpoint) -> bool {
    let c = endpoint.conditions.as_ref();
    c.and_then(|c| c.ready) != Some(false) && c.and_then(|c| c.terminating) != Some(true)
}

/// A wake proxy pod's address, as its own Service's slices show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProxyAddress {
    pub ip: String,
    pub ready: bool,
    /// The node the pod runs on: written on the operator's endpoints, so kube-proxy counts
    /// them local there (a Service with a `Local` traffic policy reaches the proxy on the
    /// nodes that run one, instead of dropping every request while asleep).
    pub node: Option<String>,
    pub zone: Option<String>,
}

/// Whether the operator's slices for a Service must be in place: while what is written is 0
/// (they go in before the write that takes the count there), and, once they are, until the
/// workload's own endpoints are ready again.
pub fn wanted(written: i32, present: bool, own_ready: bool) -> bool {
    written == 0 || (present && !own_ready)
}

/// What one slice is for.
pub struct SliceFor<'a> {
    pub tdset: &'a str,
    pub tdset_uid: &'a str,
    pub service: &'a Service,
    /// Each intercepted port with the proxy port it was given.
    pub ports: &'a [(Intercepted, u16)],
    pub config: &'a ProxyConfig,
}

/// What the wake proxy needs of a TDSet beyond where to send a connection, carried on the
/// operator's slices (the only objects the proxy reads) as annotations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProxyConfig {
    /// `wakeOnRequest.hold`, in seconds.
    pub hold_secs: u64,
    /// `wakeOnRequest.ignore`, as the spec gives it (the proxy compiles it).
    pub ignore: Option<WakeIgnore>,
    /// The measured times to Ready (`status.warmUp.samples`), for `Retry-After`.
    pub samples: Vec<i32>,
}

pub const HOLD_ANNOTATION: &str = "schedule.rs/wake-hold-seconds";
pub const IGNORE_ANNOTATION: &str = "schedule.rs/wake-ignore";
pub const READY_ANNOTATION: &str = "schedule.rs/wake-ready-seconds";
/// The hold the proxy takes when a slice carries none it can read (the API's default).
pub const DEFAULT_HOLD_SECS: u64 = 10;

impl ProxyConfig {
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::from([(HOLD_ANNOTATION.to_string(), self.hold_secs.to_string())]);
        if let Some(ignore) = &self.ignore {
            // A struct of strings: serialising it cannot fail.
            out.insert(
                IGNORE_ANNOTATION.to_string(),
                serde_json::to_string(ignore).unwrap_or_default(),
            );
        }
        if !self.samples.is_empty() {
            let samples: Vec<String> = self.samples.iter().map(i32::to_string).collect();
            out.insert(READY_ANNOTATION.to_string(), samples.join(","));
        }
        out
    }

    /// Read back from a slice's annotations: what cannot be read is left at its default
    /// (hold 10 s, nothing ignored, no samples), never an error that stops the proxy.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> ProxyConfig {
        let get = |k: &str| annotations.and_then(|a| a.get(k));
        ProxyConfig {
            hold_secs: get(HOLD_ANNOTATION)
                .and_then(|h| h.parse().ok())
                .filter(|h| (1..=60).contains(h))
                .unwrap_or(DEFAULT_HOLD_SECS),
            ignore: get(IGNORE_ANNOTATION).and_then(|i| serde_json::from_str(i).ok()),
            samples: get(READY_ANNOTATION)
                .map(|s| {
                    s.split(',')
                        .filter_map(|v| v.trim().parse().ok())
                        .take(64)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The operator's slices for a Service: one per address family it has, each holding the
/// ready proxy pods of that family, `ready: true` set explicitly, each port named as the
/// Service names it (kube-proxy pairs them by name) with the proxy's port. Owned by the
/// TDSet, so they go with it.
pub fn slices(of: &SliceFor<'_>, proxies: &[ProxyAddress]) -> Vec<EndpointSlice> {
    let svc = of.service.metadata.name.clone().unwrap_or_default();
    let spec = of.service.spec.clone().unwrap_or_default();
    let families = spec
        .ip_families
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| vec!["IPv4".to_string()]);
    let mut ready: Vec<&ProxyAddress> = proxies.iter().filter(|p| p.ready).collect();
    ready.sort();
    ready.dedup();
    families
        .iter()
        .map(|family| {
            let v6 = family == "IPv6";
            let addresses: Vec<&ProxyAddress> = ready
                .iter()
                .filter(|p| p.ip.contains(':') == v6)
                .copied()
                .collect();
            EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name(&svc, family)),
                    namespace: of.service.metadata.namespace.clone(),
                    labels: Some(BTreeMap::from([
                        (SERVICE_NAME_LABEL.to_string(), svc.clone()),
                        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                        (TDSET_LABEL.to_string(), of.tdset.to_string()),
                    ])),
                    annotations: Some(of.config.annotations()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "schedule.rs/v1".into(),
                        kind: "TDSet".into(),
                        name: of.tdset.to_string(),
                        uid: of.tdset_uid.to_string(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    }]),
                    ..Default::default()
                },
                address_type: family.clone(),
                endpoints: addresses
                    .into_iter()
                    .map(|p| Endpoint {
                        addresses: vec![p.ip.clone()],
                        conditions: Some(EndpointConditions {
                            ready: Some(true),
                            serving: Some(true),
                            terminating: Some(false),
                        }),
                        node_name: p.node.clone(),
                        zone: p.zone.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ports: Some(
                    of.ports
                        .iter()
                        .map(|(p, proxy)| EndpointPort {
                            // "" for an unnamed port, as the API server stores it.
                            name: Some(p.name.clone().unwrap_or_default()),
                            port: Some(i32::from(*proxy)),
                            protocol: Some("TCP".into()),
                            // As the Service says it (a gateway picks h2c by it; the proxy
                            // tells by it whether a silent client is one of that protocol).
                            app_protocol: (spec.ports.iter().flatten())
                                .find(|sp| sp.name == p.name && sp.port == p.port)
                                .and_then(|sp| sp.app_protocol.clone()),
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// `<service>-tdset-wake-ipv4`: one name per Service and family, so an apply replaces it.
pub fn slice_name(service: &str, family: &str) -> String {
    format!("{service}-tdset-wake-{}", family.to_ascii_lowercase())
}

/// One Service of `wakeOnRequest`, as the reconcile found it.
pub struct ServiceSeen<'a> {
    pub name: &'a str,
    /// `None`: it does not exist.
    pub service: Option<&'a Service>,
    pub ports: &'a [ServicePort],
    /// The operator's slices for it now.
    pub present: &'a [EndpointSlice],
    /// Whether its own endpoints (not the proxy's) have one ready.
    pub own_ready: bool,
    /// Proxy ports its slices name that another Service's slice claims first (`contested`).
    pub contested: &'a BTreeSet<u16>,
    /// Proxy ports the namespace's other Services hold.
    pub namespace_holds: usize,
    /// The namespace holding the most ports of the range, and how many (for a refusal).
    pub busiest: Option<(String, usize)>,
}

/// What the reconcile does about one Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServicePlan {
    /// Slices to apply: differing from what is present (nothing when they are the same).
    pub apply: Vec<EndpointSlice>,
    /// Slices of the operator's to delete (by name): retired long enough.
    pub remove: Vec<String>,
    /// Retired slices kept: look again this soon.
    pub retiring: Option<std::time::Duration>,
    pub refused: Option<Refusal>,
    /// In the path and waiting for the workload's own endpoints: look again soon.
    pub waiting: bool,
    /// To be asleep with no proxy ready and no slice naming one: nothing could stand in for
    /// the Service, so the workload must not be put to sleep (nothing is written here).
    pub unguarded: bool,
}

/// Everything else the plan needs: the TDSet, the proxies, the ports taken elsewhere.
pub struct PlanFor<'a> {
    pub tdset: &'a str,
    pub tdset_uid: &'a str,
    pub namespace: &'a str,
    /// Whether the count the reconcile writes is 0.
    pub asleep: bool,
    /// The pod labels of the TDSet's workloads, when the form knows them without reading.
    pub workload_labels: Option<&'a [&'a BTreeMap<String, String>]>,
    pub proxies: &'a [ProxyAddress],
    pub config: &'a ProxyConfig,
    pub range: (u16, u16),
    /// The most ports the Services of one namespace may hold.
    pub per_namespace: usize,
    /// A mesh that would black-hole the TDSet's Services asleep (`black_hole`).
    pub mesh: Option<&'a Mesh>,
    pub now: chrono::DateTime<chrono::Utc>,
}

/// The slices one Service needs: in place while asleep (make before break) and until its own
/// endpoints are ready, with the proxy ports it had (a port keeps its number while it is in
/// use), else retired (`retire`). A Service that cannot be woken through is refused, and any
/// slice of the operator's for it retired. `used`: proxy ports taken by other Services' slices; a port
/// given here is added.
pub fn plan_service(
    of: &PlanFor<'_>,
    seen: &ServiceSeen<'_>,
    used: &mut BTreeSet<u16>,
) -> ServicePlan {
    let leave_all = |refused| ServicePlan {
        refused,
        ..leaving(seen.present.iter(), of.now)
    };
    // A retired slice is out of the path: the workload's endpoints going unready while awake
    // do not bring the proxy back.
    let in_path = seen.present.iter().any(|s| retired_at(s).is_none());
    if !wanted(if of.asleep { 0 } else { 1 }, in_path, seen.own_ready) {
        return leave_all(None);
    }
    let Some(service) = seen.service else {
        return leave_all(Some(Refusal::NotFound));
    };
    let ports = match intercepted(service, seen.ports, of.workload_labels) {
        Ok(p) => p,
        Err(r) => return leave_all(Some(r)),
    };
    if let Some(mesh) = of.mesh {
        return leave_all(Some(Refusal::Mesh(mesh.clone())));
    }
    let had: BTreeMap<String, u16> = (seen.present.iter())
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            Some((
                p.name.clone().unwrap_or_default(),
                u16::try_from(p.port?).ok()?,
            ))
        })
        .filter(|(_, p)| (of.range.0..=of.range.1).contains(p) && !seen.contested.contains(p))
        .collect();
    // The share is checked before a Service is first given ports, never against the ports
    // it holds: refused then, its slices would go while its workload sleeps.
    let holds = seen.namespace_holds + ports.len();
    if seen.present.is_empty() && holds > of.per_namespace {
        return leave_all(Some(Refusal::NamespaceShare {
            holds,
            share: of.per_namespace,
        }));
    }
    let mut given = Vec::new();
    for p in ports {
        let name = p.name.clone().unwrap_or_default();
        let port = match had.get(&name) {
            Some(port) => *port,
            None => {
                let key = format!("{}/{}/{name}", of.namespace, seen.name);
                match allocate(&key, of.range, used) {
                    Some(port) => port,
                    None => return leave_all(Some(Refusal::RangeFull(seen.busiest.clone()))),
                }
            }
        };
        used.insert(port);
        given.push((p, port));
    }
    let slices_for = SliceFor {
        tdset: of.tdset,
        tdset_uid: of.tdset_uid,
        service,
        ports: &given,
        config: of.config,
    };
    let desired = keeping_named(slices(&slices_for, of.proxies), seen.present);
    if of.asleep && desired.iter().all(|s| s.endpoints.is_empty()) {
        return ServicePlan {
            unguarded: true,
            ..ServicePlan::default()
        };
    }
    let names: BTreeSet<String> = desired
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    // A family the Service no longer has.
    let gone = (seen.present.iter())
        .filter(|p| !p.metadata.name.as_ref().is_some_and(|n| names.contains(n)));
    let mut plan = leaving(gone, of.now);
    // The slices in the path first (make before break).
    let entering = (desired.into_iter()).filter(|d| !seen.present.iter().any(|p| same(p, d)));
    plan.apply = entering.chain(plan.apply).collect();
    plan.waiting = !of.asleep;
    plan
}

/// The slices `slices` leaving the path: retired, kept, or removed (`retire`).
pub fn leaving<'a>(
    slices: impl Iterator<Item = &'a EndpointSlice>,
    now: chrono::DateTime<chrono::Utc>,
) -> ServicePlan {
    let mut plan = ServicePlan::default();
    for slice in slices {
        match leave(slice, now) {
            Leaving::Retire(r) => plan.apply.push(*r),
            Leaving::Remove(name) => plan.remove.push(name),
            Leaving::Wait(left) => {
                plan.retiring = Some(plan.retiring.map_or(left, |r| r.min(left)));
            }
        }
    }
    plan
}

/// With no proxy ready (an outage, a restart) a slice keeps the proxies it names rather than
/// naming none: emptied, the Service would have no endpoint at all.
fn keeping_named(desired: Vec<EndpointSlice>, present: &[EndpointSlice]) -> Vec<EndpointSlice> {
    (desired.into_iter())
        .map(|mut d| {
            let had = present.iter().find(|p| p.metadata.name == d.metadata.name);
            if let Some(had) = had.filter(|_| d.endpoints.is_empty()) {
                d.endpoints = had.endpoints.clone();
            }
            d
        })
        .collect()
}

/// Whether `present` already is what `desired` asks for (the fields the operator sets).
fn same(present: &EndpointSlice, desired: &EndpointSlice) -> bool {
    let labels_hold = |want: &Option<BTreeMap<String, String>>,
                       have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    present.metadata.name == desired.metadata.name
        && present.metadata.owner_references == desired.metadata.owner_references
        && present.address_type == desired.address_type
        && present.endpoints == desired.endpoints
        && present.ports == desired.ports
        && labels_hold(&desired.metadata.labels, &present.metadata.labels)
        && OWN_ANNOTATIONS.iter().all(|k| {
            let of = |s: &EndpointSlice| s.metadata.annotations.as_ref()?.get(*k).cloned();
            of(present) == of(desired)
        })
}

/// The annotations the operator writes on its slices, each present or not as the TDSet says
/// (an `ignore` taken out of the spec must leave the slice too).
const OWN_ANNOTATIONS: [&str; 4] = [
    HOLD_ANNOTATION,
    IGNORE_ANNOTATION,
    READY_ANNOTATION,
    RETIRED_ANNOTATION,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": spec,
        }))
        .unwrap()
    }

    /// No port contested.
    static UNCONTESTED: BTreeSet<u16> = BTreeSet::new();

    /// Service `web` as the stage sees it: every port intercepted, the operator's slices
    /// `present`, none contested, nothing else held in the namespace.
    fn seen_web<'a>(
        web: &'a Service,
        present: &'a [EndpointSlice],
        own_ready: bool,
    ) -> ServiceSeen<'a> {
        ServiceSeen {
            name: "web",
            service: Some(web),
            ports: &[],
            present,
            own_ready,
            contested: &UNCONTESTED,
            namespace_holds: 0,
            busiest: None,
        }
    }

    /// TDSet `t` in `ns`, asleep, over `proxies`: range 20000-20009, a share of 64.
    fn plan_for<'a>(proxies: &'a [ProxyAddress], config: &'a ProxyConfig) -> PlanFor<'a> {
        PlanFor {
            tdset: "t",
            tdset_uid: "uid-t",
            namespace: "ns",
            asleep: true,
            workload_labels: None,
            proxies,
            config,
            range: (20000, 20009),
            per_namespace: 64,
            mesh: None,
            now: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn web() -> Service {
        service(serde_json::json!({
            "selector": {"app": "web"},
            "ipFamilies": ["IPv4", "IPv6"],
            "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9090},
                      {"name": "dns", "port": 53, "protocol": "UDP"}]
        }))
    }

    #[test]
    fn every_tcp_port_unless_some_are_named_and_a_named_port_must_exist() {
        let pods = labels(&[("app", "web"), ("tier", "front")]);
        let all = intercepted(&web(), &[], Some(&[&pods])).unwrap();
        assert_eq!(
            all.iter().map(|p| p.port).collect::<Vec<_>>(),
            [80, 9090],
            "UDP is not intercepted"
        );
        let http =
            intercepted(&web(), &[ServicePort::Name("http".into())], Some(&[&pods])).unwrap();
        assert_eq!(
            http,
            [Intercepted {
                name: Some("http".into()),
                port: 80
            }]
        );
        assert_eq!(
            intercepted(&web(), &[ServicePort::Number(53)], Some(&[&pods])),
            Err(Refusal::NoPort("53".into()))
        );
    }

    #[test]
    fn services_that_cannot_be_stood_in_for_are_refused_with_why() {
        let pods = labels(&[("app", "web")]);
        let refused = |spec| intercepted(&service(spec), &[], Some(&[&pods])).unwrap_err();
        assert_eq!(
            refused(serde_json::json!({"clusterIP": "None", "selector": {"app": "web"}})),
            Refusal::Headless
        );
        assert_eq!(
            refused(serde_json::json!({"ports": [{"port": 80}]})),
            Refusal::NoSelector
        );
        assert_eq!(
            refused(
                serde_json::json!({"selector": {"app": "web"}, "sessionAffinity": "ClientIP",
                                        "ports": [{"port": 80}]})
            ),
            Refusal::ClientIpAffinity
        );
        assert_eq!(
            refused(serde_json::json!({"selector": {"app": "api"}, "ports": [{"port": 80}]})),
            Refusal::SelectsNone
        );
        assert_eq!(
            refused(serde_json::json!({"type": "ExternalName", "externalName": "x.example"})),
            Refusal::ExternalName
        );
    }

    #[test]
    fn a_port_keeps_its_number_while_free_and_moves_past_one_taken() {
        let range = (20000, 20009);
        let none = BTreeSet::new();
        let p = allocate("ns/web/http", range, &none).unwrap();
        assert_eq!(allocate("ns/web/http", range, &none), Some(p), "stable");
        assert!((20000..=20009).contains(&p));
        let taken = BTreeSet::from([p]);
        let q = allocate("ns/web/http", range, &taken).unwrap();
        assert_ne!(q, p);
        let full: BTreeSet<u16> = (20000..=20009).collect();
        assert_eq!(allocate("ns/web/http", range, &full), None);
        assert_eq!(allocate("x", (5, 4), &none), None);
    }

    #[test]
    fn in_place_while_asleep_kept_until_the_workload_is_ready_then_gone() {
        // Asleep: wanted before the write to 0, whatever else.
        assert!(wanted(0, false, true));
        // Waking: kept until the workload's own endpoints are ready.
        assert!(wanted(2, true, false));
        assert!(!wanted(2, true, true));
        // Awake: never added.
        assert!(!wanted(2, false, false));
    }

    /// Service `web`'s IPv4 slice for its port `name` (80) on proxy port 20001, one ready
    /// proxy at 10.0.0.7, `ignore` handed to the proxy.
    fn one_slice(name: Option<&str>, ignore: Option<WakeIgnore>) -> EndpointSlice {
        let svc = web();
        let ports = [(
            Intercepted {
                name: name.map(str::to_string),
                port: 80,
            },
            20001,
        )];
        let config = ProxyConfig {
            hold_secs: 20,
            ignore,
            samples: vec![],
        };
        let of = SliceFor {
            tdset: "t",
            tdset_uid: "uid-t",
            service: &svc,
            ports: &ports,
            config: &config,
        };
        let proxy = [ProxyAddress {
            ip: "10.0.0.7".into(),
            ready: true,
            ..Default::default()
        }];
        slices(&of, &proxy).remove(0)
    }

    /// A slice is the same as the one wanted only if the operator's annotations are the same,
    /// each there or not: `ignore` taken out of the TDSet (or the samples gone) is written.
    #[test]
    fn an_annotation_the_tdset_no_longer_asks_for_makes_the_slice_differ() {
        let with = one_slice(
            Some("http"),
            Some(WakeIgnore {
                user_agents: vec!["(?i)bot".into()],
                paths: vec![],
            }),
        );
        let without = one_slice(Some("http"), None);
        assert!(same(&with, &with));
        assert!(!same(&with, &without), "the ignore rules stay on the slice");
        assert!(!same(&without, &with));
        // Someone else's annotation on the stored slice is not the operator's business.
        let mut annotated = without.clone();
        (annotated.metadata.annotations.get_or_insert_default())
            .insert("example.com/note".into(), "x".into());
        assert!(same(&annotated, &without));
    }

    /// A Service's only port may have no name. The API server stores a slice port without a
    /// name as `""` (its defaulting), so the slice asks for `""`: otherwise it never looks
    /// the same as the one stored, and is applied again at every reconcile.
    #[test]
    fn an_unnamed_service_port_is_named_empty_in_the_slice_as_the_api_server_stores_it() {
        let s = one_slice(None, None);
        let p = s.ports.as_ref().unwrap();
        assert_eq!((p[0].name.as_deref(), p[0].port), (Some(""), Some(20001)));
    }

    #[test]
    fn one_slice_per_family_with_the_ready_proxies_and_the_services_port_names() {
        let svc = web();
        let ports = [
            (
                Intercepted {
                    name: Some("http".into()),
                    port: 80,
                },
                20001,
            ),
            (
                Intercepted {
                    name: Some("metrics".into()),
                    port: 9090,
                },
                20002,
            ),
        ];
        let config = ProxyConfig {
            hold_secs: 20,
            ignore: Some(WakeIgnore {
                user_agents: vec!["(?i)bot".into()],
                paths: vec!["/healthz".into()],
            }),
            samples: vec![12, 9],
        };
        let of = SliceFor {
            tdset: "t",
            tdset_uid: "uid-t",
            service: &svc,
            ports: &ports,
            config: &config,
        };
        let proxies = [
            ProxyAddress {
                ip: "10.0.0.7".into(),
                ready: true,
                node: Some("node-a".into()),
                zone: Some("z1".into()),
            },
            ProxyAddress {
                ip: "10.0.0.8".into(),
                ready: false,
                ..Default::default()
            },
            ProxyAddress {
                ip: "fd00::7".into(),
                ready: true,
                ..Default::default()
            },
        ];
        let s = slices(&of, &proxies);
        assert_eq!(s.len(), 2);
        let v4 = &s[0];
        assert_eq!(v4.metadata.name.as_deref(), Some("web-tdset-wake-ipv4"));
        assert_eq!(v4.address_type, "IPv4");
        assert_eq!(v4.endpoints.len(), 1, "only ready proxies");
        assert_eq!(v4.endpoints[0].addresses, ["10.0.0.7"]);
        // Local where the proxy pod runs (a `Local` traffic policy drops endpoints without).
        assert_eq!(v4.endpoints[0].node_name.as_deref(), Some("node-a"));
        assert_eq!(v4.endpoints[0].zone.as_deref(), Some("z1"));
        assert_eq!(
            v4.endpoints[0].conditions.as_ref().unwrap().ready,
            Some(true)
        );
        let l = v4.metadata.labels.as_ref().unwrap();
        assert_eq!(l[SERVICE_NAME_LABEL], "web");
        assert_eq!(l[MANAGED_BY_LABEL], MANAGED_BY);
        let p = v4.ports.as_ref().unwrap();
        assert_eq!(
            (p[0].name.as_deref(), p[0].port),
            (Some("http"), Some(20001))
        );
        assert_eq!(
            v4.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-t"
        );
        assert_eq!(s[1].address_type, "IPv6");
        assert_eq!(s[1].endpoints[0].addresses, ["fd00::7"]);
        // What the proxy needs travels with the slice, and reads back as it was.
        let read = ProxyConfig::from_annotations(v4.metadata.annotations.as_ref());
        assert_eq!(read, config);
    }

    #[test]
    fn a_proxy_config_it_cannot_read_falls_back_to_the_defaults() {
        let bad = BTreeMap::from([
            (HOLD_ANNOTATION.to_string(), "600".to_string()),
            (IGNORE_ANNOTATION.to_string(), "{not json".to_string()),
            (READY_ANNOTATION.to_string(), "7,x,-1".to_string()),
        ]);
        let read = ProxyConfig::from_annotations(Some(&bad));
        assert_eq!(
            read.hold_secs, DEFAULT_HOLD_SECS,
            "60 s is the longest hold"
        );
        assert_eq!(read.ignore, None);
        assert_eq!(read.samples, [7, -1]);
        assert_eq!(
            ProxyConfig::from_annotations(None).hold_secs,
            DEFAULT_HOLD_SECS
        );
    }

    /// An operator's slice for `ns/svc` at proxy port `port`, created at `at`.
    fn claim(ns: &str, svc: &str, port: i32, at: &str) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{svc}-tdset-wake-ipv4"), "namespace": ns,
                         "creationTimestamp": at,
                         "labels": {SERVICE_NAME_LABEL: svc, MANAGED_BY_LABEL: MANAGED_BY,
                                    TDSET_LABEL: svc},
                         "ownerReferences": [{"apiVersion": "schedule.rs/v1", "kind": "TDSet",
                                              "name": svc, "uid": "u", "controller": true}]},
            "addressType": "IPv4",
            "endpoints": [],
            "ports": [{"name": "http", "port": port}],
        }))
        .unwrap()
    }

    /// Finding 5 of the wake proxy's review: a reconcile while no proxy pod was ready emptied
    /// a slice that named one, and the sleeping Service had no endpoint at all; and with none
    /// ready the workload was put to sleep behind a slice that named nobody.
    #[test]
    fn with_no_proxy_ready_a_slice_keeps_the_proxies_it_names_and_none_is_made_naming_none() {
        let web = service(serde_json::json!({
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80}]
        }));
        let config = ProxyConfig::default();
        let none_ready = [ProxyAddress {
            ip: "10.0.0.7".into(),
            ready: false,
            ..Default::default()
        }];
        let of = plan_for(&none_ready, &config);
        let plan = |present: &[EndpointSlice]| {
            let seen = seen_web(&web, present, false);
            plan_service(&of, &seen, &mut BTreeSet::new())
        };
        // Nothing there yet: nothing could stand in for the Service, so nothing is written and
        // the plan says the workload must stay awake.
        let first = plan(&[]);
        assert!(first.unguarded && first.apply.is_empty(), "{first:?}");
        // One there naming a proxy (made while it was ready): kept as it is, never emptied.
        let ready = [ProxyAddress {
            ip: "10.0.0.7".into(),
            ready: true,
            ..Default::default()
        }];
        let while_ready = PlanFor {
            proxies: &ready,
            ..of
        };
        let seen = ServiceSeen {
            name: "web",
            service: Some(&web),
            ports: &[],
            present: &[],
            own_ready: false,
            contested: &BTreeSet::new(),
            namespace_holds: 0,
            busiest: None,
        };
        let had = plan_service(&while_ready, &seen, &mut BTreeSet::new()).apply[0].clone();
        assert!(!had.endpoints.is_empty());
        let again = plan(std::slice::from_ref(&had));
        assert!(again.remove.is_empty() && !again.unguarded, "{again:?}");
        for s in &again.apply {
            assert_eq!(s.endpoints, had.endpoints, "{again:?}");
        }
    }

    /// Finding 3 of the wake proxy's review: a woken Service's slice was deleted at once, its
    /// port free to the next Service while the proxy still routed it to the first. Now it
    /// leaves the path emptied and keeps its port until it goes, 90 s later; going back to
    /// sleep in between takes the same port again, and the workload's endpoints turning
    /// unready while awake do not bring the proxy back.
    #[test]
    fn a_woken_services_slice_is_emptied_keeps_its_port_and_goes_only_after_its_retirement() {
        let web = service(serde_json::json!({
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80}]
        }));
        let config = ProxyConfig::default();
        let proxies = [ProxyAddress {
            ip: "10.0.0.5".into(),
            ready: true,
            ..Default::default()
        }];
        let t0 = chrono::DateTime::parse_from_rfc3339("2026-12-02T03:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let plan = |asleep: bool, present: &[EndpointSlice], own_ready: bool, secs: i64| {
            let of = PlanFor {
                asleep,
                now: t0 + chrono::Duration::seconds(secs),
                ..plan_for(&proxies, &config)
            };
            let seen = seen_web(&web, present, own_ready);
            plan_service(&of, &seen, &mut BTreeSet::new())
        };
        let port = |s: &EndpointSlice| s.ports.as_ref().unwrap()[0].port;
        let asleep = plan(true, &[], false, 0).apply.remove(0);
        // Awake, its own endpoints ready: emptied, not deleted, the port still named.
        let out = plan(false, std::slice::from_ref(&asleep), true, 0);
        assert!(out.remove.is_empty(), "{out:?}");
        let retired = out.apply[0].clone();
        assert!(retired.endpoints.is_empty());
        assert_eq!(port(&retired), port(&asleep));
        assert_eq!(retired_at(&retired), Some(t0));
        // Awake, its own endpoints unready a moment: the proxy stays out; looked at again when
        // the retirement ends.
        let later = plan(false, std::slice::from_ref(&retired), false, 60);
        assert!(
            later.apply.is_empty() && later.remove.is_empty(),
            "{later:?}"
        );
        assert_eq!(later.retiring, Some(std::time::Duration::from_secs(30)));
        // Asleep again before it went: in the path again on the same port.
        let again = plan(true, std::slice::from_ref(&retired), false, 60);
        assert_eq!(port(&again.apply[0]), port(&asleep));
        assert!(!again.apply[0].endpoints.is_empty());
        assert_eq!(retired_at(&again.apply[0]), None);
        // Retired 90 s: deleted, and only now is its port free.
        let gone = plan(false, std::slice::from_ref(&retired), true, 90);
        assert_eq!(gone.remove, [slice_name("web", "IPv4")]);
        assert!(gone.apply.is_empty());
    }

    /// A mesh that would black-hole the Service asleep: refused before it sleeps, and a slice
    /// it had leaves the path; the port's appProtocol is the Service's on the slice.
    #[test]
    fn a_service_a_mesh_would_black_hole_is_refused_and_its_slice_leaves_the_path() {
        let web = service(serde_json::json!({
            "selector": {"app": "web"},
            "ports": [{"name": "grpc", "port": 80, "appProtocol": "kubernetes.io/h2c"}]
        }));
        let config = ProxyConfig::default();
        let proxies = [ProxyAddress {
            ip: "10.0.0.5".into(),
            ready: true,
            ..Default::default()
        }];
        let ambient = Mesh::IstioAmbient { on: "namespace" };
        let plan = |mesh: Option<&Mesh>, present: &[EndpointSlice]| {
            let of = PlanFor {
                mesh,
                ..plan_for(&proxies, &config)
            };
            let seen = seen_web(&web, present, false);
            plan_service(&of, &seen, &mut BTreeSet::new())
        };
        let refused = plan(Some(&ambient), &[]);
        assert_eq!(refused.refused, Some(Refusal::Mesh(ambient.clone())));
        assert!(refused.apply.is_empty(), "nothing put in the path");
        let asleep = plan(None, &[]).apply.remove(0);
        let port = &asleep.ports.as_ref().unwrap()[0];
        assert_eq!(port.app_protocol.as_deref(), Some("kubernetes.io/h2c"));
        // The mesh came while it slept behind the proxy: its slice retired.
        let left = plan(Some(&ambient), std::slice::from_ref(&asleep));
        assert!(
            left.apply.iter().all(|s| s.endpoints.is_empty()),
            "{left:?}"
        );
        assert!(retired_at(&left.apply[0]).is_some());
        assert!(
            Refusal::Mesh(ambient)
                .to_string()
                .contains("cannot serve ambient clients")
        );
    }

    /// Finding 6 of the wake proxy's review: one namespace could take the whole cluster-wide
    /// range (a TDSet names up to 16 Services, each with any number of ports).
    #[test]
    fn a_namespace_past_its_share_of_the_range_is_refused_and_a_full_range_names_the_busiest() {
        let two_ports = service(serde_json::json!({
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80}, {"name": "admin", "port": 81}]
        }));
        let config = ProxyConfig::default();
        let proxies = [ProxyAddress {
            ip: "10.0.0.5".into(),
            ready: true,
            ..Default::default()
        }];
        let of = PlanFor {
            range: (20000, 20003),
            per_namespace: 3,
            ..plan_for(&proxies, &config)
        };
        let plan = |holds: usize, used: &mut BTreeSet<u16>| {
            let seen = ServiceSeen {
                name: "web",
                service: Some(&two_ports),
                ports: &[],
                present: &[],
                own_ready: false,
                contested: &BTreeSet::new(),
                namespace_holds: holds,
                busiest: Some(("greedy".into(), 3)),
            };
            plan_service(&of, &seen, used)
        };
        let within = plan(1, &mut BTreeSet::new());
        assert!(
            within.refused.is_none() && within.apply.len() == 1,
            "{within:?}"
        );
        let past = plan(2, &mut BTreeSet::new());
        assert_eq!(
            past.refused,
            Some(Refusal::NamespaceShare { holds: 4, share: 3 })
        );
        assert!(past.apply.is_empty());
        let text = past.refused.unwrap().to_string();
        assert!(
            text.contains("hold 4") && text.contains("may hold 3"),
            "{text}"
        );
        // A Service that already has its slices keeps them, whatever the namespace holds now
        // (a share lowered, two TDSets given ports in the same instant).
        let had = within.apply[0].clone();
        let seen = ServiceSeen {
            name: "web",
            service: Some(&two_ports),
            ports: &[],
            present: std::slice::from_ref(&had),
            own_ready: false,
            contested: &BTreeSet::new(),
            namespace_holds: 3,
            busiest: None,
        };
        let kept = plan_service(&of, &seen, &mut BTreeSet::new());
        assert!(kept.refused.is_none() && kept.remove.is_empty(), "{kept:?}");
        let full = plan(0, &mut BTreeSet::from([20000, 20001, 20002]));
        let text = full.refused.expect("the range is full").to_string();
        assert!(text.contains("namespace greedy holds 3"), "{text}");
    }

    #[test]
    fn a_port_another_services_older_slice_names_is_contested_and_moved_off() {
        let mine = [claim("b", "shop", 20001, "2026-11-28T11:00:00Z")];
        let older = claim("a", "web", 20001, "2026-11-28T10:00:00Z");
        let younger = claim("c", "api", 20001, "2026-11-28T12:00:00Z");
        let elsewhere = claim("d", "db", 20002, "2026-11-28T09:00:00Z");
        let all = [mine[0].clone(), older.clone(), younger.clone(), elsewhere];
        assert_eq!(contested(&mine, all.iter()), BTreeSet::from([20001]));
        // The oldest claim keeps its port (the proxy routes it there); a tie in time goes by
        // namespace, then name, as the proxy orders them.
        assert!(contested(std::slice::from_ref(&older), all.iter()).is_empty());
        let same_second = claim("a", "web", 20001, "2026-11-28T11:00:00Z");
        assert!(contested(std::slice::from_ref(&same_second), mine.iter()).is_empty());
        assert_eq!(
            contested(&mine, [same_second].iter()),
            BTreeSet::from([20001])
        );

        // The plan gives the contested Service another port, in the same write.
        let shop = service(serde_json::json!({
            "selector": {"app": "shop"},
            "ports": [{"name": "http", "port": 80}]
        }));
        let config = ProxyConfig::default();
        let proxies = [ProxyAddress {
            ip: "10.0.0.5".into(),
            ready: true,
            ..Default::default()
        }];
        let of = PlanFor {
            tdset: "shop",
            tdset_uid: "uid-shop",
            namespace: "b",
            ..plan_for(&proxies, &config)
        };
        let lost = BTreeSet::from([20001]);
        let kept = BTreeSet::new();
        let plan = |contested: &BTreeSet<u16>| {
            let seen = ServiceSeen {
                name: "shop",
                service: Some(&shop),
                ports: &[],
                present: &mine,
                own_ready: false,
                contested,
                namespace_holds: 0,
                busiest: None,
            };
            plan_service(&of, &seen, &mut BTreeSet::from([20001]))
        };
        let moved = plan(&lost);
        let port = moved.apply[0].ports.as_ref().unwrap()[0].port;
        assert!(
            port.is_some_and(|p| p != 20001 && (20000..=20009).contains(&p)),
            "{port:?}"
        );
        let stays = plan(&kept);
        let port = stays
            .apply
            .first()
            .map(|s| s.ports.as_ref().unwrap()[0].port);
        assert!(
            matches!(port, None | Some(Some(20001))),
            "uncontested, the port it has is kept: {port:?}"
        );
    }
}
