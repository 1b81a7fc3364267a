//! The real node's side of the tests (and the benchmarks that run there): the operator's image
//! built from the binary under test and loaded into the node, commands run in the node's
//! network namespace (where kube-proxy's rules are), workloads whose pods really serve, and a
//! Service asleep behind the wake proxy (`Sleeper`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use serde_json::json;
use tdset_operator::api::TDSet;

use super::*;

/// How long a step on the real node may take at most (real pods start, real probes pass).
pub const NODE_GUARD: Duration = Duration::from_secs(180);

pub const NS: &str = "tdset-system";

pub const RELEASE: &str = "tdset-operator";

pub const IMAGE_REPO: &str = "localhost/tdset/operator";

pub const IMAGE_TAG: &str = "test";

pub const WORKLOAD_IMAGE: &str = "localhost/tdset/httpd:1";

/// A build context holding only the binary these tests were built with, for the Dockerfile's
/// `prebuilt` target (`--build-arg BINARY=tdset-operator`): the test command builds the operator
/// once, and the image runs the very code under test.
pub fn image_context(dir: &Path) -> PathBuf {
    let context = dir.join("image-context");
    std::fs::create_dir_all(&context).expect("creating the image's build context");
    std::fs::copy(
        env!("CARGO_BIN_EXE_tdset-operator"),
        context.join("tdset-operator"),
    )
    .expect("copying the operator's binary into the build context");
    context
}

pub fn script_output(what: &str, args: &[&str]) -> String {
    succeeded(
        what,
        Command::new(script())
            .args(args)
            .current_dir(repo_root())
            .output()
            .expect("running scripts/control-plane.sh"),
    )
}

pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

pub fn raw_get(kubeconfig: &Path, path: &str) -> Option<String> {
    let out = kubectl_at(kubeconfig, &["get", "--raw", path]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's (only) container's status.
pub fn first_container(p: &Pod) -> &k8s_openapi::api::core::v1::ContainerStatus {
    &p.status
        .as_ref()
        .expect("a pod status")
        .container_statuses
        .as_ref()
        .expect("container statuses")[0]
}

pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// The host's processes whose cgroup paths contain `part` (a container's id, a node's root).
pub fn container_pids(part: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("reading /proc")
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<i32>().ok()?;
            let cgroups = std::fs::read_to_string(e.path().join("cgroup")).ok()?;
            cgroups.contains(part).then_some(pid)
        })
        .collect()
}

/// SIGKILLs, from the host, every process of the container; returns how many.
pub fn kill_container(id: &str) -> usize {
    container_pids(id)
        .into_iter()
        .filter(|pid| {
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        })
        .count()
}

/// A Deployment of real pods whose readiness probe passes only 15 s after the container
/// starts (a slow start-up), at 1.
pub fn slow_web(name: &str) -> serde_json::Value {
    probed_web(name, 15)
}

/// A Deployment of real pods whose readiness probe passes only `delay` seconds after the
/// container starts, at 1.
pub fn probed_web(name: &str, delay: i32) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                   "spec": {"containers": [{
                       "name": "web",
                       "image": WORKLOAD_IMAGE,
                       "imagePullPolicy": "Never",
                       "ports": [{"name": "http", "containerPort": 8080}],
                       "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                                          "initialDelaySeconds": delay, "periodSeconds": 1},
                       "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                           "allowPrivilegeEscalation": false,
                                           "capabilities": {"drop": ["ALL"]}}
                   }]}}}
    })
}

/// The node's network namespace, where kube-proxy's rules are: "from the node".
pub fn node_netns(dir: &Path) -> String {
    let index = std::fs::read_to_string(dir.join("node/index")).expect("the node's index");
    format!("tdset-node-{}", index.trim())
}

/// Runs `args` in the node's network namespace.
pub fn on_node(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &node_netns(dir)])
        .args(args)
        .output()
        .expect("running a command on the node")
}

pub const ECHO_IMAGE: &str = "localhost/tdset/echo:1";

/// `probed_web` running the echo workload (scripts/images/echo.c): a body is answered with its
/// length and FNV-1a hash, a WebSocket message is sent back.
pub fn echo_web(name: &str, delay: i32) -> serde_json::Value {
    let mut d = probed_web(name, delay);
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(ECHO_IMAGE);
    d
}

pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// One Service woken on request on the real node: `deployment` asleep by its schedule (awake
/// only in a window half a day away) behind a ClusterIP Service of its name (port 80 to the
/// pods' `http`), its TDSet's `wakeOnRequest` the Service with `wake`'s other fields.
pub struct Sleeper<'a> {
    pub client: &'a kube::Client,
    pub ns: &'a str,
    pub name: String,
    pub url: String,
    pub ip: String,
}

impl<'a> Sleeper<'a> {
    pub async fn new(
        client: &'a kube::Client,
        ns: &'a str,
        deployment: serde_json::Value,
        wake: serde_json::Value,
    ) -> Sleeper<'a> {
        Sleeper::scheduled(client, ns, deployment, wake, Sleeper::asleep_now()).await
    }

    /// A schedule asleep now: awake only in a window half a day away.
    pub fn asleep_now() -> serde_json::Value {
        use chrono::{Duration as Span, Utc};
        let window = |h: i64| (Utc::now() + Span::hours(h)).format("%H:00").to_string();
        json!({
            "schedulingConfig": [{"startTime": window(12), "endTime": window(13), "replica": 1}],
            "defaultReplica": 0})
    }

    /// `new`, with `schedule` (its `schedulingConfig` and `defaultReplica`) instead.
    pub async fn scheduled(
        client: &'a kube::Client,
        ns: &'a str,
        deployment: serde_json::Value,
        wake: serde_json::Value,
        schedule: serde_json::Value,
    ) -> Sleeper<'a> {
        let port = json!({"name": "http", "port": 80, "targetPort": "http"});
        Sleeper::serving(client, ns, deployment, wake, schedule, port).await
    }

    /// `scheduled`, its Service's one port `port` (e.g. without a name).
    pub async fn serving(
        client: &'a kube::Client,
        ns: &'a str,
        deployment: serde_json::Value,
        wake: serde_json::Value,
        schedule: serde_json::Value,
        port: serde_json::Value,
    ) -> Sleeper<'a> {
        let name = deployment["metadata"]["name"].as_str().unwrap().to_string();
        let number = port["port"].as_i64().unwrap_or(80);
        let _: Deployment = create_object(client, ns, deployment).await;
        let svc: Service = create_object(
            client,
            ns,
            json!({"metadata": {"name": name},
                   "spec": {"selector": {"app": name}, "ports": [port]}}),
        )
        .await;
        let ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
        let mut spec = schedule;
        spec["scaleTargetRef"] =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name});
        spec["wakeOnRequest"] = wake;
        spec["wakeOnRequest"]["services"] = json!([{"name": name}]);
        create_tdset(client, ns, &tdset(&name, spec)).await;
        Sleeper {
            client,
            ns,
            url: format!("http://{ip}:{number}"),
            name,
            ip,
        }
    }

    /// The operator's slices for the Service.
    pub async fn ours(&self) -> Option<Vec<k8s_openapi::api::discovery::v1::EndpointSlice>> {
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            self.client.clone(),
            self.ns,
        )
        .list(&ListParams::default().labels(&format!(
            "kubernetes.io/service-name={},endpointslice.kubernetes.io/managed-by=tdset.schedule.rs",
            self.name
        )))
        .await
        .ok()
        .map(|l| l.items)
    }

    /// Waits until the workload is at 0 with no ready pod, the operator's slice names a ready
    /// proxy address, and kube-proxy on the node sends the ClusterIP there.
    pub async fn asleep_with_the_proxy_in_its_path(&self, dir: &Path) {
        let t = Instant::now();
        eventually(
            NODE_GUARD,
            &format!("{} asleep, the proxy in its path", self.name),
            || async {
                let d: Deployment = Api::namespaced(self.client.clone(), self.ns)
                    .get(&self.name)
                    .await
                    .ok()?;
                let at_zero = d.spec?.replicas == Some(0)
                    && d.status.and_then(|s| s.ready_replicas).unwrap_or(0) == 0;
                let proxied = self
                    .ours()
                    .await?
                    .iter()
                    .flat_map(|s| &s.endpoints)
                    .any(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true));
                // kube-proxy sends the ClusterIP to the proxy's ports only: no longer to the pod
                // that went (its endpoint leaves the rules a moment after the pod stops).
                let proxy_ports: BTreeSet<String> = (self.ours().await?.iter())
                    .flat_map(|s| s.ports.iter().flatten())
                    .filter_map(|p| p.port.map(|p| p.to_string()))
                    .collect();
                let targets = kube_proxy_targets(dir, &self.ip);
                let programmed = !targets.is_empty()
                    && targets.iter().all(|t| {
                        t.rsplit_once(':')
                            .is_some_and(|(_, port)| proxy_ports.contains(port))
                    });
                (at_zero && proxied && programmed).then_some(())
            },
        )
        .await;
        eprintln!(
            "wake on request, {}: asleep with the proxy in its path after {:.1}s",
            self.name,
            t.elapsed().as_secs_f64()
        );
    }

    pub async fn status_now(&self) -> Option<tdset_operator::api::TDSetStatus> {
        Api::<TDSet>::namespaced(self.client.clone(), self.ns)
            .get_status(&self.name)
            .await
            .ok()?
            .status
    }

    pub async fn status(&self) -> tdset_operator::api::TDSetStatus {
        Api::<TDSet>::namespaced(self.client.clone(), self.ns)
            .get_status(&self.name)
            .await
            .unwrap()
            .status
            .unwrap()
    }

    /// The addresses the operator's slices for the Service name, sorted.
    pub async fn proxied_to(&self) -> Option<Vec<String>> {
        let mut a: Vec<String> = (self.ours().await?.iter())
            .flat_map(|s| &s.endpoints)
            .flat_map(|e| e.addresses.clone())
            .collect();
        a.sort();
        Some(a)
    }

    /// The history entries of request wake-ups.
    pub async fn request_wake_ups(&self) -> usize {
        self.status()
            .await
            .history
            .iter()
            .filter(|h| h.reason.contains("woken by a request"))
            .count()
    }
}

/// Where kube-proxy's rules on the node send new connections to ClusterIP `ip` (iptables
/// mode): the `--to-destination` of each endpoint chain its Service chains jump to.
pub fn kube_proxy_targets(dir: &Path, ip: &str) -> Vec<String> {
    let rules = on_node(dir, &["iptables-save", "-t", "nat"]);
    let rules = String::from_utf8_lossy(&rules.stdout);
    let jump = |l: &str| {
        l.split(" -j ")
            .nth(1)
            .map(|t| t.split(' ').next().unwrap_or(t).to_string())
    };
    let services: BTreeSet<String> = rules
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SERVICES ") && l.contains(&format!("-d {ip}/32")))
        .filter_map(jump)
        // KUBE-SVL-: a Service whose traffic policy is `Local` (its node's endpoints only).
        .filter(|c| c.starts_with("KUBE-SVC-") || c.starts_with("KUBE-SVL-"))
        .collect();
    let endpoints: BTreeSet<String> = rules
        .lines()
        .filter(|l| {
            services
                .iter()
                .any(|svc| l.starts_with(&format!("-A {svc} ")))
        })
        .filter_map(jump)
        .filter(|c| c.starts_with("KUBE-SEP-"))
        .collect();
    rules
        .lines()
        .filter(|l| {
            endpoints
                .iter()
                .any(|sep| l.starts_with(&format!("-A {sep} ")))
        })
        .filter_map(|l| l.split("--to-destination ").nth(1))
        .map(|d| d.split(' ').next().unwrap_or(d).to_string())
        .collect()
}

/// `curl` from the node to `url` with `more` options; its output, or curl's exit code.
pub fn curl_on_node(dir: &Path, url: &str, more: &[&str]) -> Result<String, i32> {
    let mut args = vec!["curl", "-sS", "-m", "90"];
    args.extend_from_slice(more);
    args.push(url);
    let out = on_node(dir, &args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(out.status.code().unwrap_or(-1))
    }
}

/// The wake proxy's pods (the chart's Deployment).
pub async fn proxy_pods(client: &kube::Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/component=wake-proxy"))
        .await
        .expect("listing the wake proxy's pods")
        .items
}

/// `curl` from the node to `url`, on a thread of its own.
pub fn curl_in_background(dir: &Path, url: String) -> tokio::task::JoinHandle<Result<String, i32>> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || curl_on_node(&dir, &url, &[]))
}

/// The operator's image (the Dockerfile's `prebuilt` target holding the binary under test,
/// built with buildah as docs/install.md, "Build the image" says), loaded into `dir`'s node.
pub fn operator_image_on_node(dir: &Path) {
    let archive = dir.join("operator-image.tar");
    let tag = format!("{IMAGE_REPO}:{IMAGE_TAG}");
    let context = image_context(dir);
    let dockerfile = repo_root().join("Dockerfile");
    script_output(
        "building the operator's image",
        &[
            "build-image",
            &tag,
            archive.to_str().unwrap(),
            "--target",
            "prebuilt",
            "--build-arg",
            "BINARY=tdset-operator",
            "-f",
            dockerfile.to_str().unwrap(),
            context.to_str().unwrap(),
        ],
    );
    script_output(
        "loading the image into the node",
        &[
            "load-image",
            dir.to_str().unwrap(),
            archive.to_str().unwrap(),
        ],
    );
}

/// The chart's wake-proxy pods, by label.
pub const WAKE_PROXY_PODS: &str = "app.kubernetes.io/name=tdset-operator-wake-proxy";

/// `helm install` of the chart with the image `operator_image_on_node` loaded, `--wait`ing
/// until its pods pass their probes; `sets` are more `--set` values.
pub fn install_chart_on_node(kc: &Path, sets: &[&str]) {
    let chart = repo_root().join("deploy/helm/tdset-operator");
    let repository = format!("image.repository={IMAGE_REPO}");
    let tag = format!("image.tag={IMAGE_TAG}");
    let mut args = vec![
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        "--set",
        &repository,
        "--set",
        &tag,
        "--set",
        "image.pullPolicy=Never",
        "--wait",
        "--timeout",
        "180s",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    succeeded("helm install", helm(kc, &args));
}

/// `rate` GETs a second to `url` for `secs` seconds, each on a thread of its own (with `Host:
/// host` when given); prints how many were sent, how many did not get the application's
/// answer ("ok\n"), and the first of those.
const STEADY_LOAD: &str = r#"
import sys, threading, time, urllib.request
url, secs, rate = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
headers = {"Host": sys.argv[4]} if len(sys.argv) > 4 else {}
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
results, lock = [], threading.Lock()
def one(i, sent):
    req = urllib.request.Request("%s/%d" % (url, i), headers=headers)
    try:
        with opener.open(req, timeout=90) as r:
            outcome = r.status if r.read() == b"ok\n" else "body"
    except Exception as e:
        outcome = repr(e)
    with lock:
        results.append((round(sent - start, 2), outcome))
start = time.time()
threads, i = [], 0
while time.time() - start < secs:
    t = threading.Thread(target=one, args=(i, time.time()))
    t.start(); threads.append(t); i += 1
    time.sleep(1.0 / rate)
for t in threads: t.join()
bad = [r for r in results if r[1] != 200]
print(len(results), len(bad), bad[:10])
"#;

/// What a steady load sent: how many requests, how many failed, and the client's words.
pub struct Load {
    pub total: usize,
    pub failed: usize,
    pub text: String,
}

/// A steady load from the node (`STEADY_LOAD`): `rate` requests a second to `url` for `secs`.
pub async fn steady_load(dir: &Path, url: &str, secs: i64, rate: u32, host: Option<&str>) -> Load {
    let mut args: Vec<String> = ["python3", "-c", STEADY_LOAD, url]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend([secs.to_string(), rate.to_string()]);
    args.extend(host.map(str::to_string));
    let dir = dir.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        on_node(&dir, &args)
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut fields = text.split_whitespace();
    Load {
        total: fields.next().and_then(|f| f.parse().ok()).unwrap_or(0),
        failed: fields
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(usize::MAX),
        text,
    }
}
