//! Wake on request behind a real ingress controller (issue 49): Traefik (built from its module
//! by `control-plane.sh install-traefik`) on the real node, its Kubernetes Ingress provider
//! reading each Service's EndpointSlices, as it routes any Service. Nothing of the user's is
//! changed for it: an Ingress to a Service, and the operator's slice beside the Service's own.
//!
//! A benchmark tier, not yet a suite of `scripts/test.sh`: Traefik's build costs about 10
//! CPU-minutes on a cold machine, chosen while the cold run measured over its budget (issue
//! 51; since measured at 25.4 min, so it may join the test command). What it
//! proves it asserts, and a failed assertion fails the run:
//! - asleep, Traefik's servers for the Service are the proxy pods at the operator's ports;
//!   awake, the pod alone (nothing of ours in the path);
//! - a request through Traefik wakes the Service and gets the application's own answer, and
//!   the wake-up names the request's host as the client sent it;
//! - the same for a Service whose one port has no name (Traefik pairs a slice's port with the
//!   Service's by name, here "");
//! - a steady 20 requests a second through Traefik, across the wake-up they cause and the
//!   hand-over to the pods, all get the application's answer.

use std::process::{Child, Stdio};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::wake::{from_epoch, ms, node_with_the_chart, one_request};
use super::*;
use support::node::*;

const APPS: &str = "ingress-bench";
/// Traefik's entry point for the applications (its address and port), and its API, on the
/// node's loopback.
const WEB: &str = "127.0.0.1:18000";
const WEB_IP: &str = "127.0.0.1";
const WEB_PORT: &str = "18000";
const API: &str = "127.0.0.1:18080";

/// Traefik, run on the node as a process of this bench; stopped when dropped.
struct Traefik(Child);

impl Drop for Traefik {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Traefik {
    /// Starts Traefik in the node's network namespace: the Kubernetes Ingress provider (the
    /// IngressClass `traefik`) with the cluster's kubeconfig, the applications' entry point and
    /// its API on the node's loopback. Waits until it answers its ping.
    fn start(dir: &std::path::Path, kc: &std::path::Path) -> (Traefik, String) {
        let out = script_output("building Traefik", &["install-traefik"]);
        let bin =
            std::path::Path::new(out.lines().last().unwrap_or_default().trim()).join("traefik");
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
        let log = std::fs::File::create(dir.join("traefik.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &node_netns(dir)])
            .arg(&bin)
            .args([
                &format!("--entryPoints.web.address={WEB}"),
                &format!("--entryPoints.traefik.address={API}"),
                "--api.insecure=true",
                "--ping=true",
                "--providers.kubernetesingress=true",
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                "--log.level=INFO",
            ])
            .env("KUBECONFIG", kc)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting Traefik on the node");
        let traefik = Traefik(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while curl_on_node(dir, &format!("http://{API}/ping"), &["-m", "2"]).as_deref() != Ok("OK")
        {
            assert!(
                Instant::now() < deadline,
                "Traefik did not answer its ping; log: {}",
                dir.join("traefik.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        (traefik, version)
    }

    /// The servers Traefik sends Service `svc`'s Ingress to (`ip:port`, sorted), as its API says.
    fn servers(dir: &std::path::Path, svc: &str) -> Option<Vec<String>> {
        let body = curl_on_node(
            dir,
            &format!("http://{API}/api/http/services"),
            &["-m", "5"],
        )
        .ok()?;
        let all: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
        let prefix = format!("{APPS}-{svc}-");
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

/// The addresses (`ip:port`, sorted) of the operator's slices for `s`: the proxy pods at the
/// operator's ports.
async fn proxied(s: &Sleeper<'_>) -> Option<Vec<String>> {
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

/// The ready pods' addresses (`ip:8080`) of `s`'s workload.
async fn pods_of(client: &Client, s: &Sleeper<'_>) -> Vec<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), APPS);
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

/// Waits until `what` holds, polling every 200 ms; panics after NODE_GUARD.
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + NODE_GUARD;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An Ingress (class `traefik`) sending host `<name>.example` to Service `name`'s port 80.
async fn ingress_to(client: &Client, name: &str) -> String {
    use k8s_openapi::api::networking::v1::Ingress;
    let host = format!("{name}.example");
    let _: Ingress = create_object(
        client,
        APPS,
        json!({"metadata": {"name": name},
               "spec": {"ingressClassName": "traefik",
                        "rules": [{"host": host, "http": {"paths": [{
                            "path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}}),
    )
    .await;
    host
}

impl Bench {
    pub(crate) async fn ingress(&mut self) {
        if let Some(why) = real_node_unavailable() {
            let _ = writeln!(
                self.report,
                "| wake on request behind an ingress controller | - | not run | {why} |"
            );
            return;
        }
        let (cp, dir, client) = node_with_the_chart("ingress", &[], APPS).await;
        let kc = cp.kubeconfig.clone();
        let class: k8s_openapi::api::networking::v1::IngressClass = serde_json::from_value(json!({
            "metadata": {"name": "traefik"},
            "spec": {"controller": "traefik.io/ingress-controller"}}))
        .unwrap();
        Api::<k8s_openapi::api::networking::v1::IngressClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .expect("the IngressClass traefik");
        let (traefik, version) = Traefik::start(&dir, &kc);
        self.wake_ups_through_traefik(&client, &dir, &version).await;
        self.load_through_traefik(&client, &dir, &version).await;
        drop(traefik);
        cp.stop();
    }

    /// Services asleep behind the proxy, each behind an Ingress, woken one at a time by a
    /// request through Traefik: 5 whose port is named, 1 whose port has none.
    async fn wake_ups_through_traefik(
        &mut self,
        client: &Client,
        dir: &std::path::Path,
        version: &str,
    ) {
        let wake = json!({"wakeFor": "30m", "hold": "60s"});
        let mut sleepers = Vec::new();
        for i in 0..6 {
            let name = format!("ing-{i}");
            // The last Service's one port has no name.
            let port = if i == 5 {
                json!({"port": 80, "targetPort": "http"})
            } else {
                json!({"name": "http", "port": 80, "targetPort": "http"})
            };
            let s = Sleeper::serving(
                client,
                APPS,
                probed_web(&name, 1),
                wake.clone(),
                Sleeper::asleep_now(),
                port,
            )
            .await;
            let host = ingress_to(client, &name).await;
            sleepers.push((s, host));
        }
        let mut to_byte = Vec::new();
        for (s, host) in &sleepers {
            s.asleep_with_the_proxy_in_its_path(dir).await;
            // Traefik sends the Service's Ingress to the proxy pods, at the operator's ports.
            let proxies = until(
                &format!("{}: Traefik's servers the proxy's", s.name),
                || async {
                    let p = proxied(s).await?;
                    (Traefik::servers(dir, &s.name)? == p).then_some(p)
                },
            )
            .await;
            let answer = one_request(dir, WEB_IP, WEB_PORT, host).await;
            assert_eq!(
                answer["body"], "ok\n",
                "{}: the application's own answer",
                s.name
            );
            to_byte.push(ms(
                from_epoch(answer["sent"].as_f64().unwrap()),
                from_epoch(answer["first"].as_f64().unwrap()),
            ));
            // The wake-up names the request as the client sent it (Traefik passes the host on).
            let woke = s.status().await.request_wake.expect("status.requestWake");
            let request = woke.request.expect("the request that woke it");
            assert_eq!(
                (request.service.as_str(), request.host.as_deref()),
                (s.name.as_str(), Some(host.as_str()))
            );
            assert_eq!(s.request_wake_ups().await, 1);
            // Awake: the operator's slice is gone and Traefik sends the Ingress to the pod alone.
            let pods = until(
                &format!("{}: Traefik's servers the pod alone", s.name),
                || async {
                    let pods = pods_of(client, s).await;
                    let alone = s.ours().await?.is_empty()
                        && !pods.is_empty()
                        && Traefik::servers(dir, &s.name)? == pods;
                    alone.then_some(pods)
                },
            )
            .await;
            let ip = |a: &String| a.rsplit_once(':').map(|(ip, _)| ip.to_string());
            assert!(
                pods.iter().all(|p| !proxies.iter().any(|x| ip(x) == ip(p))),
                "{pods:?} {proxies:?}"
            );
        }
        to_byte.sort_by(f64::total_cmp);
        let _ = writeln!(
            self.report,
            "| wake on request behind Traefik {version}: request -> first byte at the client, pods Ready 1 s after they start | {} wake-ups (one Service's port unnamed) | p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms | asleep, Traefik's servers for the Ingress were the proxy pods at the operator's ports; awake, the pod alone; each answer the application's, each wake-up naming the Ingress host |",
            to_byte.len(),
            quantile(&to_byte, 0.5),
            quantile(&to_byte, 0.95),
            to_byte.last().copied().unwrap_or(f64::NAN)
        );
    }

    /// 20 requests a second through Traefik for 60 s to a Service asleep behind the proxy: the
    /// first wakes it, the next are held, then Traefik is told the pods (the hand-over).
    async fn load_through_traefik(
        &mut self,
        client: &Client,
        dir: &std::path::Path,
        version: &str,
    ) {
        let s = Sleeper::new(
            client,
            APPS,
            probed_web("ing-load", 1),
            json!({"wakeFor": "30m", "hold": "60s"}),
        )
        .await;
        let host = ingress_to(client, &s.name).await;
        s.asleep_with_the_proxy_in_its_path(dir).await;
        until("ing-load: Traefik's servers the proxy's", || async {
            (Traefik::servers(dir, &s.name)? == proxied(&s).await?).then_some(())
        })
        .await;
        // While the load runs: when the operator's slice goes, and when Traefik stops sending
        // to the proxy (its servers the pods alone), seconds after the load's start.
        let start = Instant::now();
        let watch = {
            let (client, dir, name) = (client.clone(), dir.to_path_buf(), s.name.clone());
            tokio::spawn(async move {
                let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), APPS);
                let (mut gone, mut switched) = (None, None);
                while gone.is_none() || switched.is_none() {
                    let mine = slices
                        .list(&ListParams::default().labels(&format!(
                            "kubernetes.io/service-name={name},endpointslice.kubernetes.io/managed-by=tdset.schedule.rs"
                        )))
                        .await
                        .map(|l| l.items.is_empty());
                    if gone.is_none() && mine.unwrap_or(false) {
                        gone = Some(start.elapsed().as_secs_f64());
                    }
                    let (d, n) = (dir.clone(), name.clone());
                    let servers = tokio::task::spawn_blocking(move || Traefik::servers(&d, &n))
                        .await
                        .ok()
                        .flatten();
                    let on_pods = servers
                        .is_some_and(|v| !v.is_empty() && v.iter().all(|a| a.ends_with(":8080")));
                    if switched.is_none() && on_pods {
                        switched = Some(start.elapsed().as_secs_f64());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                (gone.unwrap_or(f64::NAN), switched.unwrap_or(f64::NAN))
            })
        };
        let url = format!("http://{WEB}");
        let Load {
            total,
            failed,
            text,
        } = steady_load(dir, &url, 60, 20, Some(&host)).await;
        let ended = start.elapsed().as_secs_f64();
        let (gone, switched) = tokio::time::timeout(NODE_GUARD, watch)
            .await
            .expect("the slice gone and Traefik on the pods")
            .unwrap();
        assert!(
            gone < ended - 10.0 && switched < ended - 10.0,
            "the hand-over within the load: slice gone at {gone:.1} s, Traefik on the pods at {switched:.1} s, load over at {ended:.1} s"
        );
        assert!(total >= 900, "{total} requests in 60 s: {text}");
        assert_eq!(
            failed, 0,
            "requests without the application's answer: {text}"
        );
        // Woken once, by a request, and the proxy out of the path afterwards.
        assert_eq!(s.request_wake_ups().await, 1);
        let pods = until("ing-load: Traefik's servers the pod alone", || async {
            let pods = pods_of(client, &s).await;
            (s.ours().await?.is_empty()
                && !pods.is_empty()
                && Traefik::servers(dir, &s.name)? == pods)
                .then_some(pods)
        })
        .await;
        let _ = writeln!(
            self.report,
            "| wake on request behind Traefik {version}: 20 requests/s for 60 s to a sleeping Service | {total} requests | **{failed} failed**; 1 wake-up | across the wake-up and the hand-over: the operator's slice gone {gone:.1} s into the load, Traefik sending to the pod alone ({pods:?}) from {switched:.1} s |"
        );
    }
}
