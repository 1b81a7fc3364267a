//! Traffic as Prometheus answers it (`spec.idle`'s `prometheus` signals): one instant query per
//! template (or distinct query text) for every TDSet, its answer read within a bound, each
//! Service's requests a second found in it. Pure: the request and the answer's bytes are the
//! caller's.
//!
//! The templates read the request counters ingress controllers and meshes already export, each
//! mapped to (namespace, Service) by the labels its exporter gives: Traefik's `service`
//! (`<namespace>-<service>-<port>@kubernetes`, matched here against the Services asked about:
//! its dashes cannot be split back), ingress-nginx's `namespace` (`exported_namespace` where
//! the scrape's own label took its place) and `service`, Istio's destination Service as the
//! destination's proxy reports it (a kubelet probe, rewritten to the sidecar's agent, is not in
//! it). Envoy and Linkerd name no Service in their counters (a route's cluster, a pod's
//! workload): not read yet, and their signals are Unknown, never idle.

use std::collections::HashMap;

use serde::Deserialize;

use crate::api::{PrometheusSignal, TrafficTemplate};

/// The most series one answer may hold, and its most bytes: past them the answer is refused
/// (every signal on it Unknown), never held whole.
pub const MAX_SERIES: usize = 50_000;
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// How an answer's series name a Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Keys {
    /// `namespace` and `service` (or `exported_namespace`, `exported_service`: the metric's
    /// own where the scrape's target labels took their place, as a ServiceMonitor's do): a
    /// query's own, and ingress-nginx's.
    NamespaceService,
    /// Traefik's `service`, `<namespace>-<service>-<port>@kubernetes` (or `@kubernetescrd`).
    Traefik,
    /// Istio's `destination_service_namespace` and `destination_service_name`.
    Istio,
}

/// What is asked of Prometheus for a signal, and how its answer names Services: the same for
/// every TDSet that reads it, so asked once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    pub query: String,
    pub keys: Keys,
}

/// Whether the operator can read `p`: a query, or a template it knows.
pub fn readable(p: &PrometheusSignal) -> bool {
    p.query.is_some() || p.template.is_some_and(|t| template(t, 60).is_some())
}

/// What `p` asks, its templates' rates over the last `window_secs` seconds; `None`: nothing
/// the operator can read.
pub fn source(p: &PrometheusSignal, window_secs: u64) -> Option<Source> {
    match (&p.query, p.template) {
        (Some(q), _) => Some(Source {
            query: q.clone(),
            keys: Keys::NamespaceService,
        }),
        (None, Some(t)) => template(t, window_secs),
        (None, None) => None,
    }
}

/// A template's query, one for every TDSet that reads it (grouped by what names a Service).
fn template(t: TrafficTemplate, window_secs: u64) -> Option<Source> {
    let w = format!("{window_secs}s");
    let (query, keys) = match t {
        TrafficTemplate::Traefik => (
            format!(
                r#"sum by (service, exported_service) (rate(traefik_service_requests_total{{service=~".+@kubernetes(crd)?"}}[{w}]) or rate(traefik_service_requests_total{{exported_service=~".+@kubernetes(crd)?"}}[{w}]))"#
            ),
            Keys::Traefik,
        ),
        TrafficTemplate::IngressNginx => (
            format!(
                "sum by (namespace, exported_namespace, service, exported_service) (rate(nginx_ingress_controller_requests[{w}]))"
            ),
            Keys::NamespaceService,
        ),
        TrafficTemplate::Istio => (
            format!(
                r#"sum by (destination_service_namespace, destination_service_name) (rate(istio_requests_total{{reporter="destination"}}[{w}]))"#
            ),
            Keys::Istio,
        ),
        TrafficTemplate::Envoy | TrafficTemplate::Linkerd => return None,
    };
    Some(Source { query, keys })
}

/// Requests a second by Service, from one answer.
#[derive(Clone, Debug, Default)]
pub struct Rates {
    /// By (namespace, Service).
    exact: HashMap<(String, String), f64>,
    /// By Traefik's service name without its port and provider (`<namespace>-<service>`):
    /// the port has no dash, so the name is cut at its last one.
    traefik: HashMap<String, f64>,
}

impl Rates {
    pub fn new() -> Rates {
        Rates::default()
    }

    /// Adds `rate` to Service `service` in `ns`.
    pub fn insert(&mut self, ns: &str, service: &str, rate: f64) {
        *(self.exact)
            .entry((ns.to_string(), service.to_string()))
            .or_default() += rate;
    }

    /// The requests a second to Service `service` in `ns`; `None`: no series names it. A
    /// Traefik name two (namespace, Service) pairs would give (`a-b` `c` and `a` `b-c`) counts
    /// for both.
    pub fn get(&self, ns: &str, service: &str) -> Option<f64> {
        let mut found = (self.exact)
            .get(&(ns.to_string(), service.to_string()))
            .copied();
        if let Some(r) = self.traefik.get(&format!("{ns}-{service}")) {
            *found.get_or_insert(0.0) += r;
        }
        found
    }

    /// How many series it holds.
    pub fn len(&self) -> usize {
        self.exact.len() + self.traefik.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A Traefik service name of the Kubernetes providers without its port and provider
/// (`<namespace>-<service>`), where it is one: the Ingress backend's port is a number or a
/// Service port's name. A port name with a dash is not taken: `web-api-80` is Service
/// `web-api`'s port 80, never Service `web`'s port `api-80` (a Service whose Ingress names
/// such a port is never seen, so Unknown, never idle).
fn traefik_service(name: &str) -> Option<&str> {
    let rest =
        (name.strip_suffix("@kubernetes")).or_else(|| name.strip_suffix("@kubernetescrd"))?;
    let (service, port) = rest.rsplit_once('-')?;
    let number = (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit());
    let named = (1..=15).contains(&port.len())
        && port
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && port.bytes().any(|b| b.is_ascii_lowercase());
    (number || named).then_some(service)
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    #[serde(default)]
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: Labels,
    /// `[unix time, "value"]`.
    value: (f64, String),
}

/// The labels that name a Service (the others are not kept).
#[derive(Deserialize)]
struct Labels {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    exported_namespace: Option<String>,
    #[serde(default)]
    service: Option<String>,
    #[serde(default)]
    exported_service: Option<String>,
    #[serde(default)]
    destination_service_namespace: Option<String>,
    #[serde(default)]
    destination_service_name: Option<String>,
}

/// Where a series counts: a (namespace, Service), or a Traefik service name.
enum Key {
    Exact(String, String),
    Traefik(String),
}

impl Labels {
    fn key(self, keys: Keys) -> Option<Key> {
        let exact = |ns: Option<String>, s: Option<String>| match (ns, s) {
            (Some(ns), Some(s)) if !ns.is_empty() && !s.is_empty() => Some(Key::Exact(ns, s)),
            _ => None,
        };
        match keys {
            Keys::NamespaceService => exact(
                self.exported_namespace.or(self.namespace),
                self.exported_service.or(self.service),
            ),
            Keys::Istio => exact(
                self.destination_service_namespace,
                self.destination_service_name,
            ),
            Keys::Traefik => self.exported_service.or(self.service).map(Key::Traefik),
        }
    }
}

/// The rates in an instant query's answer (`/api/v1/query`), summed by Service as `keys` names
/// them; `Err`: why it gives none (an error Prometheus said, not a vector, too large, a value
/// that is no number). A series that names no Service is left out.
pub fn rates(body: &[u8], keys: Keys) -> Result<Rates, String> {
    if body.len() > MAX_ANSWER_BYTES {
        return Err(format!(
            "the answer is larger than {} MiB",
            MAX_ANSWER_BYTES >> 20
        ));
    }
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if answer.status != "success" {
        return Err(format!(
            "Prometheus refused the query: {}",
            answer.error.unwrap_or_else(|| answer.status.clone())
        ));
    }
    let data = answer.data.ok_or("the answer has no data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "the query gives a {}, not an instant vector",
            data.result_type
        ));
    }
    if data.result.len() > MAX_SERIES {
        return Err(format!(
            "the query gives {} series, more than {MAX_SERIES}",
            data.result.len()
        ));
    }
    let mut rates = Rates::new();
    for s in data.result {
        let Some(key) = s.metric.key(keys) else {
            continue;
        };
        let value: f64 = (s.value.1.parse())
            .map_err(|_| format!("a value that is no number: {:?}", s.value.1))?;
        // NaN (a rate over no samples) says nothing: no series for it.
        if !value.is_finite() {
            continue;
        }
        let value = value.max(0.0);
        match key {
            Key::Exact(ns, service) => {
                *rates.exact.entry((ns, service)).or_default() += value;
            }
            Key::Traefik(name) => {
                if let Some(service) = traefik_service(&name) {
                    *rates.traefik.entry(service.to_string()).or_default() += value;
                }
            }
        }
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(result: serde_json::Value) -> Vec<u8> {
        serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn rates_are_summed_by_namespace_and_service() {
        let body = answer(serde_json::json!([
            {"metric": {"namespace": "dev", "service": "web", "code": "200"}, "value": [1.0, "0.5"]},
            {"metric": {"namespace": "dev", "service": "web", "code": "500"}, "value": [1.0, "0.25"]},
            {"metric": {"namespace": "dev", "service": "api"}, "value": [1.0, "0"]},
            {"metric": {"service": "nowhere"}, "value": [1.0, "9"]},
            {"metric": {"namespace": "dev", "service": "empty"}, "value": [1.0, "NaN"]}
        ]));
        let r = rates(&body, Keys::NamespaceService).unwrap();
        assert_eq!(r.get("dev", "web"), Some(0.75));
        assert_eq!(r.get("dev", "api"), Some(0.0));
        assert_eq!(r.len(), 2, "no namespace, or NaN: no series");
    }

    #[test]
    fn what_is_not_a_usable_answer_says_why() {
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
        assert!(
            rates(refused, Keys::NamespaceService)
                .unwrap_err()
                .contains("parse error at char 5")
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            rates(matrix, Keys::NamespaceService)
                .unwrap_err()
                .contains("matrix")
        );
        assert!(
            rates(b"<html>", Keys::NamespaceService)
                .unwrap_err()
                .contains("not a Prometheus answer")
        );
        let big = vec![b' '; MAX_ANSWER_BYTES + 1];
        assert!(
            rates(&big, Keys::NamespaceService)
                .unwrap_err()
                .contains("larger than")
        );
        let many: Vec<serde_json::Value> = (0..=MAX_SERIES)
            .map(|i| serde_json::json!({"metric": {"namespace": "n", "service": format!("s{i}")}, "value": [1.0, "1"]}))
            .collect();
        assert!(
            rates(&answer(many.into()), Keys::Traefik)
                .unwrap_err()
                .contains("series")
        );
    }

    #[test]
    fn traefik_names_are_matched_to_the_service_asked_about() {
        let body = answer(serde_json::json!([
            {"metric": {"service": "apps-web-80@kubernetes"}, "value": [1.0, "0.5"]},
            {"metric": {"service": "apps-web-http@kubernetescrd"}, "value": [1.0, "0.25"]},
            {"metric": {"service": "apps-web-api-80@kubernetes"}, "value": [1.0, "2"]},
            {"metric": {"service": "apps-web-8080@file"}, "value": [1.0, "9"]},
            {"metric": {"service": "dashboard@internal"}, "value": [1.0, "9"]},
            {"metric": {"service": "apps-quiet-80@kubernetes"}, "value": [1.0, "0"]},
            {"metric": {"service": "traefik-metrics", "exported_service": "apps-api-80@kubernetes"}, "value": [1.0, "1"]}
        ]));
        let r = rates(&body, Keys::Traefik).unwrap();
        assert_eq!(r.get("apps", "web"), Some(0.75), "its two, not web-api's");
        assert_eq!(r.get("apps", "web-api"), Some(2.0));
        assert_eq!(r.get("apps", "quiet"), Some(0.0), "seen, and quiet");
        assert_eq!(r.get("apps", "docs"), None, "never seen");
        assert_eq!(
            r.get("apps", "api"),
            Some(1.0),
            "scraped through a ServiceMonitor"
        );
        assert_eq!(r.get("other", "web"), None);
        // Namespace `apps-web` Service `api` gives the same name: it counts there too.
        assert_eq!(r.get("apps-web", "api"), Some(2.0));
    }

    #[test]
    fn ingress_nginx_and_istio_name_services_by_their_labels() {
        let nginx = answer(serde_json::json!([
            // Scraped with the pod's own labels: the metric's namespace is exported_namespace.
            {"metric": {"namespace": "ingress", "exported_namespace": "apps", "service": "web"}, "value": [1.0, "0.5"]},
            {"metric": {"namespace": "apps", "service": "api"}, "value": [1.0, "0.25"]},
            {"metric": {"namespace": "ingress", "exported_namespace": "apps", "service": ""}, "value": [1.0, "3"]},
            // Scraped through a ServiceMonitor: the controller's Service is `service`.
            {"metric": {"namespace": "ingress", "service": "ingress-nginx-metrics", "exported_namespace": "apps", "exported_service": "docs"}, "value": [1.0, "0.5"]}
        ]));
        let r = rates(&nginx, Keys::NamespaceService).unwrap();
        assert_eq!(r.get("apps", "web"), Some(0.5));
        assert_eq!(r.get("ingress", "web"), None);
        assert_eq!(r.get("apps", "api"), Some(0.25));
        assert_eq!(r.get("apps", "docs"), Some(0.5), "through a ServiceMonitor");
        assert_eq!(r.get("apps", "ingress-nginx-metrics"), None);
        assert_eq!(
            r.len(),
            3,
            "the default backend (no Service) counts nowhere"
        );
        let istio = answer(serde_json::json!([
            {"metric": {"destination_service_namespace": "apps", "destination_service_name": "web"}, "value": [1.0, "1.5"]},
            {"metric": {"destination_service_namespace": "unknown", "destination_service_name": "unknown"}, "value": [1.0, "1"]}
        ]));
        let r = rates(&istio, Keys::Istio).unwrap();
        assert_eq!(r.get("apps", "web"), Some(1.5));
    }

    #[test]
    fn one_query_per_template_and_what_cannot_be_read_is_none() {
        let signal =
            |v: serde_json::Value| -> PrometheusSignal { serde_json::from_value(v).unwrap() };
        let traefik = signal(serde_json::json!({"template": "traefik", "service": "web"}));
        let other = signal(serde_json::json!({"template": "traefik", "service": "api"}));
        assert_eq!(
            source(&traefik, 120),
            source(&other, 120),
            "the same query whatever the Service"
        );
        let s = source(&traefik, 120).unwrap();
        assert!(s.query.contains("traefik_service_requests_total") && s.query.contains("[120s]"));
        assert_eq!(s.keys, Keys::Traefik);
        for t in ["envoy", "linkerd"] {
            let p = signal(serde_json::json!({"template": t}));
            assert_eq!(source(&p, 120), None);
            assert!(!readable(&p));
        }
        let q = signal(serde_json::json!({"query": "sum by (namespace, service) (x)"}));
        assert_eq!(source(&q, 120).unwrap().keys, Keys::NamespaceService);
        assert!(readable(&q) && readable(&traefik));
    }
}
