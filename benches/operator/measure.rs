//! What a run measures: CPU of the operator and the control plane, snapshots of the API
//! server's counters, lags and their quantiles, the machine it ran on.

use super::*;

/// user+system CPU seconds of a process so far.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
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
pub(crate) fn control_plane_cpu(logs: &std::path::Path) -> f64 {
    ["kube-apiserver", "etcd"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(logs.with_file_name("pids").join(p)).ok())
        .filter_map(|pid| pid.trim().parse().ok())
        .map(cpu_seconds)
        .sum()
}

/// What the operators, the control plane's processes and the API server had done by an
/// instant; a phase of a boundary is the difference of two (the profile issue 25 asks for).
pub(crate) struct Snapshot {
    pub(crate) at: std::time::Instant,
    pub(crate) op_cpu: f64,
    pub(crate) cp_cpu: f64,
    pub(crate) reconciles: f64,
    /// "VERB resource[/subresource]" -> (requests, seconds the API server spent on them).
    pub(crate) requests: HashMap<String, (f64, f64)>,
}

impl Snapshot {
    /// `ops`: each operator's metrics address and pid.
    pub(crate) async fn take(
        ops: &[(String, u32)],
        client: &Client,
        logs: &std::path::Path,
    ) -> Snapshot {
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

    /// A snapshot taken `before` the real instant `at`, in the background: the start of a
    /// boundary's profile, taken while the caller watches for the boundary.
    pub(crate) fn ahead_of(
        at: DateTime<Utc>,
        before: Duration,
        ops: &[(String, u32)],
        client: &Client,
        logs: &std::path::Path,
    ) -> tokio::task::JoinHandle<Snapshot> {
        let (ops, client, logs) = (ops.to_vec(), client.clone(), logs.to_path_buf());
        let wait = (at - Utc::now() - chrono::Duration::from_std(before).unwrap_or_default())
            .to_std()
            .unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            Snapshot::take(&ops, &client, &logs).await
        })
    }

    /// The phase from `self` to `later`, one line: its length, CPU, reconciles, and the API
    /// requests made more than `min` times, with the API server's mean time per request.
    pub(crate) fn phase(&self, later: &Snapshot, name: &str, min: f64) -> String {
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
    pub(crate) fn count(&self, later: &Snapshot, key: &str) -> f64 {
        later.requests.get(key).map_or(0.0, |r| r.0) - self.requests.get(key).map_or(0.0, |r| r.0)
    }
}

pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

pub(crate) fn summary(sorted: &[f64]) -> (f64, f64, f64) {
    (
        quantile(sorted, 0.5),
        quantile(sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN),
    )
}

/// Seconds from `from` to each instant, sorted.
pub(crate) fn lags_from(seen: &HashMap<String, DateTime<Utc>>, from: DateTime<Utc>) -> Vec<f64> {
    let mut lags: Vec<f64> = seen
        .values()
        .map(|t| (*t - from).num_microseconds().unwrap_or(0) as f64 / 1e6)
        .collect();
    lags.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lags
}

/// Watches Deployments until `n` have been seen at `replicas`; returns when each was first
/// seen so, and how many were seen at `before.0` replicas before the instant `before.1`.
pub(crate) async fn watch_replicas(
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

/// Mutating requests the API server has served, except Lease updates (its own heartbeats).
pub(crate) async fn apiserver_writes(client: &Client) -> f64 {
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
pub(crate) async fn apiserver_rejected(client: &Client) -> f64 {
    apiserver_sum(
        client,
        "apiserver_flowcontrol_rejected_requests_total{",
        |_| true,
    )
    .await
}

/// The sum of the API server's own series named by `prefix` whose line passes `keep`.
pub(crate) async fn apiserver_sum(
    client: &Client,
    prefix: &str,
    keep: impl Fn(&str) -> bool,
) -> f64 {
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

pub(crate) fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

pub(crate) fn machine() -> String {
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

/// What the bench reads of an operator process besides its metrics.
pub(crate) trait Measured {
    /// A `/proc/<pid>/status` field in kB (`VmHWM:`, `VmRSS:`).
    fn proc_status(&self, key: &str) -> u64;
    /// user+system CPU seconds so far.
    fn cpu_seconds(&self) -> f64;
    /// `tdset_api_writes_total` per `resource verb`, e.g. "deployments create 1000".
    fn writes_by_kind(&self) -> String;
    /// SIGTERM, and wait for it to exit.
    fn stop(self);
}

impl Measured for OperatorProcess {
    fn proc_status(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    }

    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid())
    }

    fn writes_by_kind(&self) -> String {
        self.get("/metrics")
            .map(|(_, body)| body)
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

    fn stop(self) {
        self.sigterm();
    }
}
