//! What the scenarios create: TDSets of each form, the Deployments they drive, the
//! operator's ServiceAccount, the operator itself (through the test support's launcher).

use super::*;

/// What the benchmark's TDSets scale.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `container`: a Deployment each TDSet owns.
    Owned,
    /// `scaleTargetRef`: a Deployment of the same name that exists before the TDSet.
    Ref,
}

impl Form {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Form::Owned => "owned",
            Form::Ref => "scaleTargetRef",
        }
    }
}

pub(crate) fn bench_tdset(
    form: Form,
    name: &str,
    windows: serde_json::Value,
    default: i32,
) -> TDSet {
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
pub(crate) fn app_deployments(prefix: &str, n: usize, replicas: i32) -> Vec<Deployment> {
    (0..n)
        .map(|i| serde_json::from_value(app_deployment(&format!("{prefix}{i}"), replicas)).unwrap())
        .collect()
}

pub(crate) async fn create_all<K>(api: &Api<K>, objs: Vec<K>) -> Duration
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
pub(crate) async fn all_where<K>(api: Api<K>, n: usize, pred: impl Fn(&K) -> bool)
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

/// A ServiceAccount with the operator's own ClusterRole (tdset-operator-core, as the chart
/// renders it into deploy/operator.yaml), and a client and kubeconfig carrying its token.
pub(crate) async fn operator_role_account(
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

/// The operator binary for a scenario, through the test support's launcher (`--concurrency
/// 64`), ready: its caches hold a full list.
pub(crate) fn operator(
    kubeconfig: &std::path::Path,
    ns: Option<&str>,
    fake_now: Option<DateTime<Utc>>,
    log: &std::path::Path,
) -> OperatorProcess {
    operator_with(kubeconfig, ns, fake_now, log, &["--concurrency", "64"])
}

/// `operator`, with `extra` flags for `tdset-operator run` instead (none: its defaults).
/// TDSET_BENCH_WRAP="heaptrack -o /tmp/ht" runs it under a profiler: its memory figures are
/// then the profiler's, and a profiler that does not pass SIGTERM on leaves each operator
/// running after the bench (`pkill -f 'tdset-operator run'`).
pub(crate) fn operator_with(
    kubeconfig: &std::path::Path,
    ns: Option<&str>,
    fake_now: Option<DateTime<Utc>>,
    log: &std::path::Path,
    extra: &[&str],
) -> OperatorProcess {
    let op = launch_operator(kubeconfig, ns, fake_now, log, extra);
    op.wait_ready(Duration::from_secs(120), log);
    op
}

/// `operator_with`, not waited for.
pub(crate) fn launch_operator(
    kubeconfig: &std::path::Path,
    ns: Option<&str>,
    fake_now: Option<DateTime<Utc>>,
    log: &std::path::Path,
    extra: &[&str],
) -> OperatorProcess {
    OperatorProcess::launch(Launch {
        namespace: ns,
        log: log.to_path_buf(),
        log_level: "warn".into(),
        fake_now,
        extra,
        wrap: std::env::var("TDSET_BENCH_WRAP").ok(),
        // Its /metrics at N = 10 000 is large, and read while it works: a hung run is the
        // only thing this stops.
        scrape_timeout: Duration::from_secs(120),
        ..Launch::new(kubeconfig, "bench.log")
    })
}

/// The TDSet and TDCalendar CRDs, as checked in.
pub(crate) async fn install_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for (file, name) in [
        ("crds/tdset.yaml", "tdsets.schedule.rs"),
        ("crds/tdcalendar.yaml", "tdcalendars.schedule.rs"),
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(
                name,
                &kube::api::PatchParams::apply("bench").force(),
                &kube::api::Patch::Apply(&crd),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}
