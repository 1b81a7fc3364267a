//! KEDA: its CRDs (from the module its operator was built from, `scripts/control-plane.sh
//! install`) and its operator, one per test namespace.

use super::*;

fn keda_dir() -> PathBuf {
    let out = Command::new(script())
        .arg("keda-dir")
        .output()
        .expect("running scripts/control-plane.sh keda-dir");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// KEDA's CRDs, applied server-side under one field manager: every test that needs the kind
/// applies the same, so none takes another's schema away.
pub async fn install_keda_crds(client: &Client) {
    let file = keda_dir().join("keda-crds.yaml");
    assert!(
        file.exists(),
        "no KEDA CRDs at {}; run: scripts/control-plane.sh install",
        file.display()
    );
    let file = file.to_string_lossy().to_string();
    succeeded(
        "applying KEDA's CRDs",
        kubectl_at(
            &control_plane().kubeconfig,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=tdset-tests",
                "-f",
                &file,
            ],
        ),
    );
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    tokio::time::timeout(
        GUARD,
        await_condition(
            api,
            "scaledobjects.keda.sh",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the ScaledObject CRD established")
    .expect("watching the ScaledObject CRD");
}

/// KEDA's operator on the suite's control plane, watching one namespace (two operators on one
/// ScaledObject would both act on it); stopped when dropped.
pub struct KedaOperator {
    child: std::process::Child,
    pub log: PathBuf,
}

impl KedaOperator {
    pub async fn start(client: &Client, ns: &str) -> KedaOperator {
        install_keda_crds(client).await;
        let log = std::env::temp_dir().join(format!("keda-{ns}.log"));
        let certs = std::env::temp_dir().join(format!("keda-{ns}-certs"));
        self_signed(&certs);
        let out = std::fs::File::create(&log).expect("KEDA's log file");
        let child = Command::new(keda_dir().join("keda-operator"))
            .env("KUBECONFIG", &control_plane().kubeconfig)
            .env("WATCH_NAMESPACE", ns)
            .env("POD_NAMESPACE", ns)
            .env("KEDA_CLUSTER_OBJECT_NAMESPACE", ns)
            .args([
                "--leader-elect=false",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                &format!("--metrics-service-bind-address=127.0.0.1:{}", free_port()),
                &format!("--cert-dir={}", certs.display()),
            ])
            .stdout(out.try_clone().expect("KEDA's log file"))
            .stderr(out)
            .spawn()
            .expect("starting keda-operator");
        KedaOperator { child, log }
    }
}

/// What KEDA's gRPC metrics service serves with (`ca.crt`, `tls.crt`, `tls.key` in `dir`); it
/// will not start without them, though no metrics adapter runs here to ask it.
fn self_signed(dir: &Path) {
    std::fs::create_dir_all(dir).expect("KEDA's cert dir");
    let out = Command::new("openssl")
        .current_dir(dir)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-subj",
            "/CN=keda-operator",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::copy(dir.join("tls.crt"), dir.join("ca.crt")).expect("KEDA's ca.crt");
}

impl Drop for KedaOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
