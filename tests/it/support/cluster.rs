//! The local control plane: started (shared, or one of a test's own), reached (a client,
//! `kubectl`, `helm`), and as whom (a ServiceAccount's token; the audit log of its writes).

use super::*;

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

impl ControlPlane {
    /// Stops a control plane this process started, then removes its state dir. Removing the
    /// dir first would leave its processes running: `control-plane.sh stop` (and the
    /// watchdog, when this process exits) find them through the pid files in it.
    pub fn stop(self) {
        if let Some(dir) = &self.dir {
            let _ = Command::new(script()).arg("stop").arg(dir).status();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
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
    install_test_log();
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

/// `host:port` of the API server a kubeconfig points to.
pub fn api_server_addr(kubeconfig: &Path) -> String {
    std::fs::read_to_string(kubeconfig)
        .expect("reading the kubeconfig")
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("a server in the kubeconfig")
        .to_string()
}
