//! Asleep when idle (`spec.idle`) at scale: N TDSets over `services` Services share one query
//! to a real Prometheus (Debian's, scraping an application counter per Service that nobody
//! calls); what it costs while they are quiet (queries, reconciles, writes, CPU, memory), and
//! how long after its `sleepsAt` each is asleep.

use std::io::{Read, Write as _};
use std::process::{Child, Stdio};

use super::*;

/// `app_requests_total{namespace, service}` for `services` Services, constant: nobody comes.
fn exporter(ns: &str, services: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut page = String::from("# TYPE app_requests_total counter\n");
    for i in 0..services {
        let _ = writeln!(
            page,
            "app_requests_total{{namespace=\"{ns}\",service=\"s{i}\"}} 7"
        );
    }
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    addr
}

/// Debian's Prometheus scraping `target` every 5 s; its URL, and the process.
fn prometheus(target: &str, dir: &std::path::Path) -> (String, Child) {
    std::fs::create_dir_all(dir).unwrap();
    let config = json!({
        "global": {"scrape_interval": "5s"},
        "scrape_configs": [{"job_name": "app", "static_configs": [{"targets": [target]}]}]
    });
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config.to_string()).unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (apt-get install prometheus)");
    (format!("http://127.0.0.1:{port}"), child)
}

/// What Prometheus counted of the instant queries it answered.
fn queries_answered(url: &str) -> f64 {
    let out = Command::new("curl")
        .args(["-sf", "-m", "5", &format!("{url}/metrics")])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.starts_with("prometheus_http_requests_total{")
                && l.contains("handler=\"/api/v1/query\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Bench {
    pub(crate) async fn idle(&mut self, n: usize, services: usize) {
        let ns = self.namespace("idle").await;
        let target = exporter(&ns.name, services);
        let dir = std::env::temp_dir().join(format!("tdset-bench-prom-{}", std::process::id()));
        let (url, mut prom) = prometheus(&target, &dir);
        let every = 10u64;
        let op = operator_with(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join("idle.log"),
            &[
                "--prometheus-url",
                &url,
                "--idle-read-interval",
                &every.to_string(),
            ],
        );
        let query = "sum by (namespace, service) (rate(app_requests_total[1m]))";
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                let mut t = bench_tdset(Form::Owned, &format!("t{i}"), json!([]), 1);
                t.spec.idle = Some(
                    serde_json::from_value(json!({
                        "after": "3m", "during": "OutsideWindows",
                        "signals": [{"prometheus": {"query": query, "service": format!("s{}", i % services)}}]
                    }))
                    .unwrap(),
                );
                t
            })
            .collect();
        create_all(&api, objs).await;
        self.converged(&ns.name, n, 1).await;
        // Every TDSet Quiet: what it costs while nothing changes, over three intervals.
        let quiet = all_where(api.clone(), n, |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.idle.as_ref())
                .is_some_and(|i| i.phase == tdset_operator::api::IdlePhase::Quiet)
        });
        quiet.await;
        let window = Duration::from_secs(every * 3);
        let (q0, r0, w0, cpu0, p0) = (
            op.metric("tdset_idle_queries_total"),
            op.metric("tdset_reconciles_total"),
            op.metric("tdset_api_writes_total"),
            op.cpu_seconds(),
            queries_answered(&url),
        );
        tokio::time::sleep(window).await;
        let (q1, r1, w1, cpu1, p1) = (
            op.metric("tdset_idle_queries_total"),
            op.metric("tdset_reconciles_total"),
            op.metric("tdset_api_writes_total"),
            op.cpu_seconds(),
            queries_answered(&url),
        );
        let rss = op.proc_status("VmHWM:") as f64 / 1024.0;
        let query_secs = op.metric("tdset_idle_query_duration_seconds_sum")
            / op.metric("tdset_idle_query_duration_seconds_count")
                .max(1.0);
        // Then asleep: each Deployment at 0, measured against its own sleepsAt.
        let list = api.list(&ListParams::default()).await.unwrap();
        let sleeps: HashMap<String, DateTime<Utc>> = list
            .items
            .iter()
            .filter_map(|t| {
                let at = t.status.as_ref()?.idle.as_ref()?.sleeps_at.as_deref()?;
                Some((
                    t.name_any(),
                    DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc),
                ))
            })
            .collect();
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let lags = asleep_lags(&deployments, &sleeps, n).await;
        op.stop();
        let _ = prom.kill();
        let _ = prom.wait();
        let _ = std::fs::remove_dir_all(&dir);
        let intervals = window.as_secs_f64() / every as f64;
        let per_interval = (q1 - q0) / intervals;
        let verdict = if (per_interval - 1.0).abs() < 0.5 {
            "met"
        } else {
            "MISSED"
        };
        let (p50, p99) = (percentile(&lags, 0.5), percentile(&lags, 0.99));
        let lag_verdict = if p99 <= every as f64 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| idle: N TDSets quiet over {services} Services, one query | N = {n} | {per_interval:.1} queries per {every} s interval (target 1: {verdict}; Prometheus answered {:.0} in {:.0} s); {:.0} reconciles and {:.0} writes in {:.0} s while quiet; operator {:.2} CPU s ({:.2}% of a core), peak RSS {rss:.0} MiB; a query {:.0} ms | asleep after sleepsAt p50 {p50:.1} s, p99 {p99:.1} s (target within one interval, {every} s: {lag_verdict}); {} of {n} seen asleep |",
            p1 - p0,
            window.as_secs_f64(),
            r1 - r0,
            w1 - w0,
            window.as_secs_f64(),
            cpu1 - cpu0,
            (cpu1 - cpu0) / window.as_secs_f64() * 100.0,
            query_secs * 1000.0,
            lags.len(),
        );
        println!(
            "idle N={n}: {per_interval:.1} queries/interval, reconciles {}, writes {}, cpu {:.2}s, rss {rss:.0} MiB, lag p50 {p50:.1} p99 {p99:.1}",
            r1 - r0,
            w1 - w0,
            cpu1 - cpu0
        );
        ns.cleanup().await;
    }
}

/// For each Deployment, seconds from its TDSet's `sleepsAt` to when it was seen at 0 (watched).
async fn asleep_lags(
    deployments: &Api<Deployment>,
    sleeps: &HashMap<String, DateTime<Utc>>,
    n: usize,
) -> Vec<f64> {
    let mut lags = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    let stream = watcher(deployments.clone(), watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while seen.len() < n {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let Ok(Some(Ok(d))) = next else { break };
        if d.spec.as_ref().and_then(|s| s.replicas) == Some(0) && seen.insert(d.name_any()) {
            if let Some(at) = sleeps.get(&d.name_any()) {
                lags.push((Utc::now() - *at).num_milliseconds() as f64 / 1000.0);
            }
        }
    }
    lags
}

fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}
