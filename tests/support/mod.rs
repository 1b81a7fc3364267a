//! The local control plane for integration tests.
//!
//! One control plane per test run: `scripts/test.sh` starts it and passes its kubeconfig in
//! `TDSET_TEST_KUBECONFIG`; a test binary run on its own (plain `cargo test`) starts one itself,
//! watched by a process that stops it when the test binary exits, however it exits.
//! Every test gets its own namespace.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn script() -> PathBuf {
    repo_root().join("scripts/control-plane.sh")
}

pub struct ControlPlane {
    pub kubeconfig: PathBuf,
    /// The state dir when this process started it (logs are under `logs/`).
    pub dir: Option<PathBuf>,
}

fn bin_dir() -> PathBuf {
    let out = Command::new(script())
        .arg("bin-dir")
        .output()
        .expect("running scripts/control-plane.sh bin-dir");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

pub fn kubectl_path() -> PathBuf {
    bin_dir().join("kubectl")
}

/// Starts a fresh control plane in `dir` (with kube-controller-manager), stopped when this
/// process exits.
pub fn start_control_plane(dir: &Path) -> ControlPlane {
    start_control_plane_with(dir, &[])
}

/// `start_control_plane`, with these flags added to kube-apiserver.
pub fn start_control_plane_with(dir: &Path, apiserver_args: &[&str]) -> ControlPlane {
    start_cluster(dir, apiserver_args, "--kcm")
}

/// A control plane with a real node (containerd, kubelet, kube-proxy) and no simulated ones,
/// stopped when this process exits. See `real_node_unavailable` first.
pub fn start_real_node_cluster(dir: &Path) -> ControlPlane {
    start_cluster(dir, &[], "--real-node")
}

/// Why this machine cannot run a real node, if it cannot: `control-plane.sh node-check` names
/// what is missing (root, for the node's namespaces and cgroups; containerd, runc, buildah,
/// iptables, the CNI plugins; the cached kubelet and images).
pub fn real_node_unavailable() -> Option<String> {
    let out = Command::new(script())
        .arg("node-check")
        .output()
        .expect("running scripts/control-plane.sh node-check");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_string())
}

fn start_cluster(dir: &Path, apiserver_args: &[&str], nodes: &str) -> ControlPlane {
    let bins = bin_dir();
    if !bins.join("kube-apiserver").exists() || !bins.join("etcd").exists() {
        panic!(
            "control-plane binaries missing in {}; run: scripts/control-plane.sh install",
            bins.display()
        );
    }
    let out = Command::new(script())
        .env("TDSET_APISERVER_ARGS", apiserver_args.join(" "))
        .arg("start")
        .arg(dir)
        .args([nodes, "--watch", &std::process::id().to_string()])
        .output()
        .expect("running scripts/control-plane.sh start");
    if !out.status.success() {
        panic!(
            "starting the control plane failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    ControlPlane {
        kubeconfig: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        dir: Some(dir.to_path_buf()),
    }
}

/// The shared control plane of this test run.
pub fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        if let Ok(path) = std::env::var("TDSET_TEST_KUBECONFIG") {
            return ControlPlane {
                kubeconfig: PathBuf::from(path),
                dir: None,
            };
        }
        let dir = std::env::temp_dir().join(format!("tdset-test-cp-{}", std::process::id()));
        start_control_plane(&dir)
    })
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("reading the test kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("building a client")
}

/// A client for the shared control plane. Make one per test: a client belongs to the tokio
/// runtime it was made on, and each `#[tokio::test]` has its own.
pub async fn client() -> Client {
    client_for(&control_plane().kubeconfig).await
}

/// Runs the control plane's kubectl against the shared control plane.
pub fn kubectl(args: &[&str]) -> std::process::Output {
    kubectl_at(&control_plane().kubeconfig, args)
}

/// Runs the control plane's kubectl against the cluster of `kubeconfig`.
pub fn kubectl_at(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new(kubectl_path())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("running kubectl")
}

/// The cached helm (`scripts/control-plane.sh install` builds it), against `kubeconfig`'s
/// cluster. Helm's own state (repositories, cache) goes to a throwaway dir.
pub fn helm(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let dir = Command::new(script())
            .arg("helm-dir")
            .output()
            .expect("running scripts/control-plane.sh helm-dir");
        PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim()).join("helm")
    });
    assert!(
        bin.exists(),
        "no helm at {}; run: scripts/control-plane.sh install",
        bin.display()
    );
    let home = std::env::temp_dir().join("tdset-test-helm-home");
    Command::new(bin)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(args)
        .output()
        .expect("running helm")
}

/// Asserts a command succeeded and returns its stdout.
pub fn succeeded(what: &str, out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0")
        .port()
}

/// Like `kubectl`, with `stdin` fed to it.
pub fn kubectl_stdin(args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(kubectl_path())
        .env("KUBECONFIG", &control_plane().kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("writing to kubectl");
    child.wait_with_output().expect("kubectl output")
}

/// A namespace of its own for one test; `cleanup` deletes it.
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn new(client: &Client, prefix: &str) -> TestNamespace {
        let name = format!("{prefix}-{}", unique_suffix());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating namespace");
        TestNamespace {
            name,
            client: client.clone(),
        }
    }

    pub async fn cleanup(self) {
        let _ = Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::background())
            .await;
    }
}

pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{:x}{:x}{}",
        std::process::id() % 4096,
        nanos % 65536,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Installs the checked-in CRDs (server-side apply, so it is idempotent across tests) and
/// waits until they are Established.
pub async fn install_crd(client: &Client) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for (file, name) in [
        ("crds/tdset.yaml", "tdsets.schedule.rs"),
        ("crds/tdcalendar.yaml", "tdcalendars.schedule.rs"),
    ] {
        let text = std::fs::read_to_string(repo_root().join(file))
            .unwrap_or_else(|e| panic!("reading {file}: {e}"));
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {file}: {e}"));
        api.patch(
            name,
            &PatchParams::apply("tdset-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {file}: {e}"));
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} not Established within 60s"))
        .expect("watching the CRD");
    }
}

/// Polls `f` until it returns Some, for at most `limit`. The limit only stops a hung test;
/// it is not an assertion about speed.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("gave up waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
        Operator::launch(
            client,
            namespace,
            clock,
            lease,
            instance,
            Default::default(),
            namespace.is_none(),
        )
    }

    /// Watching one namespace, with `container`/`template` allowed only where `pod_forms` says.
    pub fn start_allowing(
        client: &Client,
        ns: &str,
        clock: tdset_operator::clock::SystemClock,
        pod_forms: &str,
    ) -> Operator {
        let pod_forms = pod_forms.parse().expect("a --pod-forms-in value");
        Operator::launch(client, Some(ns), clock, None, "test", pod_forms, false)
    }

    /// Watching one namespace, and writing every TDCalendar's usage as if it saw every TDSet
    /// (the deployed operator does when it watches all namespaces).
    pub fn start_reporting_calendars(
        client: &Client,
        ns: &str,
        clock: tdset_operator::clock::SystemClock,
    ) -> Operator {
        let all = tdset_operator::workload::PodForms::default();
        Operator::launch(client, Some(ns), clock, None, "test", all, true)
    }

    fn launch(
        client: &Client,
        namespace: Option<&str>,
        clock: tdset_operator::clock::SystemClock,
        lease: Option<tdset_operator::controller::LeaseOptions>,
        instance: &str,
        pod_forms: tdset_operator::workload::PodForms,
        report_calendar_usage: bool,
    ) -> Operator {
        use std::sync::Arc;
        let metrics = Arc::new(tdset_operator::telemetry::Metrics::new().expect("metrics"));
        let health = Arc::new(tdset_operator::http::Health::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let opts = tdset_operator::controller::RunOptions {
            namespace: namespace.map(str::to_string),
            concurrency: 8,
            instance: instance.to_string(),
            initial_list: tdset_operator::controller::InitialList::Auto,
            pod_forms,
            report_calendar_usage,
            shard: None,
        };
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

    pub fn counter(&self, name: &str) -> f64 {
        let text = self.metrics.render();
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// Events recorded for an object, as (type, reason, note).
pub async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until an Event for the object matches `pred` (Events are published asynchronously).
pub async fn wait_for_event(
    client: &Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&(String, String, String)) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = events_for(client, ns, name).await;
        if events.iter().any(&pred) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("no matching Event for {ns}/{name}; have {events:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Changes a TDSet's `spec.container` (a merge patch, as `kubectl patch` would).
pub async fn set_container(
    tdsets: &Api<tdset_operator::api::TDSet>,
    name: &str,
    image: &str,
    port: i32,
) {
    tdsets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"container": {"image": image, "port": port}}}),
            ),
        )
        .await
        .expect("patching spec.container");
}

/// How long a test waits for something the operator should do; it only stops a hung test.
pub const GUARD: Duration = Duration::from_secs(60);

pub fn utc(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .expect("an RFC 3339 time")
        .with_timezone(&chrono::Utc)
}

/// The one TDSet builder: a TDSet named `name` with the given spec (as JSON).
pub fn tdset(name: &str, spec: serde_json::Value) -> tdset_operator::api::TDSet {
    serde_json::from_value(serde_json::json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": name}, "spec": spec}))
        .expect("test TDSet")
}

pub async fn create_tdset(
    client: &Client,
    ns: &str,
    t: &tdset_operator::api::TDSet,
) -> tdset_operator::api::TDSet {
    Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), t)
        .await
        .expect("creating TDSet")
}

/// Any namespaced object, created as is (the way Helm or GitOps would have created it).
pub async fn create_object<K>(client: &Client, ns: &str, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("test object");
    Api::<K>::namespaced(client.clone(), ns)
        .create(
            &PostParams {
                field_manager: Some("helm".into()),
                ..PostParams::default()
            },
            &object,
        )
        .await
        .expect("creating test object")
}

/// A Deployment of someone else's (as Helm or GitOps would have created it), as JSON.
pub fn app_deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name, "team": "payments"}, "annotations": {"owner": "gitops"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}]}}}
    })
}

/// Waits (up to GUARD) until object `name` exists and satisfies `pred`.
pub async fn object_where<K>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    eventually(GUARD, what, || async {
        api.get_opt(name).await.ok().flatten().filter(|o| pred(o))
    })
    .await
}

/// A client, the CRD installed, and a fresh namespace for one test.
pub async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}

/// Waits (up to GUARD) until Deployment `name` asks for `want` replicas.
pub async fn deployment_at(
    client: &Client,
    ns: &str,
    name: &str,
    want: i32,
) -> k8s_openapi::api::apps::v1::Deployment {
    object_where(
        client,
        ns,
        name,
        &format!("Deployment {name} at {want}"),
        |d| replicas(d) == Some(want),
    )
    .await
}

/// Waits (up to GUARD) until TDSet `name` no longer exists (its finalizers have let go).
/// Deletes TDSet `name` and waits until it is gone (its finalizer done).
pub async fn delete_tdset_and_wait(client: &Client, ns: &str, name: &str) {
    Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting the TDSet");
    tdset_gone(client, ns, name).await;
}

pub async fn tdset_gone(client: &Client, ns: &str, name: &str) {
    let api: Api<tdset_operator::api::TDSet> = Api::namespaced(client.clone(), ns);
    eventually(GUARD, &format!("TDSet {ns}/{name} deleted"), || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// The condition of `type_` on a TDSet, if its status has one.
pub fn condition<'a>(
    t: &'a tdset_operator::api::TDSet,
    type_: &str,
) -> Option<&'a tdset_operator::api::Condition> {
    t.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until TDSet `name` has condition `type_` with `reason` (any status).
pub async fn tdset_with_reason(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> tdset_operator::api::TDSet {
    object_where(client, ns, name, &format!("{type_} reason {reason}"), |t| {
        condition(t, type_).is_some_and(|c| c.reason == reason)
    })
    .await
}

/// A Deployment's `spec.replicas`.
pub fn replicas(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

/// A kubeconfig for the shared control plane that authenticates as ServiceAccount
/// `namespace/name` (a token from `kubectl create token`), and a client for it.
pub async fn service_account_client(namespace: &str, name: &str) -> (Client, PathBuf) {
    service_account_client_at(&control_plane().kubeconfig, namespace, name).await
}

/// `service_account_client` for the cluster of `kubeconfig`.
pub async fn service_account_client_at(
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
) -> (Client, PathBuf) {
    let token = kubectl_at(
        kubeconfig,
        &["-n", namespace, "create", "token", name, "--duration=1h"],
    );
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    let admin: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let sa_config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": "sa"}}],
        "current-context": "sa"
    });
    let path = std::env::temp_dir().join(format!("tdset-sa-{}.kubeconfig", unique_suffix()));
    std::fs::write(&path, serde_json::to_string(&sa_config).unwrap()).unwrap();
    (client_for(&path).await, path)
}

/// A control plane of its own whose API server keeps an audit log of every create, update and
/// patch made by a ServiceAccount, with its body (the operator runs as one, so its writes are
/// told apart from the test's and kube-controller-manager's). Returns it and the log's path.
pub fn start_audited_control_plane(dir: &Path) -> (ControlPlane, PathBuf) {
    std::fs::create_dir_all(dir).expect("the test's dir");
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n  userGroups: [\"system:serviceaccounts\"]\n  verbs: [\"create\", \"update\", \"patch\"]\n- level: None\n",
    )
    .expect("writing the audit policy");
    let log = dir.join("audit.log");
    let cp = start_control_plane_with(
        &dir.join("cp"),
        &[
            &format!("--audit-policy-file={}", policy.display()),
            &format!("--audit-log-path={}", log.display()),
        ],
    );
    (cp, log)
}

/// One write the audit log holds.
#[derive(Debug, Clone)]
pub struct AuditedWrite {
    pub verb: String,
    pub uri: String,
    pub at: chrono::DateTime<chrono::Utc>,
    pub code: i64,
    /// The request's body (`requestObject`), or null.
    pub body: serde_json::Value,
}

/// Every write of `user` the audit log holds, in the order the API server received them.
pub fn audited_writes(log: &Path, user: &str) -> Vec<AuditedWrite> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut writes: Vec<AuditedWrite> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == user)
        .filter_map(|e| {
            Some(AuditedWrite {
                verb: e["verb"].as_str()?.to_string(),
                uri: e["requestURI"].as_str()?.to_string(),
                at: utc(e["requestReceivedTimestamp"].as_str()?),
                code: e["responseStatus"]["code"].as_i64()?,
                body: e["requestObject"].clone(),
            })
        })
        .collect();
    writes.sort_by_key(|w| w.at);
    writes
}

/// A ServiceAccount `name` in `namespace` bound to cluster-admin, and a kubeconfig with its
/// token: who the operator runs as in the audited tests. Returns the kubeconfig and the user
/// name the audit log records.
pub async fn operator_service_account(
    admin_kubeconfig: &Path,
    namespace: &str,
    name: &str,
) -> (PathBuf, String) {
    succeeded(
        "create sa",
        kubectl_at(
            admin_kubeconfig,
            &["-n", namespace, "create", "serviceaccount", name],
        ),
    );
    succeeded(
        "bind it",
        kubectl_at(
            admin_kubeconfig,
            &[
                "create",
                "clusterrolebinding",
                &format!("{namespace}-{name}-admin"),
                "--clusterrole=cluster-admin",
                &format!("--serviceaccount={namespace}:{name}"),
            ],
        ),
    );
    let (_, kubeconfig) = service_account_client_at(admin_kubeconfig, namespace, name).await;
    (
        kubeconfig,
        format!("system:serviceaccount:{namespace}:{name}"),
    )
}

/// The operator as a real process (the built binary), for tests that kill it or scrape it.
/// Its output goes to a log file in the temp dir.
pub struct OperatorProcess {
    child: std::process::Child,
    pub addr: String,
}

impl OperatorProcess {
    pub fn start(
        kubeconfig: &std::path::Path,
        ns: &str,
        extra: &[&str],
        log: &str,
    ) -> OperatorProcess {
        let port = free_port();
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("{}-{log}", unique_suffix())))
                .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tdset-operator"))
            .args([
                "run",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--namespace",
                ns,
            ])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args([
                "--log-level",
                &std::env::var("TDSET_TEST_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
            ])
            .args(extra)
            .stdout(std::process::Stdio::from(log.try_clone().unwrap()))
            .stderr(std::process::Stdio::from(log))
            .spawn()
            .unwrap();
        OperatorProcess {
            child,
            addr: format!("http://127.0.0.1:{port}"),
        }
    }

    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let out = Command::new("curl")
            .args([
                "-s",
                "-m",
                "2",
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
            .sum()
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

/// `host:port` of the API server a kubeconfig points to.
pub fn api_server_addr(kubeconfig: &Path) -> String {
    std::fs::read_to_string(kubeconfig)
        .expect("reading the kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("a server in the kubeconfig")
        .to_string()
}

/// A process's established TCP connections to `port`, each as the kernel's timer on it
/// (`/proc/net/tcp`'s `tr`: 0 none, 1 retransmit, 2 keepalive, 4 zero-window probe) and
/// when that timer fires (seconds from now).
pub fn tcp_timers_to(pid: u32, port: u16) -> Vec<(u8, f64)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(rem), Some(st), Some(timer), Some(inode)) =
                (f.get(2), f.get(3), f.get(5), f.get(9))
            else {
                continue;
            };
            let rem_port = rem
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *st != "01" || rem_port != Some(port) || !inodes.contains(*inode) {
                continue;
            }
            let (tr, when) = timer.split_once(':').unwrap_or(("0", "0"));
            let ticks = u64::from_str_radix(when, 16).unwrap_or(0);
            out.push((
                u8::from_str_radix(tr, 16).unwrap_or(0),
                ticks as f64 / 100.0,
            ));
        }
    }
    out
}

/// A TCP proxy in front of the API server that can black-hole its traffic: while cut, every
/// byte either way is read and dropped, connections stay open and nothing is refused, as when
/// a network drops packets. For one replica's view of the API server.
pub struct BlackHole {
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// One flag per connection opened so far, for cutting only those.
    open: std::sync::Arc<std::sync::Mutex<Vec<std::sync::Arc<std::sync::atomic::AtomicBool>>>>,
    pub kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    /// A proxy to the server of `kubeconfig`, and a kubeconfig (in `dir`) that goes through it.
    pub async fn start(kubeconfig: &Path, dir: &Path) -> BlackHole {
        use std::sync::atomic::Ordering;
        let text = std::fs::read_to_string(kubeconfig).expect("reading the kubeconfig");
        let server = api_server_addr(kubeconfig);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let proxied = dir.join(format!("blackhole-{}.kubeconfig", unique_suffix()));
        std::fs::write(
            &proxied,
            text.replace(&format!("https://{server}"), &format!("https://{local}")),
        )
        .unwrap();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (cut, open) = (cut.clone(), open.clone());
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let (cut, server) = (cut.clone(), server.clone());
                    let this = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    open.lock().unwrap().push(this.clone());
                    tokio::spawn(async move {
                        let Ok(outbound) = tokio::net::TcpStream::connect(&server).await else {
                            return;
                        };
                        let (ri, wi) = inbound.into_split();
                        let (ro, wo) = outbound.into_split();
                        // Each direction copies while the line is up and swallows while cut.
                        let pipe = |mut from: tokio::net::tcp::OwnedReadHalf,
                                    mut to: tokio::net::tcp::OwnedWriteHalf,
                                    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
                                    this: std::sync::Arc<std::sync::atomic::AtomicBool>| async move {
                            use tokio::io::{AsyncReadExt, AsyncWriteExt};
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                let dead =
                                    || cut.load(Ordering::SeqCst) || this.load(Ordering::SeqCst);
                                let n = match from.read(&mut buf).await {
                                    // A dead line does not carry the close either.
                                    Ok(0) | Err(_) if dead() => std::future::pending().await,
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => n,
                                };
                                if !dead()
                                    && to.write_all(&buf[..n]).await.is_err()
                                {
                                    return;
                                }
                            }
                        };
                        tokio::join!(
                            pipe(ri, wo, cut.clone(), this.clone()),
                            pipe(ro, wi, cut, this)
                        );
                    });
                }
            }
        });
        BlackHole {
            cut,
            open,
            kubeconfig: proxied,
            task,
        }
    }

    /// Every connection, open or new, goes dead (or comes back).
    pub fn cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }

    /// The connections open now go dead for good; new ones work, as when a load balancer's
    /// backend vanishes without a reset and the next connection reaches another.
    pub fn cut_open_connections(&self) {
        for c in self.open.lock().unwrap().iter() {
            c.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A small CRD with a scale subresource, like an Argo Rollout.
pub async fn install_widget_crd(client: &Client) -> kube::api::ApiResource {
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.schedule.rs"},
        "spec": {"group": "test.schedule.rs", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                         "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}}}]}
    }))
    .unwrap();
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        "widgets.test.schedule.rs",
        &kube::api::PatchParams::apply("tdset-tests").force(),
        &kube::api::Patch::Apply(&crd),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        GUARD,
        kube::runtime::wait::await_condition(
            api,
            "widgets.test.schedule.rs",
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("test.schedule.rs", "v1", "Widget"),
        "widgets",
    )
}

/// Refuses a scale of Deployments in `ns` to `replicas`, as an admission policy would.
pub struct RefuseScale {
    client: kube::Client,
    name: String,
}

impl RefuseScale {
    pub async fn new(client: &kube::Client, ns: &str, replicas: i32) -> RefuseScale {
        let name = format!("refuse-scale-{}", unique_suffix());
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["deployments", "deployments/scale"]
                }]},
                "validations": [{
                    "expression": format!("!has(object.spec.replicas) || object.spec.replicas != {replicas}"),
                    "message": format!("the test refuses {replicas} replicas")
                }]
            }
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
            }
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("creating the policy");
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("creating the binding");
        // The API server takes policies up asynchronously: a dry-run scale of a Deployment of
        // no replicas (no pods, selected by no test's TDSet) says when this one is in force.
        let probe = format!("{name}-probe");
        let _: k8s_openapi::api::apps::v1::Deployment =
            create_object(client, ns, app_deployment(&probe, 0)).await;
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), ns);
        let dry_run = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let patch = serde_json::json!({"spec": {"replicas": replicas}});
        eventually(GUARD, "the admission policy in force", || async {
            deployments
                .patch(&probe, &dry_run, &Patch::Merge(&patch))
                .await
                .is_err()
                .then_some(())
        })
        .await;
        RefuseScale {
            client: client.clone(),
            name,
        }
    }

    pub async fn lift(&self) {
        let _ = Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        let _ = Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}
