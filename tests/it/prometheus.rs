//! The operator's metrics and alerts with the real thing: Debian's Prometheus scrapes the built
//! operator and evaluates deploy/prometheus/tdset-operator.rules.yaml, promtool lints the
//! /metrics page, checks the rules and runs their unit tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

const GUARD: Duration = Duration::from_secs(120);

fn rules_dir() -> PathBuf {
    repo_root().join("deploy/prometheus")
}

/// A program of Debian's prometheus package (scripts/test.sh installs it when missing).
fn prometheus_tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{name} is not installed: apt-get install prometheus (scripts/test.sh does it)"
    );
    Command::new(name)
}

/// How many alerts the rules file defines.
fn alert_count() -> usize {
    std::fs::read_to_string(rules_dir().join("tdset-operator.rules.yaml"))
        .unwrap()
        .matches("- alert: ")
        .count()
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let out = prometheus_tool("promtool")
        .args(["check", "rules", "tdset-operator.rules.yaml"])
        .current_dir(rules_dir())
        .output()
        .unwrap();
    let text = succeeded("promtool check rules", out);
    let n = alert_count();
    assert!(
        text.contains(&format!("SUCCESS: {n} rules found")),
        "{text}"
    );
    let out = prometheus_tool("promtool")
        .args(["test", "rules", "tdset-operator.rules.test.yaml"])
        .current_dir(rules_dir())
        .output()
        .unwrap();
    succeeded("promtool test rules", out);
}

/// Prometheus on 127.0.0.1 scraping one target every second and evaluating the alert rules,
/// its state in a temp dir; stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("tdset-prometheus-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = rules_dir().join("tdset-operator.rules.yaml");
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [rules],
            "scrape_configs": [{
                "job_name": "tdset-operator-metrics",
                "static_configs": [{"targets": [target]}]
            }]
        });
        // JSON is YAML: no YAML writer needed.
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let port = free_port();
        // Beside the test's own log (kept when the test fails).
        let log_path = process_log("prometheus");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = prometheus_tool("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting prometheus");
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
            log: log_path,
        }
    }

    fn get(&self, path: &str, query: Option<&str>) -> Option<Value> {
        match query {
            Some(q) => self.get_params(path, &[("query", q)]),
            None => self.get_params(path, &[]),
        }
    }

    /// A GET with URL-encoded parameters.
    fn get_params(&self, path: &str, params: &[(&str, &str)]) -> Option<Value> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sf", "-m", "2", "-G"]);
        for (k, v) in params {
            cmd.args(["--data-urlencode", &format!("{k}={v}")]);
        }
        let out = cmd.arg(format!("{}{path}", self.url)).output().ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The value of an instant query that returns one series.
    fn value(&self, query: &str) -> Option<f64> {
        let v = self.get("/api/v1/query", Some(query))?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        if log_dir().is_none() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

fn promtool_check_metrics(page: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = prometheus_tool("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn prometheus_scrapes_the_operator_and_evaluates_the_alerts_on_it() {
    let (client, ns) = setup("prom").await;
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "web",
            json!({"container": {"image": "nginx", "port": 80},
                   "schedulingConfig": [{"startTime": 0, "endTime": 12, "replica": 3},
                                        {"startTime": 12, "endTime": 0, "replica": 3}],
                   "defaultReplica": 1}),
        ),
    )
    .await;
    let kubeconfig: &Path = &control_plane().kubeconfig;
    let op = OperatorProcess::start(kubeconfig, &ns.name, &[], "prometheus-operator.log");

    // The page Prometheus will read passes promtool's lint (names, types, help texts).
    let page = eventually(GUARD, "the TDSet on /metrics", || async {
        let (_, body) = op.get("/metrics")?;
        body.contains("tdset_desired_replicas{").then_some(body)
    })
    .await;
    succeeded("promtool check metrics", promtool_check_metrics(&page));

    let target = op.addr.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&target);
    let up = format!(r#"up{{job="tdset-operator-metrics", instance="{target}"}}"#);
    eventually(
        GUARD,
        "Prometheus scraped the operator (up == 1)",
        || async { (prom.value(&up) == Some(1.0)).then_some(()) },
    )
    .await;
    let of = |metric: &str, extra: &str| {
        format!(r#"{metric}{{namespace="{}", name="web"{extra}}}"#, ns.name)
    };
    eventually(
        GUARD,
        "tdset_desired_replicas == 3 in Prometheus",
        || async { (prom.value(&of("tdset_desired_replicas", "")) == Some(3.0)).then_some(()) },
    )
    .await;
    let available = of(
        "tdset_status_condition",
        r#", type="Available", status="true""#,
    );
    eventually(GUARD, "Available=True in Prometheus", || async {
        (prom.value(&available) == Some(1.0)).then_some(())
    })
    .await;
    eventually(GUARD, "ready replicas == 3 in Prometheus", || async {
        (prom.value(&of("tdset_ready_replicas", "")) == Some(3.0)).then_some(())
    })
    .await;

    // Every alert rule loaded and evaluated without error against the real series.
    let rules = eventually(GUARD, "all alert rules evaluated", || async {
        let v = prom.get("/api/v1/rules", None)?;
        let rules: Vec<Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = rules.len() == alert_count()
            && rules.iter().all(|r| {
                !r["lastEvaluation"]
                    .as_str()
                    .unwrap_or("0001")
                    .starts_with("0001")
            });
        evaluated.then_some(rules)
    })
    .await;
    for r in &rules {
        assert_eq!(r["health"], json!("ok"), "{r}\n{}", prom.log());
    }
    // A healthy operator raises none of the alerts that would page someone. (Before the first
    // scrape, TDSetOperatorDown is briefly pending: the rules were evaluated with no `up` yet.)
    let quiet = [
        "TDSetOperatorDown",
        "TDSetNoLeader",
        "TDSetShardHandoverStuck",
        "TDSetDegraded",
        "TDSetTransitionOverdue",
        "TDSetScaleUpsLate",
    ];
    eventually(GUARD, "no paging alert pending or firing", || async {
        let alerts = prom.get("/api/v1/alerts", None)?;
        let raised = alerts["data"]["alerts"]
            .as_array()?
            .iter()
            .filter_map(|a| a["labels"]["alertname"].as_str())
            .any(|name| quiet.contains(&name));
        (!raised).then_some(())
    })
    .await;

    // The PromQL answers of docs/observability.md are valid queries on this data.
    let page = std::fs::read_to_string(repo_root().join("docs/observability.md")).unwrap();
    let block = page
        .split("```promql\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a promql block in docs/observability.md");
    let queries: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert!(queries.len() >= 6, "{queries:?}");
    for q in queries {
        let v = prom.get("/api/v1/query", Some(q));
        assert_eq!(
            v.as_ref().map(|v| v["status"].clone()),
            Some(json!("success")),
            "docs/observability.md query {q}: {v:?}"
        );
    }
    // "Which TDSets are degraded?": none here. "Is an instance leading?": this one.
    assert_eq!(prom.value("sum(tdset_leader)"), Some(1.0));
    drop(prom);
    drop(op);
    ns.cleanup().await;
}

#[tokio::test]
async fn operator_down_is_what_prometheus_sees_when_the_operator_stops() {
    let (_client, ns) = setup("prom-down").await;
    let op = OperatorProcess::start(
        &control_plane().kubeconfig,
        &ns.name,
        &[],
        "prometheus-down.log",
    );
    let target = op.addr.trim_start_matches("http://").to_string();
    eventually(GUARD, "the operator serving /metrics", || async {
        op.get("/metrics").map(|_| ())
    })
    .await;
    let prom = Prometheus::start(&target);
    let up = format!(r#"up{{job="tdset-operator-metrics", instance="{target}"}}"#);
    eventually(GUARD, "up == 1", || async {
        (prom.value(&up) == Some(1.0)).then_some(())
    })
    .await;
    // The operator goes away: the rules file's TDSetOperatorDown turns pending (it fires after
    // its `for` of 5 minutes).
    op.sigkill();
    let pending = eventually(GUARD, "TDSetOperatorDown pending", || async {
        let v = prom.get("/api/v1/alerts", None)?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "TDSetOperatorDown")
            .cloned()
    })
    .await;
    assert_eq!(pending["state"], json!("pending"), "{pending}");
    ns.cleanup().await;
}

/// The shipped Grafana dashboard.
fn dashboard() -> Value {
    let path = repo_root().join("deploy/grafana/tdset-operator.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard's JSON")
}

/// The panels, rows left out.
fn panels(d: &Value) -> Vec<&Value> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

#[test]
fn the_dashboard_is_well_formed() {
    let d = dashboard();
    let all = d["panels"].as_array().unwrap();
    let ids: std::collections::BTreeSet<_> =
        all.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), all.len(), "panel ids are unique");
    // No two panels cover the same cell of the 24-column grid.
    let mut cells = std::collections::BTreeMap::new();
    for p in all {
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_i64().unwrap(),
            g["y"].as_i64().unwrap(),
            g["w"].as_i64().unwrap(),
            g["h"].as_i64().unwrap(),
        );
        assert!(
            x >= 0 && w > 0 && x + w <= 24,
            "{} outside the grid",
            p["title"]
        );
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), p["title"].clone()) {
                    panic!("{} overlaps {other}", p["title"]);
                }
            }
        }
    }
    // The datasource is chosen when importing (a variable), never a fixed name.
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus datasource variable"
    );
    let ours = json!({"type": "prometheus", "uid": "${datasource}"});
    for p in panels(&d) {
        assert_eq!(p["datasource"], ours, "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has a query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"], ours, "{}", p["title"]);
        }
    }
    for v in vars.iter().filter(|v| v["type"] == "query") {
        assert_eq!(v["datasource"], ours, "variable {}", v["name"]);
    }
}

/// A dashboard query with its variables given values, as Grafana sends it.
fn substituted(query: &str, values: &[(&str, &str)]) -> String {
    let mut q = query.to_string();
    // Longest first: `$__rate_interval` before anything it starts like.
    let mut values = values.to_vec();
    values.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    for (k, v) in values {
        q = q.replace(&format!("${k}"), v);
    }
    assert!(!q.contains('$'), "a variable left in {q}");
    q
}

/// The labels a legend names (`{{namespace}}/{{name}}`).
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split("}}").next())
        .map(|s| s.trim().to_string())
        .collect()
}

/// Every panel's and every variable's query of the shipped dashboard, evaluated on a real
/// Prometheus scraping the operator (run as a shard) after it crossed a boundary, with a
/// TDSet asleep, one conflicting with another and one with warmUp: each parses, returns
/// series, and every label its legend names is on every series. A metric renamed in the
/// code, or a label, fails here.
#[tokio::test]
async fn every_dashboard_query_returns_the_series_it_shows() {
    let (client, ns) = setup("prom-dash").await;
    let n = &ns.name;
    let mine = |mut t: tdset_operator::api::TDSet| {
        t.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        t
    };
    // Crosses noon (the operator's clock starts at 11:59:50): 1 -> 3.
    create_tdset(
        &client,
        n,
        &mine(tdset(
            "web",
            json!({
        "container": {"image": "nginx", "port": 80},
        "schedulingConfig": [{"startTime": 12, "endTime": 13, "replica": 3}],
        "defaultReplica": 1}),
        )),
    )
    .await;
    // Asleep now, its pods requesting what it saves.
    create_tdset(
        &client,
        n,
        &mine(tdset(
            "night",
            json!({
        "template": {"metadata": {"labels": {"app": "night"}},
                     "spec": {"containers": [{"name": "app", "image": "nginx",
                              "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]}},
        "schedulingConfig": [{"startTime": 13, "endTime": 14, "replica": 2}],
        "defaultReplica": 0}),
        )),
    )
    .await;
    // Written ahead of 13:00.
    create_tdset(
        &client,
        n,
        &mine(tdset(
            "warm",
            json!({
        "container": {"image": "nginx", "port": 80},
        "schedulingConfig": [{"startTime": 13, "endTime": 14, "replica": 2}],
        "defaultReplica": 1,
        "warmUp": {"mode": "Fixed", "lead": "2m"}}),
        )),
    )
    .await;
    // Two TDSets on one Deployment: the younger is Degraded (ConflictingTDSet).
    let _: k8s_openapi::api::apps::v1::Deployment =
        create_object(&client, n, app_deployment("shared", 1)).await;
    let on_shared = || {
        json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "shared"},
        "schedulingConfig": [{"startTime": 12, "endTime": 13, "replica": 2}],
        "defaultReplica": 1})
    };
    create_tdset(&client, n, &mine(tdset("shared-old", on_shared()))).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &mine(tdset("shared-young", on_shared()))).await;

    let op = OperatorProcess::start(
        &control_plane().kubeconfig,
        n,
        &[
            "--shard",
            "a",
            "--shard-selector",
            "team=a",
            "--lease-namespace",
            n,
            "--fake-now",
            "2026-05-04T11:59:50Z",
        ],
        "prometheus-dashboard.log",
    );
    let target = op.addr.trim_start_matches("http://").to_string();
    let prom = Prometheus::start(&target);
    // The boundary crossed, web's pods ready (its lateness timed), the conflict reported.
    for (what, query) in [
        (
            "a boundary written",
            "tdset_transition_lag_seconds_count > 0",
        ),
        (
            "web's scale-up timed",
            r#"tdset_scale_up_lateness_seconds_count{warm_up="Off"} > 0"#,
        ),
        (
            "the conflict reported",
            r#"tdset_degraded_reason{reason="ConflictingTDSet"}"#,
        ),
        ("night's savings", "tdset_saved_cpu_cores > 0"),
    ] {
        eventually(GUARD, &format!("Prometheus shows {what}"), || async {
            let v = prom.get("/api/v1/query", Some(query))?;
            (!v["data"]["result"].as_array()?.is_empty()).then_some(())
        })
        .await;
    }

    let d = dashboard();
    let vars: Vec<&Value> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .collect();
    // Each variable's values, as Grafana reads them (`label_values(selector, label)`).
    let mut chosen: Vec<(&str, String)> = vec![("namespace", n.to_string())];
    let values_of = |query: &str, chosen: &[(&str, String)]| -> Option<Vec<String>> {
        let inner = query.strip_prefix("label_values(")?.strip_suffix(')')?;
        let (selector, label) = inner.rsplit_once(',')?;
        let given: Vec<(&str, &str)> = chosen.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let selector = substituted(selector.trim(), &given);
        let v = prom.get_params(
            &format!("/api/v1/label/{}/values", label.trim()),
            &[("match[]", &selector)],
        )?;
        Some(
            v["data"]
                .as_array()?
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
        )
    };
    for v in &vars {
        let name = v["name"].as_str().unwrap();
        let query = v["query"]["query"].as_str().unwrap();
        let values = values_of(query, &chosen).unwrap_or_default();
        assert!(
            !values.is_empty(),
            "variable {name} ({query}) has no values"
        );
        if name == "namespace" {
            assert!(values.contains(n), "{values:?}");
        } else if !chosen.iter().any(|(k, _)| *k == name) {
            chosen.push((name, values[0].clone()));
        }
    }
    let shard = chosen
        .iter()
        .find(|(k, _)| *k == "shard")
        .map(|(_, v)| v.clone());
    assert_eq!(shard.as_deref(), Some("a"));
    let job = chosen
        .iter()
        .find(|(k, _)| *k == "job")
        .map(|(_, v)| v.clone())
        .unwrap();

    // Every query, with one value of each variable and with "All" (`.*`).
    let picked = [
        ("shard", "a"),
        ("namespace", n.as_str()),
        ("tdset", ".*"),
        ("job", job.as_str()),
        ("__rate_interval", "1m"),
    ];
    let everything = [
        ("shard", ".*"),
        ("namespace", ".*"),
        ("tdset", ".*"),
        ("job", ".*"),
        ("__rate_interval", "1m"),
    ];
    let mut checked = 0;
    for p in panels(&d) {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let legend = t["legendFormat"].as_str().unwrap_or_default();
            for values in [&picked[..], &everything[..]] {
                let q = substituted(expr, values);
                let v = prom.get("/api/v1/query", Some(&q));
                let ok = v.as_ref().is_some_and(|v| v["status"] == "success");
                assert!(ok, "panel {}: {q} does not evaluate: {v:?}", p["title"]);
                let result = v.as_ref().unwrap()["data"]["result"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                assert!(
                    !result.is_empty(),
                    "panel {}: {q} returns no series",
                    p["title"]
                );
                for label in legend_labels(legend) {
                    for series in &result {
                        assert!(
                            series["metric"].get(&label).is_some(),
                            "panel {}: {q}: a series without {label}: {series}",
                            p["title"]
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 60, "{checked} queries");
    drop(prom);
    drop(op);
    ns.cleanup().await;
}

/// An application's own request counter, served on `/metrics` for Prometheus to scrape: the
/// test sends requests by adding to it. Stopped when dropped.
struct Exporter {
    addr: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Exporter {
    fn start(ns: &str) -> Exporter {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, done, ns) = (requests.clone(), stop.clone(), ns.to_string());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let body = format!(
                    "# TYPE app_requests_total counter\napp_requests_total{{namespace=\"{ns}\",service=\"web\"}} {}\n",
                    count.load(Ordering::SeqCst)
                );
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Exporter {
            addr,
            requests,
            stop,
        }
    }

    /// One more request seen by the application.
    fn request(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `spec.idle` read from the real Prometheus: while requests come the TDSet is Active; once
/// they stop it is Quiet, then asleep `after` later (inside its window: `during: Always`);
/// with Prometheus gone every signal is Unknown and the TDSet stays as it is (asleep; the
/// tests in wake.rs have a blind one that never sleeps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idleness_read_from_prometheus_sleeps_once_nobody_comes_and_blind_stays_as_it_is() {
    use tdset_operator::api::{IdlePhase, TDSetStatus};
    let (client, ns) = setup("prom-idle").await;
    let app = Exporter::start(&ns.name);
    let prom = Prometheus::start(&app.addr);
    let series = format!(r#"app_requests_total{{namespace="{}"}}"#, ns.name);
    eventually(GUARD, "Prometheus scraping the application", || async {
        prom.value(&series).map(|_| ())
    })
    .await;
    let clock = tdset_operator::clock::SystemClock::starting_at(utc("2026-05-01T10:00:00Z"));
    let url = prom.url.clone();
    let _op = Operator::start_configured(&client, &ns.name, clock, |o| {
        o.traffic = Some(tdset_operator::controller::TrafficOptions {
            url,
            every: Duration::from_secs(2),
            window_secs: 10,
        });
    });
    let query = "sum by (namespace, service) (rate(app_requests_total[10s]))";
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "web",
            json!({
                "container": {"image": "nginx", "port": 80},
                "defaultReplica": 0,
                "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 2}],
                "wakeOnRequest": {"services": [{"name": "web"}]},
                "idle": {"after": "1m", "during": "Always",
                         "signals": [{"prometheus": {"query": query}}]}
            }),
        ),
    )
    .await;
    let status = || crate::wake::status(&client, &ns.name);
    let phase = |s: &TDSetStatus| s.idle.as_ref().map(|i| i.phase);

    // Requests come: Active, and the window's count.
    let sending = eventually(GUARD, "Active while requests come", || async {
        for _ in 0..5 {
            app.request();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let s = status().await?;
        (phase(&s) == Some(IdlePhase::Active)).then_some(s)
    })
    .await;
    assert!(sending.idle.unwrap().signals[0].value.is_some());
    deployment_at(&client, &ns.name, "web", 2).await;

    // They stop: Quiet from the reading that saw it, then asleep `after` later.
    let quiet = eventually(GUARD, "Quiet once requests stop", || async {
        let s = status().await?;
        (phase(&s) == Some(IdlePhase::Quiet)).then_some(s)
    })
    .await;
    let idle = quiet.idle.unwrap();
    let (since, sleeps_at) = (
        utc(idle.quiet_since.as_deref().unwrap()),
        utc(idle.sleeps_at.as_deref().unwrap()),
    );
    assert_eq!(sleeps_at - since, chrono::Duration::minutes(1));
    eventually(Duration::from_secs(180), "asleep once idle", || async {
        let d: k8s_openapi::api::apps::v1::Deployment =
            kube::Api::namespaced(client.clone(), &ns.name)
                .get("web")
                .await
                .ok()?;
        (replicas(&d) == Some(0)).then_some(())
    })
    .await;
    // Its status follows the scale write.
    let asleep = eventually(GUARD, "status.idle Idle", || async {
        let s = status().await?;
        (phase(&s) == Some(IdlePhase::Idle)).then_some(s)
    })
    .await;
    let entry = asleep.history.first().cloned().unwrap();
    assert_eq!(entry.to, Some(0), "{:?}", asleep.history);
    assert!(entry.reason.contains("idle"), "{entry:?}");

    // Prometheus gone: Unknown, and the TDSet stays as it is: asleep (a monitoring restart
    // wakes nothing), the quiet that slept it kept, blind since the first failed read.
    drop(prom);
    let blind = eventually(GUARD, "Unknown with Prometheus gone", || async {
        let s = status().await?;
        (phase(&s) == Some(IdlePhase::Unknown)).then_some(s)
    })
    .await;
    let idle = blind.idle.unwrap();
    assert_eq!(idle.reason.as_deref(), Some("PrometheusUnreachable"));
    assert_eq!(
        idle.quiet_since.map(|s| utc(&s)),
        Some(since),
        "the quiet kept"
    );
    assert!(idle.unknown_since.is_some());
    // Several reads later (every 2 s), still asleep.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let d: k8s_openapi::api::apps::v1::Deployment = kube::Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(replicas(&d), Some(0), "blind, it stays asleep");
    ns.cleanup().await;
}
