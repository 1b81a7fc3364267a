//! The one operator launcher: in-process (`Operator`) or as the built binary
//! (`OperatorProcess`, for tests and benchmarks that kill, scrape or measure it), and the
//! `kubectl tdset` plugin.

use super::*;

/// The operator, in-process, watching one namespace with an injected clock.
pub struct Operator {
    pub metrics: std::sync::Arc<tdset_operator::telemetry::Metrics>,
    pub health: std::sync::Arc<tdset_operator::http::Health>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<tdset_operator::Result<()>>>,
}

impl Operator {
    pub fn start(
        client: &Client,
        namespace: &str,
        clock: tdset_operator::clock::SystemClock,
        lease: Option<tdset_operator::controller::LeaseOptions>,
        instance: &str,
    ) -> Operator {
        Self::start_with(client, Some(namespace), clock, lease, instance)
    }

    /// `namespace: None` watches all namespaces, as the deployed operator does.
    pub fn start_with(
        client: &Client,
        namespace: Option<&str>,
        clock: tdset_operator::clock::SystemClock,
        lease: Option<tdset_operator::controller::LeaseOptions>,
        instance: &str,
    ) -> Operator {
        Operator::launch(client, clock, lease, Operator::options(namespace, instance))
    }

    /// Watching one namespace, with `container`/`template` allowed only where `pod_forms` says.
    pub fn start_allowing(
        client: &Client,
        ns: &str,
        clock: tdset_operator::clock::SystemClock,
        pod_forms: &str,
    ) -> Operator {
        let opts = tdset_operator::controller::RunOptions {
            pod_forms: pod_forms.parse().expect("a --pod-forms-in value"),
            ..Operator::options(Some(ns), "test")
        };
        Operator::launch(client, clock, None, opts)
    }

    /// Watching one namespace, and writing every TDCalendar's usage as if it saw every TDSet
    /// (the deployed operator does when it watches all namespaces).
    pub fn start_reporting_calendars(
        client: &Client,
        ns: &str,
        clock: tdset_operator::clock::SystemClock,
    ) -> Operator {
        let opts = tdset_operator::controller::RunOptions {
            report_calendar_usage: true,
            ..Operator::options(Some(ns), "test")
        };
        Operator::launch(client, clock, None, opts)
    }

    /// Watching one namespace, with the options `configure` sets (the flags of the binary:
    /// `group_max_workloads` is `--group-max-workloads`, `group_form` `--group-form-in`).
    pub fn start_configured(
        client: &Client,
        ns: &str,
        clock: tdset_operator::clock::SystemClock,
        configure: impl FnOnce(&mut tdset_operator::controller::RunOptions),
    ) -> Operator {
        let mut opts = Operator::options(Some(ns), "test");
        configure(&mut opts);
        Operator::launch(client, clock, None, opts)
    }

    /// The options the binary runs with by default, watching `namespace` (all: `None`).
    fn options(namespace: Option<&str>, instance: &str) -> tdset_operator::controller::RunOptions {
        tdset_operator::controller::RunOptions {
            namespace: namespace.map(str::to_string),
            concurrency: 8,
            instance: instance.to_string(),
            initial_list: tdset_operator::controller::InitialList::Auto,
            pod_forms: Default::default(),
            group_form: Default::default(),
            group_max_workloads: 2000,
            report_calendar_usage: namespace.is_none(),
            shard: None,
            wake_proxy: None,
            traffic: None,
        }
    }

    fn launch(
        client: &Client,
        clock: tdset_operator::clock::SystemClock,
        lease: Option<tdset_operator::controller::LeaseOptions>,
        opts: tdset_operator::controller::RunOptions,
    ) -> Operator {
        use std::sync::Arc;
        install_test_log();
        let metrics = Arc::new(tdset_operator::telemetry::Metrics::new().expect("metrics"));
        let health = Arc::new(tdset_operator::http::Health::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(tdset_operator::controller::run(
            tdset_operator::controller::Clients::same(client.clone()),
            opts,
            lease,
            Arc::new(clock),
            metrics.clone(),
            health.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Operator {
            metrics,
            health,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Graceful stop: in-flight reconciles finish, a held lease is released.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("operator task panicked")
                .expect("operator returned an error");
        }
    }

    /// Abrupt stop, as when the process dies: nothing is released.
    pub fn kill(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// Write requests this operator sent (from its `tdset_api_writes_total`).
    pub fn writes(&self) -> u64 {
        self.counter("tdset_api_writes_total") as u64
    }

    /// `writes` once the bookkeeping lane has sent everything queued (statuses and Events are
    /// counted when sent, which may be after the status a test waited for): the baseline for
    /// "nothing more is written".
    pub async fn writes_when_idle(&self) -> u64 {
        eventually(
            std::time::Duration::from_secs(120),
            "the bookkeeping lane empty",
            || async { (self.counter("tdset_bookkeeping_pending") == 0.0).then_some(()) },
        )
        .await;
        self.writes()
    }

    /// Reconciles run so far, once none has run for six seconds: those a change woke are
    /// done, those it woke a moment later too (the groups that only count a workload wait
    /// five). A baseline for "this change woke so many".
    pub async fn reconciles_when_quiet(&self) -> f64 {
        let last = std::cell::Cell::new(-1.0);
        eventually(
            Duration::from_secs(120),
            "no reconcile for six seconds",
            || {
                let last = &last;
                async move {
                    tokio::time::sleep(Duration::from_secs(6)).await;
                    let now = self.counter("tdset_reconciles_total");
                    (now == last.replace(now)).then_some(now)
                }
            },
        )
        .await
    }

    /// Counter `name` once it has reached `at_least`: the operator records what it measured
    /// of a write (its lag, the write itself) after the write returns, so a test that has
    /// seen the write may read the counter before it is counted. Waits up to GUARD; the
    /// value it returns is still asserted on (it may have gone past `at_least`).
    pub async fn counter_once_at_least(&self, name: &str, at_least: f64) -> f64 {
        eventually(GUARD, &format!("{name} at least {at_least}"), || async {
            let v = self.counter(name);
            (v >= at_least).then_some(v)
        })
        .await
    }

    pub fn counter(&self, name: &str) -> f64 {
        let text = self.metrics.render();
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            // An empty f64 sum is -0.0, which would print as "-0".
            + 0.0
    }
}

/// The operator as a real process (the built binary), for tests that kill it or scrape it.
/// Its output goes to a log file in the temp dir.
pub struct OperatorProcess {
    child: std::process::Child,
    pub addr: String,
    /// Where its output goes.
    pub log: PathBuf,
    /// The longest a request to its HTTP endpoints may take (`curl -m`).
    scrape_timeout: Duration,
}

/// How the built binary is started (`tdset-operator run`, or another of its commands).
pub struct Launch<'a> {
    /// `run` (the operator) or `wake-proxy`.
    pub command: &'a str,
    pub kubeconfig: &'a Path,
    /// The namespace it watches; `None`: all of them, as deployed.
    pub namespace: Option<&'a str>,
    /// Where its output goes.
    pub log: PathBuf,
    pub log_level: String,
    /// Its clock reads this instant when it starts (`TDSET_FAKE_NOW`), then runs at real speed.
    pub fake_now: Option<chrono::DateTime<chrono::Utc>>,
    /// More flags for `tdset-operator run`.
    pub extra: &'a [&'a str],
    /// A command the binary runs under (a profiler: `heaptrack -o /tmp/ht`).
    pub wrap: Option<String>,
    /// The longest a request to its HTTP endpoints may take: short for a test that probes a
    /// process it may have killed, long for a benchmark reading a large `/metrics`.
    pub scrape_timeout: Duration,
}

impl<'a> Launch<'a> {
    /// The binary against `kubeconfig`'s cluster, all namespaces, logging at info (or
    /// `TDSET_TEST_OPERATOR_LOG`) to `log` (beside the test's own log, `process_log`).
    pub fn new(kubeconfig: &'a Path, log: &str) -> Launch<'a> {
        Launch {
            command: "run",
            kubeconfig,
            namespace: None,
            log: process_log(log),
            log_level: std::env::var("TDSET_TEST_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
            fake_now: None,
            extra: &[],
            wrap: None,
            scrape_timeout: Duration::from_secs(2),
        }
    }
}

impl OperatorProcess {
    /// The binary watching `ns`, with `extra` flags; its output in `log` (in the temp dir).
    pub fn start(kubeconfig: &Path, ns: &str, extra: &[&str], log: &str) -> OperatorProcess {
        OperatorProcess::launch(Launch {
            namespace: Some(ns),
            extra,
            ..Launch::new(kubeconfig, log)
        })
    }

    pub fn launch(l: Launch<'_>) -> OperatorProcess {
        let port = free_port();
        let log = std::fs::File::create(&l.log).unwrap();
        let mut wrap = l.wrap.as_deref().unwrap_or_default().split_whitespace();
        let mut cmd = match wrap.next() {
            Some(tool) => {
                let mut c = Command::new(tool);
                c.args(wrap).arg(env!("CARGO_BIN_EXE_tdset-operator"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tdset-operator")),
        };
        cmd.args([l.command, "--kubeconfig", l.kubeconfig.to_str().unwrap()])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--log-level", &l.log_level]);
        if let Some(ns) = l.namespace {
            cmd.args(["--namespace", ns]);
        }
        if let Some(t) = l.fake_now {
            cmd.env("TDSET_FAKE_NOW", t.to_rfc3339());
        }
        let child = cmd
            .args(l.extra)
            .stdout(std::process::Stdio::from(log.try_clone().unwrap()))
            .stderr(std::process::Stdio::from(log))
            .spawn()
            .unwrap();
        OperatorProcess {
            child,
            addr: format!("http://127.0.0.1:{port}"),
            log: l.log.clone(),
            scrape_timeout: l.scrape_timeout,
        }
    }

    /// Waits until `/readyz` says ready (its caches hold a full list), for at most `limit`
    /// (which only stops a hung run).
    pub fn wait_ready(&self, limit: Duration, log: &Path) {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if self
                .get("/readyz")
                .is_some_and(|(code, body)| code == 200 && body.starts_with("ready"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("operator did not become ready; log: {}", log.display());
    }

    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let out = Command::new("curl")
            .args([
                "-s",
                "-m",
                &self.scrape_timeout.as_secs().to_string(),
                "-w",
                "\n%{http_code}",
                &format!("{}{path}", self.addr),
            ])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n')?;
        Some((code.parse().ok()?, body.to_string()))
    }

    pub fn metric(&self, name: &str) -> f64 {
        self.get("/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            // An empty f64 sum is -0.0, which would print as "-0".
            + 0.0
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn sigkill(self) {
        drop(self);
    }

    /// Sends SIGTERM and returns at once (the process stops as it chooses).
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    pub fn sigterm(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

/// A test that fails must not leave its operator running.
impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory holding `kubectl-tdset` -> the built binary.
pub fn plugin_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tdset-plugin-{}", unique_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_tdset-operator"),
        dir.join("kubectl-tdset"),
    )
    .unwrap();
    dir
}

/// `kubectl tdset ARGS`: (success, stdout, stderr).
pub fn kubectl_tdset(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(kubectl_path())
        .env("PATH", path)
        .env("KUBECONFIG", &control_plane().kubeconfig)
        .arg("tdset")
        .args(args)
        .output()
        .expect("running kubectl tdset");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}
