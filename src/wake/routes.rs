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
}

/// A proxy port the slices of two Services name (the operator gives each port once; another
/// writer of slices made the second): the oldest slice keeps it, so a slice made later can
/// never take over a port in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contested {
    pub port: u16,
    pub services: Vec<ServiceKey>,
}

/// The route of every proxy port the operator's slices name. `slices` may hold any slices:
/// only those managed by the operator, owned by the TDSet they name, with a Service named,
/// count.
pub fn routes(slices: &[EndpointSlice]) -> (BTreeMap<u16, Route>, Vec<Contested>) {
    let mut claims: BTreeMap<u16, Vec<(ServiceKey, String, &EndpointSlice)>> = BTreeMap::new();
    // Oldest first: the first claim of a port is the one that keeps it.
    let mut slices: Vec<&EndpointSlice> = slices.iter().collect();
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
            let list = claims.entry(proxy).or_default();
            // One Service's slices (a family each) name the same port: one claim.
            if !list.iter().any(|(k, n, _)| *k == key && *n == name) {
                list.push((key, name, slice));
            }
        }
    }
    let mut routes = BTreeMap::new();
    let mut contested = Vec::new();
    for (port, list) in claims {
        let Some((service, port_name, slice)) = list.first() else {
            continue;
        };
        if list.len() > 1 {
            let mut services: Vec<ServiceKey> = list.iter().map(|(k, ..)| k.clone()).collect();
            services.dedup();
            contested.push(Contested { port, services });
        }
        let config = ProxyConfig::from_annotations(slice.metadata.annotations.as_ref());
        let (ignore, _left_out) = Ignore::compile(config.ignore.as_ref());
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
                ignore: Arc::new(ignore),
            },
        );
    }
    (routes, contested)
}

/// Where the Service (in `namespace`) answers on `port_name`: every address of its own
/// slices that is ready and not terminating and is a pod of its namespace, in a stable order.
/// Its own slices are those a `trusted` manager keeps (the EndpointSlice controller's for a
/// Service with a selector), never the operator's nor any other writer's: a slice a tenant
/// writes cannot send held connections to an address of its choosing. Empty while the
/// workload sleeps or wakes.
pub fn targets(
    own: &[EndpointSlice],
    namespace: &str,
    port_name: &str,
    trusted: &[String],
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    let mut slices: Vec<&EndpointSlice> = own
        .iter()
        .filter(|s| {
            let labels = s.metadata.labels.as_ref();
            let manager = labels.and_then(|l| l.get(MANAGED_BY_LABEL));
            manager.is_some_and(|m| m != MANAGED_BY && trusted.contains(m))
        })
        .filter(|s| s.address_type == "IPv4" || s.address_type == "IPv6")
        .collect();
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for slice in slices {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0);
        let Some(port) = port else { continue };
        for endpoint in &slice.endpoints {
            if !serves(endpoint) {
                continue;
            }
            let pod_here = (endpoint.target_ref.as_ref()).is_some_and(|r| {
                r.kind.as_deref() == Some("Pod") && r.namespace.as_deref() == Some(namespace)
            });
            if !pod_here {
                continue;
            }
            for address in &endpoint.addresses {
                if let Ok(ip) = address.parse::<IpAddr>() {
                    out.push(SocketAddr::new(ip, port));
                }
            }
        }
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
        let (routes, contested) = routes(&slices);
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
        let (routes, contested) = routes(&slices);
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
        let (routes, _) = routes(&[theirs, nameless, out_of_range, unowned]);
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
        let found = targets(&[with_proxy, forged, own], "a", "http", &trusted);
        let want: Vec<SocketAddr> = vec![
            "10.1.0.5:8080".parse().unwrap(),
            "10.1.0.8:8080".parse().unwrap(),
        ];
        assert_eq!(found, want);
        assert!(targets(&[proxy], "a", "http", &trusted).is_empty());
    }

    fn pod(ns: &str) -> serde_json::Value {
        json!({"kind": "Pod", "namespace": ns, "name": "p"})
    }
}
