//! Where the operator's wake endpoint is, and whether the proxy reaches it.
//!
//! Given a URL (`--operator-url`), that; given the wake Service (`--operator-service
//! NAMESPACE/NAME:PORT`, the chart's default), its ClusterIP read through the API, so a
//! cluster without DNS reaches it as installed (the demo's real node has none: a `.svc` name
//! there timed out at every report, and nothing ever woke). The address is read again after a
//! minute, and at once after a report or a probe could not connect (the Service made again).
//!
//! Reachable means the endpoint answered lately (a probe of `/healthz` every few seconds, or
//! any report's answer; a refusal, 401/403, still counts as reached for now). A proxy that
//! cannot reach the operator is not ready: the operator, which watches the proxy pods'
//! readiness, leaves it out of new slices (keeping the proxies an existing slice names; it
//! does not yet keep the workload awake instead); the metric and the 503's text say why.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};

/// How long a ClusterIP read is used before it is read again.
const ADDRESS_FOR: Duration = Duration::from_secs(60);

/// How the operator is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperatorAt {
    /// A base URL, e.g. `http://tdset-operator-wake.tdset-system.svc:8081`.
    Url(String),
    /// The wake Service, whose ClusterIP is read through the API.
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

impl std::str::FromStr for OperatorAt {
    type Err = String;

    /// `NAMESPACE/NAME:PORT` (the Service form).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?}: expected NAMESPACE/NAME:PORT, e.g. tdset-system/tdset-operator-wake:8081"
            )
        };
        let (namespace, rest) = s.split_once('/').ok_or_else(bad)?;
        let (name, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if namespace.is_empty() || name.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(OperatorAt::Service {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port,
        })
    }
}

/// The base URL of a Service's ClusterIP and port; none for a headless Service or one
/// without an address yet.
pub fn service_url(svc: &Service, port: u16) -> Option<String> {
    let ip: IpAddr = svc.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()?;
    Some(match ip {
        IpAddr::V4(v4) => format!("http://{v4}:{port}"),
        IpAddr::V6(v6) => format!("http://[{v6}]:{port}"),
    })
}

/// Finds the operator, and remembers whether it answered lately.
pub struct Operator {
    at: OperatorAt,
    client: Option<Client>,
    address: Mutex<Option<(String, Instant)>>,
    /// What the last probe or report found; none before the first.
    reachable: Mutex<Option<bool>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("at", &self.at).finish()
    }
}

impl Operator {
    /// `client` reads the wake Service (unused with a URL).
    pub fn new(at: OperatorAt, client: Option<Client>) -> Operator {
        Operator {
            at,
            client,
            address: Mutex::new(None),
            reachable: Mutex::new(None),
        }
    }

    /// The endpoint's base URL now.
    pub async fn url(&self) -> Result<String, String> {
        let (namespace, name, port) = match &self.at {
            OperatorAt::Url(url) => return Ok(url.trim_end_matches('/').to_string()),
            OperatorAt::Service {
                namespace,
                name,
                port,
            } => (namespace, name, *port),
        };
        if let Ok(cached) = self.address.lock()
            && let Some((url, at)) = cached.as_ref()
            && at.elapsed() < ADDRESS_FOR
        {
            return Ok(url.clone());
        }
        let client = self
            .client
            .clone()
            .ok_or_else(|| "no API client to read the operator's Service with".to_string())?;
        let svc = Api::<Service>::namespaced(client, namespace)
            .get(name)
            .await
            .map_err(|e| format!("reading the operator's wake Service {namespace}/{name}: {e}"))?;
        let url = service_url(&svc, port).ok_or_else(|| {
            format!("the operator's wake Service {namespace}/{name} has no ClusterIP")
        })?;
        if let Ok(mut cached) = self.address.lock() {
            *cached = Some((url.clone(), Instant::now()));
        }
        Ok(url)
    }

    /// The address could not be connected to: read it again next time.
    pub fn forget_address(&self) {
        if let Ok(mut cached) = self.address.lock() {
            *cached = None;
        }
    }

    /// Records what a probe or report found; what was known before (none: nothing yet).
    pub fn set_reachable(&self, reachable: bool) -> Option<bool> {
        self.reachable
            .lock()
            .map(|mut r| r.replace(reachable))
            .unwrap_or(None)
    }

    /// Whether the endpoint answered the last probe or report.
    pub fn reachable(&self) -> bool {
        self.reachable.lock().is_ok_and(|r| *r == Some(true))
    }

    /// What the proxy says where the operator cannot be reached.
    pub fn describe(&self) -> String {
        match &self.at {
            OperatorAt::Url(url) => url.clone(),
            OperatorAt::Service {
                namespace,
                name,
                port,
            } => format!("Service {namespace}/{name} port {port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_is_named_namespace_slash_name_colon_port() {
        assert_eq!(
            "tdset-system/tdset-operator-wake:8081".parse::<OperatorAt>(),
            Ok(OperatorAt::Service {
                namespace: "tdset-system".into(),
                name: "tdset-operator-wake".into(),
                port: 8081
            })
        );
        for bad in [
            "tdset-operator-wake:8081",
            "ns/name",
            "ns/name:0",
            "/name:1",
            "ns/:1",
            "ns/name:x",
        ] {
            assert!(bad.parse::<OperatorAt>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cluster_ip_becomes_a_url_and_a_headless_service_none() {
        let svc = |ip: &str| -> Service {
            serde_json::from_value(serde_json::json!({"spec": {"clusterIP": ip}})).unwrap()
        };
        assert_eq!(
            service_url(&svc("10.0.0.7"), 8081).as_deref(),
            Some("http://10.0.0.7:8081")
        );
        assert_eq!(
            service_url(&svc("fd00::7"), 8081).as_deref(),
            Some("http://[fd00::7]:8081")
        );
        assert_eq!(service_url(&svc("None"), 8081), None);
        assert_eq!(service_url(&Service::default(), 8081), None);
    }
}
