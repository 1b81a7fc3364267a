//! A real ingress controller in front of Services woken on request: Traefik (built from its
//! module by `control-plane.sh install-traefik`, cached like the control plane) run in the real
//! node's network namespace, its Kubernetes Ingress provider reading each Service's
//! EndpointSlices as it routes any Service. Nothing of the user's is changed for it: an Ingress
//! to a Service, and the operator's slice beside the Service's own. Used by the real node's test
//! and by the ingress benchmark.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::node::*;
use super::*;

/// Traefik's entry point for the applications (its address and port), and its API, on the
/// node's loopback.
pub const WEB: &str = "127.0.0.1:18000";
pub const WEB_IP: &str = "127.0.0.1";
pub const WEB_PORT: &str = "18000";
const API: &str = "127.0.0.1:18080";

/// Traefik, run on the node as a process of the test; stopped when dropped.
pub struct Traefik {
    child: Child,
    pub version: String,
}

impl Drop for Traefik {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Traefik {
    /// Creates the IngressClass `traefik`, then starts Traefik in the node's network namespace:
    /// the Kubernetes Ingress provider with the cluster's kubeconfig, the applications' entry
    /// point and its API on the node's loopback. Waits until it answers its ping.
    pub async fn start(client: &kube::Client, dir: &Path, kc: &Path) -> Traefik {
        let class: IngressClass = serde_json::from_value(json!({
            "metadata": {"name": "traefik"},
            "spec": {"controller": "traefik.io/ingress-controller"}}))
        .expect("an IngressClass");
        Api::<IngressClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .expect("the IngressClass traefik");
        let out = script_output("building Traefik", &["install-traefik"]);
        let bin = Path::new(out.lines().last().unwrap_or_default().trim()).join("traefik");
        let version = Command::new(&bin)
            .arg("version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let version = version
            .lines()
            .find_map(|l| l.strip_prefix("Version:"))
            .unwrap_or("?")
            .trim()
            .to_string();
        let log = std::fs::File::create(dir.join("traefik.log")).expect("Traefik's log file");
        let child = Command::new("ip")
            .args(["netns", "exec", &node_netns(dir)])
            .arg(&bin)
            .args([
                &format!("--entryPoints.web.address={WEB}"),
                &format!("--entryPoints.traefik.address={API}"),
                "--api.insecure=true",
                "--ping=true",
                "--providers.kubernetesingress=true",
                // Its request counters on its API's /metrics, by service (`spec.idle`'s template).
                "--metrics.prometheus=true",
                "--metrics.prometheus.entryPoint=traefik",
                "--metrics.prometheus.addServicesLabels=true",
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                "--log.level=INFO",
            ])
            .env("KUBECONFIG", kc)
            .stdout(Stdio::from(log.try_clone().expect("Traefik's log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting Traefik on the node");
        let traefik = Traefik { child, version };
        let deadline = Instant::now() + Duration::from_secs(60);
        while curl_on_node(dir, &format!("http://{API}/ping"), &["-m", "2"]).as_deref() != Ok("OK")
        {
            assert!(
                Instant::now() < deadline,
                "Traefik did not answer its ping; log: {}",
                dir.join("traefik.log").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        traefik
    }

    /// The servers Traefik sends the Ingress of Service `ns/svc` to (`ip:port`, sorted), as its
    /// API says.
    pub fn servers(dir: &Path, ns: &str, svc: &str) -> Option<Vec<String>> {
        let body = curl_on_node(
            dir,
            &format!("http://{API}/api/http/services"),
            &["-m", "5"],
        )
        .ok()?;
        let all: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
        let prefix = format!("{ns}-{svc}-");
        let found = all.iter().find(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with("@kubernetes"))
        })?;
        let mut v: Vec<String> = found["loadBalancer"]["servers"]
            .as_array()?
            .iter()
            .filter_map(|s| s["url"].as_str())
            .map(|u| u.trim_start_matches("http://").to_string())
            .collect();
        v.sort();
        Some(v)
    }
}

/// Where the node's Prometheus (`NodePrometheus`) answers, as the operator's pods reach it: the
/// node's own address.
pub fn node_prometheus_url(dir: &Path) -> String {
    let index = std::fs::read_to_string(dir.join("node/index")).expect("the node's index");
    format!("http://10.99.{}.2:19090", index.trim())
}

/// The Prometheus the cluster has (Debian's, as the test command installs it), run in the
/// node's network namespace: it scrapes Traefik's counters every 5 s and answers at
/// `node_prometheus_url`. Stopped when dropped.
pub struct NodePrometheus {
    child: Child,
    dir: std::path::PathBuf,
}

impl NodePrometheus {
    pub fn start(dir: &Path) -> NodePrometheus {
        let state = dir.join("prometheus");
        std::fs::create_dir_all(&state).expect("Prometheus's directory");
        let config = json!({
            "global": {"scrape_interval": "5s"},
            "scrape_configs": [{"job_name": "traefik", "static_configs": [{"targets": [API]}]}]
        });
        // JSON is YAML.
        let config_path = state.join("prometheus.yml");
        std::fs::write(&config_path, config.to_string()).expect("Prometheus's config");
        let url = node_prometheus_url(dir);
        let listen = url.trim_start_matches("http://").to_string();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("Prometheus's log");
        let child = Command::new("ip")
            .args(["netns", "exec", &node_netns(dir), "prometheus"])
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                state.join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::from(log.try_clone().expect("Prometheus's log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting Prometheus on the node (apt-get install prometheus)");
        NodePrometheus { child, dir: state }
    }

    /// The value of an instant query that gives one series, asked from the node.
    pub fn value(&self, dir: &Path, query: &str) -> Option<f64> {
        let url = format!("{}/api/v1/query", node_prometheus_url(dir));
        let q = format!("query={query}");
        let body = curl_on_node(dir, &url, &["-m", "5", "-G", "--data-urlencode", &q]).ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        (result.len() == 1).then_some(())?;
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for NodePrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An Ingress (class `traefik`) sending host `<name>.example` to Service `name`'s port 80;
/// returns the host.
pub async fn ingress_to(client: &kube::Client, ns: &str, name: &str) -> String {
    let host = format!("{name}.example");
    let _: Ingress = create_object(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"ingressClassName": "traefik",
                        "rules": [{"host": host, "http": {"paths": [{
                            "path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}),
    )
    .await;
    host
}

/// The addresses (`ip:port`, sorted) of the operator's slices for `s`: the proxy pods at the
/// operator's ports.
pub async fn proxied(s: &Sleeper<'_>) -> Option<Vec<String>> {
    let slices = s.ours().await?;
    let port = slices
        .iter()
        .flat_map(|x| x.ports.iter().flatten())
        .find_map(|p| p.port)?;
    let mut v: Vec<String> = slices
        .iter()
        .flat_map(|x| &x.endpoints)
        .flat_map(|e| e.addresses.iter().map(move |a| format!("{a}:{port}")))
        .collect();
    v.sort();
    (!v.is_empty()).then_some(v)
}

/// The ready pods' addresses (`ip:8080`, sorted) of `s`'s workload.
pub async fn pods_of(s: &Sleeper<'_>) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), s.ns);
    let mut v: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("app={}", s.name)))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .filter(|p| ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("{ip}:8080"))
        .collect();
    v.sort();
    v
}

/// Waits until Traefik sends `s`'s Ingress to the proxy pods at the operator's ports (and only
/// there); returns those addresses.
pub async fn traefik_on_the_proxy(dir: &Path, s: &Sleeper<'_>) -> Vec<String> {
    eventually(
        NODE_GUARD,
        &format!("{}: Traefik's servers the proxy's", s.name),
        || async {
            let p = proxied(s).await?;
            (Traefik::servers(dir, s.ns, &s.name)? == p).then_some(p)
        },
    )
    .await
}

/// Waits until the operator's slice for `s` is gone and Traefik sends its Ingress to the ready
/// pods alone; returns their addresses.
pub async fn traefik_on_the_pods_alone(dir: &Path, s: &Sleeper<'_>) -> Vec<String> {
    eventually(
        NODE_GUARD,
        &format!("{}: Traefik's servers the pods alone", s.name),
        || async {
            let pods = pods_of(s).await;
            (s.ours().await?.is_empty()
                && !pods.is_empty()
                && Traefik::servers(dir, s.ns, &s.name)? == pods)
                .then_some(pods)
        },
    )
    .await
}

/// After a request through Traefik (for `host`) woke `s`, whose Ingress Traefik had sent to
/// `proxies`: the wake-up names the request's host as the client sent it, there was one, and
/// once awake the operator's slice is gone and Traefik sends to the pods alone, none of them a
/// proxy's address. Returns the pods' addresses.
pub async fn woken_through_traefik(
    dir: &Path,
    s: &Sleeper<'_>,
    host: &str,
    proxies: &[String],
) -> Vec<String> {
    let woke = s.status().await.request_wake.expect("status.requestWake");
    let request = woke.request.expect("the request that woke it");
    assert_eq!(
        (request.service.as_str(), request.host.as_deref()),
        (s.name.as_str(), Some(host)),
        "the wake-up names the Service and the host the client sent"
    );
    assert_eq!(s.request_wake_ups().await, 1);
    let pods = traefik_on_the_pods_alone(dir, s).await;
    let ip = |a: &String| a.rsplit_once(':').map(|(ip, _)| ip.to_string());
    assert!(
        pods.iter().all(|p| !proxies.iter().any(|x| ip(x) == ip(p))),
        "the pods {pods:?} are not the proxy's {proxies:?}"
    );
    pods
}
