//! Where a connection goes, read from EndpointSlices only: the operator's slices say which
//! proxy port stands in for which port of which Service (and what the proxy must know of the
//! TDSet behind it); the Service's own slices say where its workload answers once awake.
//! Pure: the proxy's watches feed these functions what they see.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::schedule::wake::Ignore;
use crate::workload::intercept::{
    MANAGED_BY, MANAGED_BY_LABEL, ProxyConfig, SERVICE_NAME_LABEL, TDSET_LABEL, claim_cmp, serves,
};

/// A Service, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

/// What arrives on one proxy port.
#[derive(Clone, Debug)]
pub struct Route {
    pub service: ServiceKey,
    pub tdset: String,
    /// The Service port's name, as the Service's own slices name it ("" when unnamed).
    pub port_name: String,
    pub config: ProxyConfig,
    /// `config.ignore`, compiled once per slice seen, not per connection.
    pub ignore: Arc<Ignore>,
    /// The port's protocol is one whose client speaks first (HTTP and its kin, TLS): a
    /// connection that sends nothing is no client of it (a scanner, a probe's bare connect)
    /// and wakes nothing.
    pub client_first: bool,
    /// The port speaks HTTP in the clear: first bytes that are no HTTP request wake nothing.
    pub cleartext_http: bool,
}

/// The protocol of the Service port named `name` (appProtocol `app_protocol`): its
/// `appProtocol` (`kubernetes.io/` left off), else its name as `<protocol>[-<suffix>]` (the
/// convention meshes read protocols by; `grpc-web` is one of its own), lower case.
fn protocol_of(name: &str, app_protocol: Option<&str>) -> String {
    if let Some(a) = app_protocol.filter(|a| !a.is_empty()) {
        return a
            .strip_prefix("kubernetes.io/")
            .unwrap_or(a)
            .to_ascii_lowercase();
    }
    let name = name.to_ascii_lowercase();
    match name.strip_prefix("grpc-web") {
        Some(rest) if rest.is_empty() || rest.starts_with('-') => "grpc-web".to_string(),
        _ => name.split('-').next().unwrap_or_default().to_string(),
    }
}

/// Whether a client of that port speaks first (HTTP and its kin, TLS). Unknown: no (a
/// protocol where the server speaks first, a database's greeting, must still wake its workload
/// on a bare connect).
pub fn client_speaks_first(name: &str, app_protocol: Option<&str>) -> bool {
    const CLIENT_FIRST: &[&str] = &[
        "http", "https", "http2", "h2c", "grpc", "grpc-web", "ws", "wss", "tls",
    ];
    CLIENT_FIRST.contains(&protocol_of(name, app_protocol).as_str())
}

/// Whether that port speaks HTTP in the clear (HTTP/1, h2c, gRPC, WebSocket): there bytes that
/// are no HTTP request (a scanner's probe) are no client of it, and wake nothing. TLS ports
/// (`https`, `wss`, `tls`) are not: their first bytes are a handshake, relayed as they come.
pub fn speaks_cleartext_http(name: &str, app_protocol: Option<&str>) -> bool {
    const CLEARTEXT: &[&str] = &["http", "http2", "h2c", "grpc", "grpc-web", "ws"];
    CLEARTEXT.contains(&protocol_of(name, app_protocol).as_str())
}

/// A proxy port the slices of two Services name (the operator gives each port once; another
/// writer of slices made the second): the oldest slice keeps it, so a slice made later can
/// never take over a port in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contested {
    pub port: u16,
    pub services: Vec<ServiceKey>,
}

/// One Service's claim of a proxy port: the Service, its port's name, whether that port's
/// clients speak first and whether it speaks HTTP in the clear, and the slice that names it.
type Claim<'a> = (ServiceKey, String, (bool, bool), &'a EndpointSlice);

/// The route of every proxy port the operator's slices name. `slices` may hold any slices:
/// only those managed by the operator, owned by the TDSet they name, with a Service named,
/// count. `previous`: the routes before, whose compiled `ignore` is taken again where the
/// spec of it is unchanged (the routes are rebuilt at every slice event; the regexes are
/// compiled only when they change).
pub fn routes<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    previous: &BTreeMap<u16, Route>,
) -> (BTreeMap<u16, Route>, Vec<Contested>) {
    let mut claims: BTreeMap<u16, Vec<Claim<'_>>> = BTreeMap::new();
    // Oldest first: the first claim of a port is the one that keeps it.
    let mut slices: Vec<&EndpointSlice> = slices.into_iter().collect();
    slices.sort_by(|a, b| claim_cmp(a, b));
    for slice in slices {
        let labels = slice.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty());
        if label(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
            continue;
        }
        let (Some(service), Some(tdset), Some(namespace)) = (
            label(SERVICE_NAME_LABEL),
            label(TDSET_LABEL),
            slice.metadata.namespace.as_ref(),
        ) else {
            continue;
        };
        let owned = (slice.metadata.owner_references.iter().flatten())
            .any(|o| o.kind == "TDSet" && o.name == *tdset && o.controller == Some(true));
        if !owned {
            continue;
        }
        for port in slice.ports.iter().flatten() {
            let Some(proxy) = port.port.and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            let key = ServiceKey {
                namespace: namespace.clone(),
                name: service.clone(),
            };
            let name = port.name.clone().unwrap_or_default();
            let app = port.app_protocol.as_deref();
            let speaks = (
                client_speaks_first(&name, app),
                speaks_cleartext_http(&name, app),
            );
            let list = claims.entry(proxy).or_default();
            // One Service's slices (a family each) name the same port: one claim.
            if !list.iter().any(|(k, n, ..)| *k == key && *n == name) {
                list.push((key, name, speaks, slice));
            }
        }
    }
    let mut routes = BTreeMap::new();
    let mut contested = Vec::new();
    for (port, list) in claims {
        let Some((service, port_name, (client_first, cleartext_http), slice)) = list.first() else {
            continue;
        };
        if list.len() > 1 {
            let mut services: Vec<ServiceKey> = list.iter().map(|(k, ..)| k.clone()).collect();
            services.dedup();
            contested.push(Contested { port, services });
        }
        let config = ProxyConfig::from_annotations(slice.metadata.annotations.as_ref());
        let ignore = match previous.get(&port) {
            Some(before) if before.config.ignore == config.ignore => before.ignore.clone(),
            _ => Arc::new(Ignore::compile(config.ignore.as_ref()).0),
        };
        let tdset = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(TDSET_LABEL));
        routes.insert(
            port,
            Route {
                service: service.clone(),
                tdset: tdset.cloned().unwrap_or_default(),
                port_name: port_name.clone(),
                config,
                ignore,
                client_first: *client_first,
                cleartext_http: *cleartext_http,
            },
        );
    }
    (routes, contested)
}

/// The most of one slice's endpoints kept (the EndpointSlice controller's default, and more
/// than enough to spread held connections over).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The most of one slice's ports kept (the API's own bound).
pub const MAX_PORTS_PER_SLICE: usize = 100;

/// What the proxy keeps of one of a Service's own slices: where its workload answers, and
/// nothing else, so that what it keeps per slice is bounded whatever the slice holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answering {
    /// (port name, port): "" when unnamed.
    ports: Vec<(String, u16)>,
    /// The first address of each endpoint that is ready, not terminating, and a pod of the
    /// Service's namespace (the API takes an endpoint's addresses as fungible).
    addresses: Vec<IpAddr>,
}

impl Answering {
    /// What `slice`, one of the Service's (in `namespace`), says of where it answers. None:
    /// not a slice the proxy takes as the Service's own, which is one a `trusted` manager
    /// keeps (the EndpointSlice controller's for a Service with a selector), never the
    /// operator's nor any other writer's: a slice a tenant writes cannot send held connections
    /// to an address of its choosing. (The watch selects by the same managers; this is the
    /// rule, the selector its cost.)
    pub fn of(slice: &EndpointSlice, namespace: &str, trusted: &[String]) -> Option<Answering> {
        let labels = slice.metadata.labels.as_ref();
        let manager = labels.and_then(|l| l.get(MANAGED_BY_LABEL));
        if !manager.is_some_and(|m| m != MANAGED_BY && trusted.contains(m)) {
            return None;
        }
        if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
            return None;
        }
        let ports = (slice.ports.iter().flatten())
            .filter_map(|p| {
                let port = p
                    .port
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|p| *p > 0)?;
                Some((p.name.clone().unwrap_or_default(), port))
            })
            .take(MAX_PORTS_PER_SLICE)
            .collect();
        let addresses = (slice.endpoints.iter())
            .filter(|e| serves(e))
            .filter(|e| {
                (e.target_ref.as_ref()).is_some_and(|r| {
                    r.kind.as_deref() == Some("Pod") && r.namespace.as_deref() == Some(namespace)
                })
            })
            .filter_map(|e| e.addresses.first()?.parse::<IpAddr>().ok())
            .take(MAX_ENDPOINTS_PER_SLICE)
            .collect();
        Some(Answering { ports, addresses })
    }
}

/// The most of one Service's own slices kept: a Service's own are at most one per 100 pods and
/// address family; past this a slice is left out (and counted), so one Service costs the proxy
/// a bounded amount whatever is written for it.
pub const MAX_OWN_SLICES: usize = 32;

/// What became of a slice offered to a Service's kept slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    Kept,
    /// Not a slice of the Service's own (or deleted): not kept, and no longer kept.
    Gone,
    /// The Service already has `MAX_OWN_SLICES` others.
    LeftOut,
}

/// Offers `slice` (None: gone, or not the Service's own) as the Service's slice `name`.
pub fn keep(own: &mut BTreeMap<String, Answering>, name: String, slice: Option<Answering>) -> Kept {
    match slice {
        None => {
            own.remove(&name);
            Kept::Gone
        }
        Some(_) if own.len() >= MAX_OWN_SLICES && !own.contains_key(&name) => Kept::LeftOut,
        Some(s) => {
            own.insert(name, s);
            Kept::Kept
        }
    }
}

/// Where the Service answers on `port_name`: every address its own slices (`own`, by slice
/// name) keep, on that port, in a stable order. Empty while the workload sleeps or wakes.
pub fn targets<'a>(
    own: impl IntoIterator<Item = &'a Answering>,
    port_name: &str,
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in own {
        let Some((_, port)) = slice.ports.iter().find(|(name, _)| name == port_name) else {
            continue;
        };
        out.extend(slice.addresses.iter().map(|ip| SocketAddr::new(*ip, *port)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn ours(ns: &str, svc: &str, family: &str, ports: serde_json::Value) -> EndpointSlice {
        slice(json!({
            "metadata": {
                "name": format!("{svc}-tdset-wake-{family}"), "namespace": ns,
                "creationTimestamp": "2026-11-28T10:00:00Z",
                "ownerReferences": [{"apiVersion": "schedule.rs/v1", "kind": "TDSet",
                                     "name": "night", "uid": "u", "controller": true}],
                "labels": {
                    "kubernetes.io/service-name": svc,
                    "endpointslice.kubernetes.io/managed-by": "tdset.schedule.rs",
                    "schedule.rs/tdset": "night",
                },
                "annotations": {"schedule.rs/wake-hold-seconds": "20",
                                "schedule.rs/wake-ignore": "{\"paths\":[\"/healthz\"]}"},
            },
            "addressType": if family == "ipv6" { "IPv6" } else { "IPv4" },
            "endpoints": [],
            "ports": ports,
        }))
    }

    #[test]
    fn each_proxy_port_routes_to_its_service_port_with_the_tdsets_settings() {
        let slices = [
            ours(
                "a",
                "web",
                "ipv4",
                json!([{"name": "http", "port": 20001}, {"port": 20002}]),
            ),
            ours(
                "a",
                "web",
                "ipv6",
                json!([{"name": "http", "port": 20001}, {"port": 20002}]),
            ),
            ours("b", "api", "ipv4", json!([{"name": "grpc", "port": 20003}])),
        ];
        let (routes, contested) = routes(&slices, &BTreeMap::new());
        assert!(contested.is_empty());
        assert_eq!(routes.len(), 3);
        let web = &routes[&20001];
        assert_eq!(
            (web.service.namespace.as_str(), web.service.name.as_str()),
            ("a", "web")
        );
        assert_eq!(
            (web.tdset.as_str(), web.port_name.as_str()),
            ("night", "http")
        );
        assert_eq!(web.config.hold_secs, 20);
        assert!(web.ignore.ignores(Some("/healthz"), None));
        assert_eq!(routes[&20002].port_name, "");
        assert_eq!(routes[&20003].service.name, "api");
    }

    #[test]
    fn a_port_two_services_claim_stays_with_the_older_slice() {
        let mut later = ours(
            "b",
            "shop",
            "ipv4",
            json!([{"name": "http", "port": 20001}]),
        );
        later.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-28T11:00:00Z".parse().unwrap(),
            ));
        let slices = [
            later,
            ours("a", "web", "ipv4", json!([{"name": "http", "port": 20001}])),
            ours(
                "b",
                "shop",
                "ipv4",
                json!([{"name": "admin", "port": 20002}]),
            ),
        ];
        let (routes, contested) = routes(&slices, &BTreeMap::new());
        assert_eq!(
            routes[&20001].service.name, "web",
            "the older claim keeps it"
        );
        assert_eq!(contested[0].port, 20001);
        assert_eq!(contested[0].services.len(), 2);
        assert_eq!(routes[&20002].service.name, "shop");
    }

    #[test]
    fn slices_not_the_operators_or_missing_a_name_route_nothing() {
        let mut theirs = ours("a", "web", "ipv4", json!([{"port": 20001}]));
        theirs.metadata.labels.as_mut().unwrap().insert(
            MANAGED_BY_LABEL.into(),
            "endpointslice-controller.k8s.io".into(),
        );
        let mut nameless = ours("a", "web", "ipv4", json!([{"port": 20002}]));
        nameless
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(TDSET_LABEL);
        let out_of_range = ours("a", "web", "ipv4", json!([{"port": 70000}]));
        // Labelled as the operator's, but not owned by the TDSet it names.
        let mut unowned = ours("a", "web", "ipv4", json!([{"port": 20003}]));
        unowned.metadata.owner_references = None;
        let (routes, _) = routes(&[theirs, nameless, out_of_range, unowned], &BTreeMap::new());
        assert!(routes.is_empty(), "{routes:?}");
    }

    #[test]
    fn targets_are_the_services_own_ready_endpoints_on_the_ports_name() {
        let own = slice(json!({
            "metadata": {"name": "web-abc", "namespace": "a",
                         "labels": {"kubernetes.io/service-name": "web",
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.1.0.5"], "conditions": {"ready": true}, "targetRef": pod("a")},
                {"addresses": ["10.1.0.6"], "conditions": {"ready": false}, "targetRef": pod("a")},
                {"addresses": ["10.1.0.7"], "conditions": {"ready": true, "terminating": true}, "targetRef": pod("a")},
                {"addresses": ["10.1.0.8"], "targetRef": pod("a")},
                // Not a pod of the Service's namespace, or no pod at all: never a target.
                {"addresses": ["10.2.0.1"], "targetRef": pod("other")},
                {"addresses": ["10.2.0.2"]},
            ],
            "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
        }));
        // The operator's own slice for the Service is never a target.
        let proxy = ours("a", "web", "ipv4", json!([{"name": "http", "port": 20001}]));
        let mut with_proxy = proxy.clone();
        with_proxy.endpoints =
            vec![serde_json::from_value(json!({"addresses": ["10.9.0.1"]})).unwrap()];
        // A slice someone else wrote for the Service, pointing anywhere: never a target.
        let mut forged = own.clone();
        forged.metadata.name = Some("a-forged".into());
        forged
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(MANAGED_BY_LABEL.into(), "tenant".into());
        forged.endpoints[0].addresses = vec!["10.96.0.1".into()];
        let trusted = ["endpointslice-controller.k8s.io".to_string()];
        let kept: Vec<Answering> = [with_proxy, forged, own.clone()]
            .iter()
            .filter_map(|s| Answering::of(s, "a", &trusted))
            .collect();
        assert_eq!(kept.len(), 1, "only the trusted manager's slice is kept");
        let found = targets(&kept, "http");
        let want: Vec<SocketAddr> = vec![
            "10.1.0.5:8080".parse().unwrap(),
            "10.1.0.8:8080".parse().unwrap(),
        ];
        assert_eq!(found, want);
        assert!(Answering::of(&proxy, "a", &trusted).is_none());
    }

    /// A slice holding more than the proxy routes on (endpoints by the thousand, each with
    /// many addresses; ports past the API's bound) is kept as its first endpoints' first
    /// addresses and its ports, so what one slice costs the proxy is bounded.
    #[test]
    fn what_is_kept_of_a_slice_is_bounded_whatever_it_holds() {
        let endpoints: Vec<serde_json::Value> = (0..3000)
            .map(|i| {
                json!({"addresses": [format!("10.{}.{}.1", i / 256, i % 256), "10.255.0.1"],
                       "conditions": {"ready": true}, "targetRef": pod("a")})
            })
            .collect();
        let ports: Vec<serde_json::Value> = (0..300)
            .map(|i| json!({"name": format!("p{i}"), "port": 1000 + i}))
            .collect();
        let big = slice(json!({
            "metadata": {"name": "web-big", "namespace": "a",
                         "labels": {"kubernetes.io/service-name": "web",
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
        }));
        let kept = Answering::of(&big, "a", &["endpointslice-controller.k8s.io".into()]).unwrap();
        assert_eq!(kept.addresses.len(), MAX_ENDPOINTS_PER_SLICE);
        assert_eq!(kept.ports.len(), MAX_PORTS_PER_SLICE);
        assert!(
            !kept.addresses.contains(&"10.255.0.1".parse().unwrap()),
            "first addresses only"
        );
        assert_eq!(targets([&kept], "p0")[0], "10.0.0.1:1000".parse().unwrap());
    }

    #[test]
    fn a_service_keeps_at_most_its_cap_of_slices_and_a_kept_one_still_changes() {
        let mut own = BTreeMap::new();
        for i in 0..MAX_OWN_SLICES {
            assert_eq!(
                keep(&mut own, format!("s{i}"), Some(Answering::default())),
                Kept::Kept
            );
        }
        let more = keep(&mut own, "extra".into(), Some(Answering::default()));
        assert_eq!(more, Kept::LeftOut);
        assert_eq!(own.len(), MAX_OWN_SLICES);
        let changed = Answering {
            ports: vec![("http".into(), 80)],
            addresses: vec!["10.0.0.1".parse().unwrap()],
        };
        assert_eq!(
            keep(&mut own, "s0".into(), Some(changed.clone())),
            Kept::Kept
        );
        assert_eq!(own["s0"], changed);
        assert_eq!(keep(&mut own, "s1".into(), None), Kept::Gone);
        assert_eq!(
            keep(&mut own, "extra".into(), Some(Answering::default())),
            Kept::Kept
        );
    }

    #[test]
    fn a_silent_client_is_no_client_of_a_port_whose_clients_speak_first() {
        for (name, app) in [
            ("http", None),
            ("http-web", None),
            ("HTTPS", None),
            ("grpc", None),
            ("grpc-web", None),
            ("grpc-web-api", None),
            ("h2c", None),
            ("", Some("kubernetes.io/h2c")),
            ("db", Some("kubernetes.io/wss")),
            ("web", Some("http")),
        ] {
            assert!(client_speaks_first(name, app), "{name} {app:?}");
        }
        // Of those, the cleartext HTTP ones: not a TLS handshake.
        assert!(speaks_cleartext_http("http-web", None));
        assert!(speaks_cleartext_http("", Some("kubernetes.io/h2c")));
        assert!(speaks_cleartext_http("grpc-web-api", None));
        assert!(!speaks_cleartext_http("https", None));
        assert!(!speaks_cleartext_http("db", Some("kubernetes.io/wss")));
        assert!(!speaks_cleartext_http("mysql", None));
        // The server speaks first, or nobody can tell: a bare connect wakes it.
        for (name, app) in [
            ("", None),
            ("mysql", None),
            ("smtp", None),
            ("web", None),
            ("httpish", None),
            ("grpcweb", None),
            ("http", Some("mysql")),
        ] {
            assert!(!client_speaks_first(name, app), "{name} {app:?}");
        }
    }

    #[test]
    fn a_route_knows_its_ports_protocol_and_keeps_its_compiled_ignore_while_unchanged() {
        let slices = [ours(
            "a",
            "web",
            "ipv4",
            json!([{"name": "http", "port": 20001},
                   {"name": "db", "port": 20002},
                   {"name": "db-h2", "port": 20003, "appProtocol": "kubernetes.io/h2c"}]),
        )];
        let (first, _) = routes(&slices, &BTreeMap::new());
        assert!(first[&20001].client_first);
        assert!(!first[&20002].client_first);
        assert!(first[&20003].client_first, "by its appProtocol");
        // Rebuilt at the next slice event: the same compiled ignore, not compiled again.
        let (again, _) = routes(&slices, &first);
        assert!(Arc::ptr_eq(&first[&20001].ignore, &again[&20001].ignore));
        // Its spec changed: compiled anew.
        let mut changed = slices[0].clone();
        (changed.metadata.annotations.as_mut().unwrap()).insert(
            "schedule.rs/wake-ignore".into(),
            "{\"paths\":[\"/ready\"]}".into(),
        );
        let (anew, _) = routes(&[changed], &first);
        assert!(!Arc::ptr_eq(&first[&20001].ignore, &anew[&20001].ignore));
        assert!(anew[&20001].ignore.ignores(Some("/ready"), None));
        assert!(!anew[&20001].ignore.ignores(Some("/healthz"), None));
    }

    fn pod(ns: &str) -> serde_json::Value {
        json!({"kind": "Pod", "namespace": ns, "name": "p"})
    }
}
