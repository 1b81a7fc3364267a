//! Benchmarks against a real local control plane (etcd + kube-apiserver, no controller
//! manager, so pods do not add load that is not the operator's). The operator runs as a
//! separate release process, so its RSS and CPU are its own.
//!
//!   cargo bench --bench operator                 all scenarios, writes BENCHMARKS.md
//!   cargo bench --bench operator -- converge lag  some of them (converge, lag, steady, memory,
//!                                                ref: only the scaleTargetRef scenarios,
//!                                                lag10k: the boundary lag at N = 10 000,
//!                                                shards: at N = 10 000 (TDSET_BENCH_SHARDS_N), one
//!                                                operator and two shards,
//!                                                restart: memory of a restarted operator,
//!                                                history: the same with every history full,
//!                                                writes: a scale's cost by write kind,
//!                                                group: the group form at a boundary of 1000,
//!                                                100 joins, 100 groups x 100 in memory)
//!   TDSET_BENCH_STEADY_SECS=60 ...               a shorter steady-state window (default 300)

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::*;
use tdset_operator::api::TDSet;

const CONCURRENCY: usize = 32;

struct OperatorProcess {
    child: Child,
    metrics: String,
}

impl OperatorProcess {
    fn start(
        kubeconfig: &std::path::Path,
        ns: Option<&str>,
        fake_now: Option<DateTime<Utc>>,
        log: &std::path::Path,
    ) -> Self {
        Self::start_with(kubeconfig, ns, fake_now, log, &["--concurrency", "64"])
    }

    /// `extra` goes to `tdset-operator run`; none means the operator's default flags.
    fn start_with(
        kubeconfig: &std::path::Path,
        ns: Option<&str>,
        fake_now: Option<DateTime<Utc>>,
        log: &std::path::Path,
        extra: &[&str],
    ) -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        // TDSET_BENCH_WRAP="heaptrack -o /tmp/ht" runs the operator under a profiler: its
        // memory figures are then the profiler's, and a profiler that does not pass SIGTERM on
        // leaves each operator running after the bench (`pkill -f 'tdset-operator run'`).
        let wrap = std::env::var("TDSET_BENCH_WRAP").unwrap_or_default();
        let mut wrap = wrap.split_whitespace();
        let mut cmd = match wrap.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(wrap).arg(env!("CARGO_BIN_EXE_tdset-operator"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tdset-operator")),
        };
        cmd.args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ]);
        cmd.args(["--log-level", "warn"]).args(extra);
        if let Some(ns) = ns {
            cmd.args(["--namespace", ns]);
        }
        if let Some(t) = fake_now {
            cmd.env("TDSET_FAKE_NOW", t.to_rfc3339());
        }
        let out = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        let p = OperatorProcess {
            child,
            metrics: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..2400 {
            if p.get("/readyz").is_some_and(|b| b.starts_with("ready")) {
                return p;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("operator did not become ready; log: {}", log.display());
    }

    fn get(&self, path: &str) -> Option<String> {
        let out = Command::new("curl")
            .args(["-sf", &format!("{}{path}", self.metrics)])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }

    fn sum(&self, metric: &str) -> f64 {
        // + 0.0: an empty f64 sum is -0.0, which would print as "-0".
        self.get("/metrics")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            + 0.0
    }

    fn proc_status(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    }

    /// user+system CPU seconds so far.
    /// `tdset_api_writes_total` per `resource verb`, e.g. "deployments create 1000".
    fn writes_by_kind(&self) -> String {
        self.get("/metrics")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("tdset_api_writes_total{"))
            .filter_map(|l| {
                let (labels, n) = l.split_once("} ")?;
                let value = |k: &str| {
                    labels
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix("=\"")?.strip_suffix('"'))
                        .unwrap_or("?")
                        .to_string()
                };
                Some(format!("{} {} {n}", value("resource"), value("verb")))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.child.id())
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// user+system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// CPU seconds of the control plane's kube-apiserver and etcd so far.
fn control_plane_cpu(logs: &std::path::Path) -> f64 {
    ["kube-apiserver", "etcd"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(logs.with_file_name("pids").join(p)).ok())
        .filter_map(|pid| pid.trim().parse().ok())
        .map(cpu_seconds)
        .sum()
}

/// What the operators, the control plane's processes and the API server had done by an
/// instant; a phase of a boundary is the difference of two (the profile issue 25 asks for).
struct Snapshot {
    at: std::time::Instant,
    op_cpu: f64,
    cp_cpu: f64,
    reconciles: f64,
    /// "VERB resource[/subresource]" -> (requests, seconds the API server spent on them).
    requests: HashMap<String, (f64, f64)>,
}

impl Snapshot {
    /// `ops`: each operator's metrics address and pid.
    async fn take(ops: &[(String, u32)], client: &Client, logs: &std::path::Path) -> Snapshot {
        let at = std::time::Instant::now();
        let text = client
            .request_text(http_get("/metrics"))
            .await
            .unwrap_or_default();
        let mut requests: HashMap<String, (f64, f64)> = HashMap::new();
        for l in text.lines() {
            let (total, labels) = if let Some(l) = l.strip_prefix("apiserver_request_total{") {
                (true, l)
            } else if let Some(l) = l.strip_prefix("apiserver_request_duration_seconds_sum{") {
                (false, l)
            } else {
                continue;
            };
            let Some((labels, v)) = labels.split_once("} ") else {
                continue;
            };
            let label = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix("=\"")?.strip_suffix('"'))
                    .unwrap_or("")
            };
            let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
            if matches!(verb, "WATCH" | "CONNECT") || resource == "leases" || resource.is_empty() {
                continue;
            }
            let key = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            let v: f64 = v.parse().unwrap_or(0.0);
            let e = requests.entry(key).or_default();
            if total {
                e.0 += v;
            } else {
                e.1 += v;
            }
        }
        let metric = |url: &str, name: &str| -> f64 {
            let out = Command::new("curl")
                .args(["-sf", &format!("{url}/metrics")])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default();
            out.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Snapshot {
            at,
            op_cpu: ops.iter().map(|(_, pid)| cpu_seconds(*pid)).sum(),
            cp_cpu: control_plane_cpu(logs),
            reconciles: ops
                .iter()
                .map(|(url, _)| metric(url, "tdset_reconciles_total{"))
                .sum(),
            requests,
        }
    }

    /// The phase from `self` to `later`, one line: its length, CPU, reconciles, and the API
    /// requests made more than `min` times, with the API server's mean time per request.
    fn phase(&self, later: &Snapshot, name: &str, min: f64) -> String {
        let secs = later.at.duration_since(self.at).as_secs_f64();
        let mut reqs: Vec<(String, f64, f64)> = later
            .requests
            .iter()
            .map(|(k, (n, s))| {
                let (n0, s0) = self.requests.get(k).copied().unwrap_or_default();
                (k.clone(), n - n0, s - s0)
            })
            .filter(|(_, n, _)| *n >= min)
            .collect();
        reqs.sort_by(|a, b| b.1.total_cmp(&a.1));
        let reqs: Vec<String> = reqs
            .iter()
            .map(|(k, n, s)| format!("{k} {n:.0} ({:.0} ms each)", s / n * 1000.0))
            .collect();
        format!(
            "{name} {secs:.1} s: operator {:.1} CPU-s, {:.0} reconciles; kube-apiserver + etcd {:.1} CPU-s; requests {}",
            later.op_cpu - self.op_cpu,
            later.reconciles - self.reconciles,
            later.cp_cpu - self.cp_cpu,
            reqs.join(", "),
        )
    }

    /// Requests of `key` ("POST events") between `self` and `later`.
    fn count(&self, later: &Snapshot, key: &str) -> f64 {
        later.requests.get(key).map_or(0.0, |r| r.0) - self.requests.get(key).map_or(0.0, |r| r.0)
    }
}

/// What the benchmark's TDSets scale.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `container`: a Deployment each TDSet owns.
    Owned,
    /// `scaleTargetRef`: a Deployment of the same name that exists before the TDSet.
    Ref,
}

impl Form {
    fn label(self) -> &'static str {
        match self {
            Form::Owned => "owned",
            Form::Ref => "scaleTargetRef",
        }
    }
}

fn bench_tdset(form: Form, name: &str, windows: serde_json::Value, default: i32) -> TDSet {
    let source = match form {
        Form::Owned => json!({"container": {"image": "nginx:1.27", "port": 8080}}),
        Form::Ref => {
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}})
        }
    };
    let mut spec = json!({"schedulingConfig": windows, "defaultReplica": default});
    spec.as_object_mut()
        .unwrap()
        .extend(source.as_object().unwrap().clone());
    tdset(name, spec)
}

/// N Deployments named like `prefix{i}`, as Helm would create them (not the operator's).
fn app_deployments(prefix: &str, n: usize, replicas: i32) -> Vec<Deployment> {
    (0..n)
        .map(|i| serde_json::from_value(app_deployment(&format!("{prefix}{i}"), replicas)).unwrap())
        .collect()
}

async fn create_all<K>(api: &Api<K>, objs: Vec<K>) -> Duration
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let started = Instant::now();
    stream::iter(objs)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("create");
    started.elapsed()
}

/// Returns once `n` objects of the watch satisfy `pred` at the same time.
async fn all_where<K>(api: Api<K>, n: usize, pred: impl Fn(&K) -> bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut ok = std::collections::HashSet::new();
    let mut objects = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while ok.len() < n {
        match objects.next().await {
            Some(Ok(o)) if pred(&o) => {
                ok.insert(o.name_any());
            }
            Some(Ok(o)) => {
                ok.remove(&o.name_any());
            }
            Some(Err(_)) => {}
            None => panic!("watch ended"),
        }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn summary(sorted: &[f64]) -> (f64, f64, f64) {
    (
        quantile(sorted, 0.5),
        quantile(sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN),
    )
}

/// Seconds from `from` to each instant, sorted.
fn lags_from(seen: &HashMap<String, DateTime<Utc>>, from: DateTime<Utc>) -> Vec<f64> {
    let mut lags: Vec<f64> = seen
        .values()
        .map(|t| (*t - from).num_microseconds().unwrap_or(0) as f64 / 1e6)
        .collect();
    lags.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lags
}

/// Watches Deployments until `n` have been seen at `replicas`; returns when each was first
/// seen so, and how many were seen at `before.0` replicas before the instant `before.1`.
async fn watch_replicas(
    api: Api<Deployment>,
    n: usize,
    replicas: i32,
    before: Option<(i32, DateTime<Utc>)>,
    limit: Duration,
) -> (HashMap<String, DateTime<Utc>>, usize) {
    let mut seen: HashMap<String, DateTime<Utc>> = HashMap::new();
    let mut early = std::collections::HashSet::new();
    let mut events = watcher(api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < n {
        let next = tokio::time::timeout_at(deadline, events.next()).await;
        let Ok(Some(Ok(d))) = next else { break };
        let now = Utc::now();
        let r = d.spec.as_ref().and_then(|s| s.replicas);
        if let Some((count, until)) = before
            && r == Some(count)
            && now < until
        {
            early.insert(d.name_any());
        }
        if r == Some(replicas) {
            seen.entry(d.name_any()).or_insert(now);
        }
    }
    (seen, early.len())
}

struct Bench {
    client: Client,
    kubeconfig: std::path::PathBuf,
    /// A ServiceAccount bound to the operator's ClusterRole: requests as a deployed operator
    /// makes them, subject to API Priority and Fairness (the admin is exempt from it).
    sa_kubeconfig: std::path::PathBuf,
    sa_client: Client,
    logs: std::path::PathBuf,
    report: String,
}

impl Bench {
    async fn namespace(&self, prefix: &str) -> TestNamespace {
        TestNamespace::new(&self.client, prefix).await
    }

    /// The bench's ServiceAccount may hold Leases in `ns` (the chart's leader-election Role).
    async fn grant_leases(&self, ns: &str) {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "tdset-bench-leases"},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}]
        }))
        .unwrap();
        Api::<Role>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "tdset-bench-leases"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tdset-bench-leases"},
            "subjects": [{"kind": "ServiceAccount", "name": "tdset-bench", "namespace": "default"}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    /// A fresh namespace with an operator process (real clock) reconciling it.
    async fn watched_namespace(
        &self,
        prefix: &str,
        log: impl AsRef<std::path::Path>,
    ) -> (TestNamespace, OperatorProcess) {
        let ns = self.namespace(prefix).await;
        let op =
            OperatorProcess::start(&self.kubeconfig, Some(&ns.name), None, &self.logs.join(log));
        (ns, op)
    }

    /// Waits until `n` Deployments carry `replicas` and `n` TDSets report it in status.
    /// Watched, not polled: a poll adds its interval to the figure and, listing every object
    /// several times a second, loads the API server the operator is measured against.
    async fn converged(&self, ns: &str, n: usize, replicas: i32) {
        let deployments = all_where(
            Api::<Deployment>::namespaced(self.client.clone(), ns),
            n,
            move |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas),
        );
        let tdsets = all_where(
            Api::<TDSet>::namespaced(self.client.clone(), ns),
            n,
            move |t: &TDSet| {
                t.status.as_ref().is_some_and(|s| {
                    s.desired_replicas == Some(replicas)
                        && s.observed_generation == t.metadata.generation
                })
            },
        );
        futures::join!(deployments, tdsets);
    }

    async fn converge(&mut self, n: usize, form: Form) {
        let (ns, op) = self
            .watched_namespace(
                &format!("conv{n}"),
                format!("converge-{}-{n}.log", form.label()),
            )
            .await;
        if form == Form::Ref {
            // The targets exist before the TDSets, at a count the schedule changes.
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("t", n, 1)).await;
        }
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| bench_tdset(form, &format!("t{i}"), json!([]), 2))
            .collect();
        let cp_before = control_plane_cpu(&self.logs);
        let started = Instant::now();
        let create = create_all(&api, objs).await;
        self.converged(&ns.name, n, 2).await;
        let converge = started.elapsed();
        let cp_cpu = control_plane_cpu(&self.logs) - cp_before;
        let writes = op.sum("tdset_api_writes_total");
        let by_kind = op.writes_by_kind();
        let cpu = op.cpu_seconds();
        op.stop();
        // The floor for the operator: the same TDSets created with nobody watching them.
        let alone_ns = self.namespace(&format!("alone{n}")).await;
        let alone_api: Api<TDSet> = Api::namespaced(self.client.clone(), &alone_ns.name);
        let alone = create_all(
            &alone_api,
            (0..n)
                .map(|i| bench_tdset(form, &format!("t{i}"), json!([]), 2))
                .collect(),
        )
        .await;
        // The same client creating the same N Deployments directly.
        let direct_ns = self.namespace(&format!("direct{n}")).await;
        let dapi: Api<Deployment> = Api::namespaced(self.client.clone(), &direct_ns.name);
        let deploys = app_deployments("t", n, 2);
        let cp_before = control_plane_cpu(&self.logs);
        let direct = create_all(&dapi, deploys).await;
        let direct_cp_cpu = control_plane_cpu(&self.logs) - cp_before;
        let ratio = converge.as_secs_f64() / direct.as_secs_f64();
        let verdict = if ratio <= 1.5 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| converge, {} | N = {n} | {:.2} s to converge (TDSet creates took {:.2} s; {:.2} s with no operator running) | direct Deployment creates {:.2} s | ratio {ratio:.2} (target <= 1.5: {verdict}); operator writes {writes:.0} ({:.1}/TDSet: {by_kind}); CPU: operator {cpu:.2} s, API server + etcd {cp_cpu:.2} s (direct: {direct_cp_cpu:.2} s) |",
            form.label(),
            converge.as_secs_f64(),
            create.as_secs_f64(),
            alone.as_secs_f64(),
            direct.as_secs_f64(),
            writes / n as f64
        );
        println!(
            "converge {} N={n}: {:.2}s, direct {:.2}s, TDSets alone {:.2}s, ratio {ratio:.2}, writes {writes} ({by_kind}), CPU operator {cpu:.2}s, control plane {cp_cpu:.2}s (direct {direct_cp_cpu:.2}s)",
            form.label(),
            converge.as_secs_f64(),
            direct.as_secs_f64(),
            alone.as_secs_f64()
        );
        ns.cleanup().await;
        alone_ns.cleanup().await;
        direct_ns.cleanup().await;
    }

    async fn lag(&mut self, n: usize, form: Form) {
        self.lag_in_shards(n, form, 1).await;
    }

    /// The boundary lag with the TDSets split over `shards` operator processes (1: one
    /// operator, not sharded), each with its own selector and Lease.
    async fn lag_in_shards(&mut self, n: usize, form: Form, shards: usize) {
        let ns = self
            .namespace(&if shards > 1 {
                format!("lag{n}s{shards}")
            } else {
                format!("lag{n}")
            })
            .await;
        if shards > 1 {
            self.grant_leases(&ns.name).await;
        }
        if form == Form::Ref {
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("t", n, 1)).await;
        }
        let boundary: DateTime<Utc> = "2026-05-01T09:00:00Z".parse().unwrap();
        // Long enough for the operator to list everything and settle every TDSet at 1 first.
        let lead = Duration::from_secs(match n {
            0..=200 => 12,
            201..=2000 => 40,
            _ => 240,
        });
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                let mut t = bench_tdset(
                    form,
                    &format!("t{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
                    1,
                );
                if shards > 1 {
                    t.metadata.labels =
                        Some([("shard".to_string(), format!("s{}", i % shards))].into());
                }
                t
            })
            .collect();
        create_all(&api, objs).await;
        // The operator's clock reads `boundary - lead` when it starts; the boundary then comes
        // `lead` later in real time (measured from just before the spawn: lag is overstated
        // by the process start-up, never understated). Default flags, ServiceAccount identity.
        let rejected0 = apiserver_rejected(&self.client).await;
        let spawned = Utc::now();
        let ops: Vec<OperatorProcess> = (0..shards)
            .map(|k| {
                let (shard, selector) = (format!("s{k}"), format!("shard=s{k}"));
                let extra: Vec<&str> = if shards > 1 {
                    vec![
                        "--shard",
                        &shard,
                        "--shard-selector",
                        &selector,
                        "--lease-namespace",
                        &ns.name,
                        "--instance",
                        &shard,
                    ]
                } else {
                    vec![]
                };
                OperatorProcess::start_with(
                    &self.sa_kubeconfig,
                    Some(&ns.name),
                    Some(boundary - chrono::Duration::from_std(lead).unwrap()),
                    &self
                        .logs
                        .join(format!("lag-{}-{n}-{k}of{shards}.log", form.label())),
                    &extra,
                )
            })
            .collect();
        let boundary_real = spawned + chrono::Duration::from_std(lead).unwrap();
        // The profile: what each phase cost, from just before the boundary.
        let probes: Vec<(String, u32)> = ops
            .iter()
            .map(|op| (op.metrics.clone(), op.child.id()))
            .collect();
        let at_boundary = {
            let (probes, client, logs) = (probes.clone(), self.client.clone(), self.logs.clone());
            let wait = (boundary_real - Utc::now() - chrono::Duration::seconds(3))
                .to_std()
                .unwrap_or_default();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                Snapshot::take(&probes, &client, &logs).await
            })
        };
        // Every status at the new count, watched from before the boundary: a list of N TDSets
        // taken once the scale phase ends would load the API server in the phase it measures.
        let statuses_at_new_count = tokio::spawn(all_where(
            Api::<TDSet>::namespaced(self.client.clone(), &ns.name),
            n,
            |t: &TDSet| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.desired_replicas == Some(3))
            },
        ));
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let (seen, before) = watch_replicas(
            deploys.clone(),
            n,
            3,
            Some((1, boundary_real)),
            lead + Duration::from_secs(300),
        )
        .await;
        // Bookkeeping done too: every status written after the burst.
        let statuses = std::time::Instant::now();
        let scaled = Snapshot::take(&probes, &self.client, &self.logs).await;
        // TDSET_BENCH_PPROF=1: a CPU profile of kube-apiserver over the first 20 s of the
        // status phase (`go tool pprof -top` reads it).
        let pprof = std::env::var_os("TDSET_BENCH_PPROF").map(|_| {
            let out = self.logs.join(format!("apiserver-status-phase-{n}.pprof"));
            let kubeconfig = self.kubeconfig.clone();
            let path = out.clone();
            (
                out,
                std::thread::spawn(move || {
                    let o = Command::new(kubectl_path())
                        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
                        .args(["get", "--raw", "/debug/pprof/profile?seconds=20"])
                        .output()
                        .unwrap();
                    std::fs::write(&path, o.stdout).unwrap();
                }),
            )
        });
        statuses_at_new_count.await.unwrap();
        let bookkeeping = statuses.elapsed();
        let statused = Snapshot::take(&probes, &self.client, &self.logs).await;
        let at_boundary = at_boundary.await.unwrap();
        // Every Event of the boundary sent (one per TDSet), or two minutes without.
        let mut evented = Snapshot::take(&probes, &self.client, &self.logs).await;
        while at_boundary.count(&evented, "POST events") < n as f64
            && evented.at.duration_since(statused.at) < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
            evented = Snapshot::take(&probes, &self.client, &self.logs).await;
        }
        let min = n as f64 / 100.0;
        let profile = format!(
            "profile: {}; {}; {}; Events of the boundary: {:.0} of {n} sent {:.2} s after the last scale was seen",
            at_boundary.phase(&scaled, "boundary - 3 s to the last scale seen", min),
            scaled.phase(&statused, "then to every status written", min),
            statused.phase(&evented, "then to the Events sent", min),
            at_boundary.count(&evented, "POST events"),
            evented.at.duration_since(statuses).as_secs_f64(),
        );
        println!("{profile}");
        if let Some((path, t)) = pprof {
            let _ = t.join();
            println!(
                "kube-apiserver CPU profile of the status phase: {}",
                path.display()
            );
        }
        let errors: f64 = ops
            .iter()
            .map(|op| op.sum("tdset_reconcile_errors_total"))
            .sum();
        let superseded: f64 = ops
            .iter()
            .map(|op| op.sum("tdset_bookkeeping_superseded_total"))
            .sum();
        for op in ops {
            op.stop();
        }
        let rejected_op = apiserver_rejected(&self.client).await - rejected0;
        let lags = lags_from(&seen, boundary_real);
        let early = lags.iter().filter(|l| **l < 0.0).count();

        // The floor: the same client identity patching the same N Deployments' replicas
        // directly, with the operator's default concurrency (16), timed the same way.
        let rejected0 = apiserver_rejected(&self.client).await;
        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        // Let the watch's initial list finish before the clock starts.
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        stream::iter(names)
            .for_each_concurrent(16, |name| {
                let api = sa_deploys.clone();
                async move {
                    api.patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let (direct_seen, _) = watch.await.unwrap();
        let rejected_direct = apiserver_rejected(&self.client).await - rejected0;
        let direct = lags_from(&direct_seen, t0);

        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let ratio = p99 / d99;
        let mut target = String::new();
        if n <= 100 {
            let _ = write!(
                target,
                " (target p99 < 1 s: {})",
                if p99 < 1.0 { "met" } else { "MISSED" }
            );
        }
        if n == 1000 {
            let _ = write!(
                target,
                "; p99 ratio {ratio:.2} (target <= 1.3: {})",
                if ratio <= 1.3 { "met" } else { "MISSED" }
            );
        } else {
            let _ = write!(target, "; p99 ratio {ratio:.2}");
        }
        let _ = writeln!(
            self.report,
            "| boundary lag, {}, default flags, as a ServiceAccount{} | N = {n} | operator p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s{target} | {} of {n} scaled; {before} seen at 1 replica before the boundary; {early} scaled early; every status written {:.2} s after the last scale was seen; 429s from the API server: {rejected_op:.0} during the operator run, {rejected_direct:.0} during the direct patches; operator reconcile errors {errors:.0}; statuses superseded before sending {superseded:.0}; {profile} |",
            form.label(),
            if shards > 1 {
                format!(", {shards} shards (one process each)")
            } else {
                String::new()
            },
            seen.len(),
            bookkeeping.as_secs_f64(),
        );
        println!(
            "lag {} N={n} shards={shards}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; direct p50 {d50:.3} p99 {d99:.3} max {dmax:.3}; ratio {ratio:.2}; scaled {} early {early}; 429s {rejected_op}/{rejected_direct}; errors {errors}",
            form.label(),
            seen.len()
        );
        ns.cleanup().await;
    }

    /// A shared calendar named by N TDSets, changed at the instant it takes effect: today is
    /// added while every weekday window is open, and each Deployment must go to the default.
    /// Timed from the calendar's write to each Deployment at its new count, against N direct
    /// patches from the same identity in the same run.
    async fn calendar(&mut self, n: usize) {
        let ns = self.namespace(&format!("cal{n}")).await;
        let name = format!("bench-{}", ns.name);
        let calendars: Api<tdset_operator::api::TDCalendar> = Api::all(self.client.clone());
        let calendar = |dates: Vec<&str>| -> tdset_operator::api::TDCalendar {
            serde_json::from_value(json!({
                "apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
                "metadata": {"name": name}, "spec": {"holidays": dates}
            }))
            .unwrap()
        };
        let apply = kube::api::PatchParams::apply("bench").force();
        calendars
            .patch(
                &name,
                &apply,
                &kube::api::Patch::Apply(&calendar(vec!["2026-12-25"])),
            )
            .await
            .unwrap();
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                let mut t = bench_tdset(
                    Form::Owned,
                    &format!("c{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3, "days": ["Mon", "Tue", "Wed", "Thu", "Fri"]}]),
                    1,
                );
                t.spec.calendars = vec![tdset_operator::api::CalendarName(name.clone())];
                t
            })
            .collect();
        create_all(&api, objs).await;
        // Thursday 2026-12-03, 10:00 UTC on the operator's clock: every window is open.
        let op = OperatorProcess::start_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some("2026-12-03T10:00:00Z".parse().unwrap()),
            &self.logs.join(format!("calendar-{n}.log")),
            &[],
        );
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        watch_replicas(deploys.clone(), n, 3, None, Duration::from_secs(600)).await;
        self.converged_status(&ns.name, n, 3).await;
        // Today becomes a holiday: every TDSet goes to its default, 1.
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            1,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        calendars
            .patch(
                &name,
                &apply,
                &kube::api::Patch::Apply(&calendar(vec!["2026-12-25", "2026-12-03"])),
            )
            .await
            .unwrap();
        let (seen, _) = watch.await.unwrap();
        let errors = op.sum("tdset_reconcile_errors_total");
        op.stop();
        let lags = lags_from(&seen, t0);

        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        stream::iter((0..n).map(|i| format!("c{i}")))
            .for_each_concurrent(16, |name| {
                let api = sa_deploys.clone();
                async move {
                    api.patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let (direct_seen, _) = watch.await.unwrap();
        let direct = lags_from(&direct_seen, t0);
        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let _ = writeln!(
            self.report,
            "| a shared calendar changed under N TDSets (today added while their windows are open) | N = {n} | from the calendar's write to each Deployment at its new count: p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s; p99 ratio {:.2} | {} of {n} changed; operator reconcile errors {errors:.0} |",
            p99 / d99,
            seen.len(),
        );
        println!(
            "calendar N={n}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; direct p99 {d99:.3}; scaled {}",
            seen.len()
        );
        let _ = calendars.delete(&name, &Default::default()).await;
        ns.cleanup().await;
    }

    /// Waits until `n` TDSets report `replicas` in status.
    /// What a scale costs, by the kind of write: the same ServiceAccount sets the replicas of
    /// the same N operator-shaped Deployments (as the operator creates them) with 16 requests
    /// in flight, once as a JSON merge patch of `spec.replicas` (the lag baseline), once as a
    /// server-side apply of the whole Deployment (what the operator sent before issue 14), once
    /// as a server-side apply to `/scale`. Two rounds in mirrored order, so neither a warm cache
    /// nor a growing etcd favours one kind.
    async fn writes(&mut self, n: usize) {
        let ns = self.namespace(&format!("writes{n}")).await;
        let owner = |i: usize| {
            let mut t = bench_tdset(Form::Owned, &format!("w{i}"), json!([]), 1);
            t.metadata.namespace = Some(ns.name.clone());
            t.metadata.uid = Some(format!("00000000-0000-0000-0000-{i:012}"));
            t
        };
        let desired = |i: usize, replicas: i32| {
            tdset_operator::workload::owned::desired_deployment(&owner(i), replicas)
                .unwrap()
                .unwrap()
        };
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let sa: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        stream::iter(0..n)
            .map(|i| {
                let (api, d) = (deploys.clone(), desired(i, 1));
                let pp = PostParams {
                    field_manager: Some(tdset_operator::workload::owned::FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                async move { api.create(&pp, &d).await.map(|_| ()) }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .expect("create");
        let kinds = [
            "merge patch of spec.replicas",
            "apply of the whole Deployment",
            "apply to /scale",
        ];
        let mut replicas = 1;
        for (round, order) in [[0, 1, 2], [2, 1, 0]].iter().enumerate() {
            for &k in order {
                replicas += 1;
                let watch = tokio::spawn(watch_replicas(
                    deploys.clone(),
                    n,
                    replicas,
                    None,
                    Duration::from_secs(600),
                ));
                tokio::time::sleep(Duration::from_secs(2)).await;
                let cpu0 = control_plane_cpu(&self.logs);
                let t0 = Utc::now();
                stream::iter(0..n)
                    .for_each_concurrent(16, |i| {
                        let api = sa.clone();
                        let name = format!("w{i}");
                        let manager = tdset_operator::workload::owned::FIELD_MANAGER;
                        let whole = desired(i, replicas);
                        async move {
                            match k {
                                0 => api
                                    .patch(
                                        &name,
                                        &kube::api::PatchParams::default(),
                                        &kube::api::Patch::Merge(
                                            json!({"spec": {"replicas": replicas}}),
                                        ),
                                    )
                                    .await
                                    .map(|_| ()),
                                1 => api
                                    .patch(
                                        &name,
                                        &kube::api::PatchParams::apply(manager).force(),
                                        &kube::api::Patch::Apply(&whole),
                                    )
                                    .await
                                    .map(|_| ()),
                                _ => api
                                    .patch_scale(
                                        &name,
                                        &kube::api::PatchParams::apply(manager).force(),
                                        &kube::api::Patch::Apply(
                                            &tdset_operator::workload::target::scale_body(
                                                &name, replicas,
                                            ),
                                        ),
                                    )
                                    .await
                                    .map(|_| ()),
                            }
                            .unwrap();
                        }
                    })
                    .await;
                let (seen, _) = watch.await.unwrap();
                let cpu = control_plane_cpu(&self.logs) - cpu0;
                let (p50, p99, max) = summary(&lags_from(&seen, t0));
                let _ = writeln!(
                    self.report,
                    "| scale by write kind, round {} | N = {n} | {}: p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s | {} of {n} seen; kube-apiserver + etcd {cpu:.2} CPU-s |",
                    round + 1,
                    kinds[k],
                    seen.len(),
                );
                println!(
                    "writes round {} {}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; control plane {cpu:.2} CPU-s",
                    round + 1,
                    kinds[k]
                );
            }
        }
        ns.cleanup().await;
    }

    async fn converged_status(&self, ns: &str, n: usize, replicas: i32) {
        all_where(
            Api::<TDSet>::namespaced(self.client.clone(), ns),
            n,
            move |t: &TDSet| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.desired_replicas == Some(replicas))
            },
        )
        .await;
    }

    async fn steady(&mut self, n: usize, secs: u64) {
        let (ns, op) = self.watched_namespace("steady", "steady.log").await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        // No transition in the window: every window is 10 minutes wide and far from now.
        let now = Utc::now();
        let far = (now + chrono::Duration::hours(12))
            .format("%H:00")
            .to_string();
        let far_end = (now + chrono::Duration::hours(13))
            .format("%H:00")
            .to_string();
        let objs = (0..n)
            .map(|i| {
                bench_tdset(
                    Form::Owned,
                    &format!("t{i}"),
                    json!([{"startTime": far, "endTime": far_end, "replica": 5}]),
                    2,
                )
            })
            .collect();
        create_all(&api, objs).await;
        self.converged(&ns.name, n, 2).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (w0, cpu0, server0) = (
            op.sum("tdset_api_writes_total"),
            op.cpu_seconds(),
            apiserver_writes(&self.client).await,
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (w1, cpu1, server1) = (
            op.sum("tdset_api_writes_total"),
            op.cpu_seconds(),
            apiserver_writes(&self.client).await,
        );
        op.stop();
        let writes = w1 - w0;
        let verdict = if writes == 0.0 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| steady state | N = {n}, {secs} s | {writes:.0} operator writes (target 0: {verdict}); API server saw {:.0} mutating requests other than its own Leases | {:.2} CPU s ({:.3}% of one core) |",
            server1 - server0,
            cpu1 - cpu0,
            (cpu1 - cpu0) / secs as f64 * 100.0
        );
        println!(
            "steady N={n}: writes {writes}, server writes {}, cpu {:.2}s",
            server1 - server0,
            cpu1 - cpu0
        );
        ns.cleanup().await;
    }

    /// Peak RSS while converging `n` TDSets, with `unmanaged` Deployments the operator does
    /// not manage in the same namespace (its metadata watch sees them all).
    async fn memory(&mut self, n: usize, unmanaged: usize) {
        let ns = self.namespace(&format!("mem{n}")).await;
        if unmanaged > 0 {
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("unmanaged-", unmanaged, 1)).await;
        }
        let op = OperatorProcess::start(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("memory-{n}-{unmanaged}.log")),
        );
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n).map(|i| bench_tdset(Form::Owned, &format!("t{i}"), json!([{"startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 17, "endTime": 9, "replica": 1}]), 2)).collect();
        create_all(&api, objs).await;
        let tdsets: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        loop {
            let ok = tdsets
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().filter(|t| t.status.is_some()).count())
                .unwrap_or(0);
            if ok >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (hwm, rss) = (op.proc_status("VmHWM:"), op.proc_status("VmRSS:"));
        op.stop();
        let peak = hwm as f64 / 1024.0;
        let target = if n >= 10_000 {
            if peak < 100.0 {
                " (target < 100 MiB: met)"
            } else {
                " (target < 100 MiB: MISSED)"
            }
        } else {
            ""
        };
        let _ = writeln!(
            self.report,
            "| memory | N = {n}{} | peak RSS {peak:.1} MiB{target} | RSS after converging {:.1} MiB |",
            if unmanaged > 0 {
                format!(", with {unmanaged} unmanaged Deployments")
            } else {
                String::new()
            },
            rss as f64 / 1024.0
        );
        println!("memory N={n}: peak {peak:.1} MiB");
        ns.cleanup().await;
    }
}

impl Bench {
    /// Peak RSS of an operator started against a cluster that already holds `n` converged
    /// TDSets and their Deployments, from its start until it has reconciled each of them once.
    async fn restart(&mut self, n: usize) {
        self.restart_with(n, false).await;
    }

    /// Restart memory; with `full_history`, every TDSet's status carries the 10 entries of
    /// history it has after ten changes (the most it keeps) before the operator restarts.
    async fn restart_with(&mut self, n: usize, full_history: bool) {
        let ns = self
            .namespace(&if full_history {
                format!("history{n}")
            } else {
                format!("restart{n}")
            })
            .await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n).map(|i| bench_tdset(Form::Owned, &format!("t{i}"), json!([{"startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 17, "endTime": 9, "replica": 1}]), 2)).collect();
        create_all(&api, objs).await;
        let first = OperatorProcess::start(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("restart-first-{n}.log")),
        );
        all_where(api.clone(), n, |t: &TDSet| t.status.is_some()).await;
        let converge_peak = first.proc_status("VmHWM:") as f64 / 1024.0;
        first.stop();
        if full_history {
            // Ten changes, as the operator records them (times to the millisecond, a window's
            // name as the reason).
            let entries: Vec<serde_json::Value> = (0..tdset_operator::api::MAX_HISTORY)
                .map(|i| {
                    json!({"at": format!("2026-05-{:02}T09:00:00Z", 10 - i), "appliedAt": format!("2026-05-{:02}T09:00:00.412Z", 10 - i),
                           "from": 1, "to": 3, "reason": "window 09:00-17:00"})
                })
                .collect();
            stream::iter(0..n)
                .for_each_concurrent(CONCURRENCY, |i| {
                    let (api, entries) = (api.clone(), entries.clone());
                    async move {
                        api.patch_status(
                            &format!("t{i}"),
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(json!({"status": {"history": entries}})),
                        )
                        .await
                        .unwrap();
                    }
                })
                .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let started = std::time::Instant::now();
        let op = OperatorProcess::start(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("restart-{n}.log")),
        );
        let ready = started.elapsed();
        while op.sum("tdset_reconciles_total") < n as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (hwm, rss) = (op.proc_status("VmHWM:"), op.proc_status("VmRSS:"));
        let writes = op.sum("tdset_api_writes_total");
        op.stop();
        let peak = hwm as f64 / 1024.0;
        let target = if n >= 10_000 {
            format!(
                " (target < 64 MiB: {})",
                if peak < 64.0 { "met" } else { "MISSED" }
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            self.report,
            "| restart memory{} | N = {n} converged TDSets and Deployments | peak RSS {peak:.1} MiB from start until each TDSet was reconciled once{target} | ready (caches synced) after {:.2} s, all reconciled after {:.2} s, {writes:.0} writes; RSS then {:.1} MiB; the first operator peaked at {converge_peak:.1} MiB converging them |",
            if full_history {
                ", every status with a full history (10 entries)"
            } else {
                ""
            },
            ready.as_secs_f64(),
            reconciled.as_secs_f64(),
            rss as f64 / 1024.0
        );
        println!(
            "restart N={n}: peak {peak:.1} MiB (converge {converge_peak:.1} MiB), ready {:.2}s, reconciled {:.2}s, writes {writes}",
            ready.as_secs_f64(),
            reconciled.as_secs_f64()
        );
        ns.cleanup().await;
    }
}

/// Mutating requests the API server has served, except Lease updates (its own heartbeats).
async fn apiserver_writes(client: &Client) -> f64 {
    const MUTATING: [&str; 5] = [
        "verb=\"POST\"",
        "verb=\"PATCH\"",
        "verb=\"PUT\"",
        "verb=\"DELETE\"",
        "verb=\"APPLY\"",
    ];
    apiserver_sum(client, "apiserver_request_total{", |l| {
        MUTATING.iter().any(|v| l.contains(v)) && !l.contains("resource=\"leases\"")
    })
    .await
}

/// Requests the API server has answered 429 so far (API Priority and Fairness rejections).
async fn apiserver_rejected(client: &Client) -> f64 {
    apiserver_sum(
        client,
        "apiserver_flowcontrol_rejected_requests_total{",
        |_| true,
    )
    .await
}

/// The sum of the API server's own series named by `prefix` whose line passes `keep`.
async fn apiserver_sum(client: &Client, prefix: &str, keep: impl Fn(&str) -> bool) -> f64 {
    let text = client
        .request_text(http_get("/metrics"))
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(prefix) && keep(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

/// A ServiceAccount with the operator's own ClusterRole (tdset-operator-core, as the chart
/// renders it into deploy/operator.yaml), and a client and kubeconfig carrying its token.
async fn operator_service_account(
    admin: &Client,
    kubeconfig: &std::path::Path,
) -> (Client, std::path::PathBuf) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let text = std::fs::read_to_string(repo_root().join("deploy/operator.yaml")).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    // The operator's rules: the aggregated core ones and the cluster-wide calendar ones.
    let rules: Vec<serde_json::Value> = ["tdset-operator-core", "tdset-operator-calendars"]
        .iter()
        .flat_map(|name| {
            let role = docs
                .iter()
                .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == *name)
                .unwrap_or_else(|| panic!("{name} in deploy/operator.yaml"));
            role["rules"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    let role = json!({"metadata": {"name": "tdset-bench"}, "rules": rules});
    let role: ClusterRole = serde_json::from_value(role).unwrap();
    let pp = PostParams::default();
    let _ = Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &role)
        .await;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tdset-bench"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tdset-bench"},
        "subjects": [{"kind": "ServiceAccount", "name": "tdset-bench", "namespace": "default"}]
    }))
    .unwrap();
    let _ = Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "tdset-bench"}})).unwrap();
    let _ = Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .create(&pp, &sa)
        .await;
    service_account_client_at(kubeconfig, "default", "tdset-bench").await
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {}, Linux {}",
        mem.replace("MemTotal:", "memory")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        kernel.trim()
    )
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("tdset-bench-{}", std::process::id()));
        // Without kube-controller-manager: no ReplicaSets or pods, only the operator's load.
        let bins = std::path::PathBuf::from(String::from_utf8_lossy(&Command::new(script()).arg("bin-dir").output().unwrap().stdout).trim());
        assert!(bins.join("kube-apiserver").exists(), "run scripts/control-plane.sh install first");
        let out = Command::new(script()).arg("start").arg(&dir).args(["--watch", &std::process::id().to_string()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let kubeconfig = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let client = client_for(&kubeconfig).await;
        for (file, name) in [("crds/tdset.yaml", "tdsets.schedule.rs"), ("crds/tdcalendar.yaml", "tdcalendars.schedule.rs")] {
            let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
            let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
            Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(client.clone())
                .patch(name, &kube::api::PatchParams::apply("bench").force(), &kube::api::Patch::Apply(&crd))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let logs = dir.join("logs");
        let (sa_client, sa_kubeconfig) = operator_service_account(&client, &kubeconfig).await;
        let mut b = Bench { client, kubeconfig, sa_kubeconfig, sa_client, logs, report: String::new() };
        if want("converge") {
            b.converge(100, Form::Owned).await;
            b.converge(1000, Form::Owned).await;
        }
        if want("converge") || want("ref") {
            b.converge(1000, Form::Ref).await;
        }
        if want("lag") {
            b.lag(100, Form::Owned).await;
            b.lag(1000, Form::Owned).await;
        }
        if want("lag10k") {
            b.lag(10_000, Form::Owned).await;
        }
        if want("lag") || want("ref") {
            b.lag(1000, Form::Ref).await;
        }
        if want("shards") {
            let n = std::env::var("TDSET_BENCH_SHARDS_N").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
            b.lag_in_shards(n, Form::Owned, 1).await;
            b.lag_in_shards(n, Form::Owned, 2).await;
        }
        if want("calendar") {
            b.calendar(1000).await;
        }
        if want("writes") {
            b.writes(1000).await;
        }
        if want("steady") {
            let secs = std::env::var("TDSET_BENCH_STEADY_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
            b.steady(1000, secs).await;
        }
        if want("memory") {
            b.memory(1000, 0).await;
            b.memory(10_000, 0).await;
        }
        if want("memory") || want("ref") {
            b.memory(10_000, 10_000).await;
        }
        if want("group") {
            b.group_lag(1000).await;
            b.group_joins(100).await;
            b.group_memory(100, 100).await;
        }
        if want("history") {
            b.restart_with(10_000, true).await;
        }
        if want("memory") || want("restart") {
            b.restart(1000).await;
            b.restart(10_000).await;
        }
        let _ = Command::new(script()).arg("stop").arg(&dir).status();
        let mut md = String::new();
        let _ = writeln!(md, "## Run of {} (`cargo bench --bench operator{}`)\n", Utc::now().format("%Y-%m-%d %H:%M UTC"), if args.is_empty() { String::new() } else { format!(" -- {}", args.join(" ")) });
        let _ = writeln!(md, "Machine: {}. Control plane: etcd 3.6.16 (--unsafe-no-fsync) + kube-apiserver v1.34.4 on the same machine, no controller manager. Operator: release build, separate process; --concurrency 64 as admin for converge, steady and memory; the operator's default flags (concurrency 16) under a ServiceAccount bound to its ClusterRole for the boundary lag. Bench client concurrency {CONCURRENCY}.\n", machine());
        let _ = writeln!(md, "| scenario | size | result | detail |\n|---|---|---|---|\n{}", b.report);
        println!("\n{md}");
        let path = repo_root().join("BENCHMARKS.md");
        let old = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n\nProduced by `cargo bench --bench operator` (see benches/operator.rs); newest run first.\n\n".into());
        let (head, rest) = old.split_once("\n## ").map(|(h, r)| (h.to_string() + "\n", format!("## {r}"))).unwrap_or((old.clone(), String::new()));
        std::fs::write(&path, format!("{head}{md}\n{rest}")).unwrap();
    });
}

/// `n` Deployments `prefix{i}` at `replicas`, labelled `env: bench` and `grp: g{i % groups}`.
fn group_deployments(prefix: &str, n: usize, replicas: i32, groups: usize) -> Vec<Deployment> {
    let mut objs = app_deployments(prefix, n, replicas);
    for (i, d) in objs.iter_mut().enumerate() {
        let labels = d.metadata.labels.get_or_insert_default();
        labels.insert("env".into(), "bench".into());
        labels.insert("grp".into(), format!("g{}", i % groups.max(1)));
    }
    objs
}

/// A group TDSet over `selector` (matchLabels), with `windows` and no defaultReplica (own).
fn group_tdset(name: &str, selector: serde_json::Value, windows: serde_json::Value) -> TDSet {
    tdset(
        name,
        json!({
            "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": selector}},
            "schedulingConfig": windows
        }),
    )
}

/// The group form (issue 21): one TDSet holding N Deployments at a boundary, workloads joining
/// a sleeping group, and 100 groups holding 10 000 workloads in memory.
impl Bench {
    async fn group_lag(&mut self, n: usize) {
        let ns = self.namespace(&format!("grp{n}")).await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        create_all(&deploys, group_deployments("g", n, 1, 1)).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let t = group_tdset(
            "group",
            json!({"env": "bench"}),
            json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
        );
        api.create(&PostParams::default(), &t).await.unwrap();
        let boundary: DateTime<Utc> = "2026-05-01T09:00:00Z".parse().unwrap();
        let lead = Duration::from_secs(if n <= 2000 { 20 } else { 60 });
        let spawned = Utc::now();
        let op = OperatorProcess::start_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some(boundary - chrono::Duration::from_std(lead).unwrap()),
            &self.logs.join(format!("group-lag-{n}.log")),
            &[],
        );
        let boundary_real = spawned + chrono::Duration::from_std(lead).unwrap();
        // The profile of the boundary, and of the direct patches below, for comparison.
        let probes = vec![(op.metrics.clone(), op.child.id())];
        let at_boundary = {
            let (probes, client, logs) = (probes.clone(), self.client.clone(), self.logs.clone());
            let wait = (boundary_real - Utc::now() - chrono::Duration::seconds(3))
                .to_std()
                .unwrap_or_default();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                Snapshot::take(&probes, &client, &logs).await
            })
        };
        let (seen, before) = watch_replicas(
            deploys.clone(),
            n,
            3,
            Some((1, boundary_real)),
            lead + Duration::from_secs(300),
        )
        .await;
        let scaled = Snapshot::take(&probes, &self.client, &self.logs).await;
        let operator_profile = at_boundary.await.unwrap().phase(
            &scaled,
            "boundary - 3 s to the last scale seen",
            n as f64 / 100.0,
        );
        let errors = op.sum("tdset_reconcile_errors_total");
        let lists = op.sum("tdset_reconciles_total");
        op.stop();
        let lags = lags_from(&seen, boundary_real);
        let early = lags.iter().filter(|l| **l < 0.0).count();
        // The floor: the same identity patching the same Deployments, 16 in flight.
        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t0 = Utc::now();
        let before_direct = Snapshot::take(&[], &self.client, &self.logs).await;
        stream::iter((0..n).map(|i| format!("g{i}")))
            .for_each_concurrent(16, |name| {
                let api = sa_deploys.clone();
                async move {
                    api.patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let (direct_seen, _) = watch.await.unwrap();
        let direct_profile = before_direct.phase(
            &Snapshot::take(&[], &self.client, &self.logs).await,
            "direct patches to the last seen",
            n as f64 / 100.0,
        );
        let direct = lags_from(&direct_seen, t0);
        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let ratio = p99 / d99;
        let _ = writeln!(
            self.report,
            "| boundary lag, group form (one TDSet holding N Deployments), as a ServiceAccount | N = {n} | operator p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s; p99 ratio {ratio:.2} (target <= 1.3: {}) | {} of {n} scaled; {before} seen at their own 1 before the boundary; {early} scaled early; reconciles {lists:.0}; reconcile errors {errors:.0}; profile: {operator_profile}; {direct_profile} |",
            if ratio <= 1.3 { "met" } else { "MISSED" },
            seen.len(),
        );
        println!("profile: {operator_profile}; {direct_profile}");
        println!(
            "group lag N={n}: p50 {p50:.3} p99 {p99:.3}; direct p99 {d99:.3}; ratio {ratio:.2}; early {early}; errors {errors}"
        );
        ns.cleanup().await;
    }

    /// Workloads created with a sleeping group's labels: from each create to its Deployment at
    /// the group's 0.
    async fn group_joins(&mut self, n: usize) {
        let ns = self.namespace(&format!("join{n}")).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let t = group_tdset(
            "group",
            json!({"env": "bench"}),
            json!([{"startTime": "00:00", "endTime": "23:59", "replica": 0}]),
        );
        api.create(&PostParams::default(), &t).await.unwrap();
        let op = OperatorProcess::start_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some("2026-05-01T12:00:00Z".parse().unwrap()),
            &self.logs.join(format!("group-joins-{n}.log")),
            &[],
        );
        all_where(api.clone(), 1, |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| s.group.is_some())
        })
        .await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            0,
            None,
            Duration::from_secs(300),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        // One at a time, a quarter second apart: joins as they happen, not a storm.
        let mut created = HashMap::new();
        for d in group_deployments("j", n, 2, 1) {
            let name = d.name_any();
            created.insert(name, Utc::now());
            deploys.create(&PostParams::default(), &d).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let (seen, _) = watch.await.unwrap();
        let errors = op.sum("tdset_reconcile_errors_total");
        op.stop();
        let mut lat: Vec<f64> = seen
            .iter()
            .filter_map(|(name, at)| {
                Some((*at - *created.get(name)?).num_microseconds()? as f64 / 1e6)
            })
            .collect();
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (p50, p99, max) = summary(&lat);
        let _ = writeln!(
            self.report,
            "| joining a sleeping group (created with its labels, 4 a second) | N = {n} | create to asleep p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s | {} of {n} put to sleep; reconcile errors {errors:.0} |",
            seen.len()
        );
        println!("group joins N={n}: p50 {p50:.3} p99 {p99:.3} max {max:.3}");
        ns.cleanup().await;
    }

    /// 100 group TDSets holding 100 Deployments each: peak RSS converging (every workload put
    /// to sleep) and restarted against them.
    async fn group_memory(&mut self, groups: usize, per: usize) {
        let n = groups * per;
        let ns = self.namespace(&format!("grpmem{n}")).await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        create_all(&deploys, group_deployments("m", n, 1, groups)).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..groups)
            .map(|g| {
                group_tdset(
                    &format!("group{g}"),
                    json!({"grp": format!("g{g}")}),
                    json!([{"startTime": "00:00", "endTime": "23:59", "replica": 0}]),
                )
            })
            .collect();
        create_all(&api, objs).await;
        let at = Some("2026-05-01T12:00:00Z".parse().unwrap());
        let started = std::time::Instant::now();
        let first = OperatorProcess::start_with(
            &self.kubeconfig,
            Some(&ns.name),
            at,
            &self.logs.join(format!("group-memory-{n}.log")),
            &[],
        );
        all_where(deploys.clone(), n, |d: &Deployment| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(0)
        })
        .await;
        let converged = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let converge_peak = first.proc_status("VmHWM:") as f64 / 1024.0;
        first.stop();
        let started = std::time::Instant::now();
        let op = OperatorProcess::start_with(
            &self.kubeconfig,
            Some(&ns.name),
            at,
            &self.logs.join(format!("group-restart-{n}.log")),
            &[],
        );
        while op.sum("tdset_reconciles_total") < groups as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let peak = op.proc_status("VmHWM:") as f64 / 1024.0;
        let writes = op.sum("tdset_api_writes_total");
        op.stop();
        let verdict = |p: f64| if p < 100.0 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| group memory | {groups} group TDSets holding {per} Deployments each (N = {n}) | peak RSS converging {converge_peak:.1} MiB (target < 100 MiB: {}), restarted {peak:.1} MiB (target < 100 MiB: {}) | every workload asleep {:.1} s after the start; restarted: each group reconciled after {:.2} s, {writes:.0} writes |",
            verdict(converge_peak),
            verdict(peak),
            converged.as_secs_f64(),
            reconciled.as_secs_f64(),
        );
        println!(
            "group memory N={n}: converge {converge_peak:.1} MiB in {:.1}s, restart {peak:.1} MiB, writes {writes}",
            converged.as_secs_f64()
        );
        ns.cleanup().await;
    }
}
