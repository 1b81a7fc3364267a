//! KEDA: its CRDs (from the module its operator was built from, `scripts/control-plane.sh
//! install`), its operator and its admission webhooks (as its chart installs them: every write
//! of a ScaledObject, the operator's too, is validated by KEDA), one of each per test
//! namespace.

use super::*;

fn keda_dir() -> PathBuf {
    let out = Command::new(script())
        .arg("keda-dir")
        .output()
        .expect("running scripts/control-plane.sh keda-dir");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The ScaledObjects of namespace `ns`.
pub fn scaled_objects(client: &Client, ns: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// KEDA's CRDs, applied server-side under one field manager: every test that needs the kind
/// applies the same, so none takes another's schema away.
pub async fn install_keda_crds(client: &Client) {
    let file = keda_dir().join("keda-crds.yaml");
    install_crds_from(client, &file, "scaledobjects.keda.sh", "keda.sh/v1alpha1").await;
}

/// KEDA's operator on the suite's control plane, watching one namespace (two operators on one
/// ScaledObject would both act on it), and its admission webhooks, registered for that
/// namespace alone; both stopped (and the webhooks' registration deleted) when dropped.
pub struct KedaOperator {
    child: Stopped,
    webhooks: Stopped,
    webhook_config: String,
    namespace: String,
    pub log: PathBuf,
}

impl KedaOperator {
    pub async fn start(client: &Client, ns: &str) -> KedaOperator {
        install_keda_crds(client).await;
        let log = process_log(&format!("keda-operator-{ns}"));
        let certs = std::env::temp_dir().join(format!("keda-{ns}-certs"));
        self_signed(&certs);
        let out = std::fs::File::create(&log).expect("KEDA's log file");
        let child = Stopped(
            Command::new(keda_dir().join("keda-operator"))
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
                .expect("starting keda-operator"),
        );
        let (webhooks, webhook_config) = start_webhooks(client, ns, &certs).await;
        KedaOperator {
            child,
            webhooks,
            webhook_config,
            namespace: ns.to_string(),
            log,
        }
    }
}

/// KEDA's admission webhooks for namespace `ns`, serving with the certificate in `certs`, and
/// their ValidatingWebhookConfiguration (for that namespace, failing closed, as KEDA's chart
/// registers them). Returns once KEDA refuses a ScaledObject it could not run (a dry run).
async fn start_webhooks(client: &Client, ns: &str, certs: &Path) -> (Stopped, String) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let port = free_port();
    let log = process_log(&format!("keda-webhooks-{ns}"));
    let out = std::fs::File::create(&log).expect("KEDA's webhooks' log file");
    let child = Stopped(
        Command::new(keda_dir().join("keda-admission-webhooks"))
            .env("KUBECONFIG", &control_plane().kubeconfig)
            .env("POD_NAMESPACE", ns)
            .args([
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                &format!("--port={port}"),
                &format!("--cert-dir={}", certs.display()),
            ])
            .stdout(out.try_clone().expect("KEDA's webhooks' log file"))
            .stderr(out)
            .spawn()
            .expect("starting keda-admission-webhooks"),
    );
    let name = format!("keda-{ns}");
    let ca = std::fs::read(certs.join("ca.crt")).expect("KEDA's ca.crt");
    let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "vscaledobject.kb.io",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/validate-keda-sh-v1alpha1-scaledobject"),
                "caBundle": base64_of(&ca),
            },
            "rules": [{"apiGroups": ["keda.sh"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["scaledobjects"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }]
    }))
    .expect("a ValidatingWebhookConfiguration");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .expect("registering KEDA's webhooks");
    // In the path once a ScaledObject KEDA could not run (a name too long for the label KEDA
    // puts it in; the CRD's schema allows it) is refused by KEDA.
    let invalid: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "w".repeat(64)},
        "spec": {"scaleTargetRef": {"name": "none"}, "triggers": [never_active_cron()]}
    }))
    .expect("a ScaledObject");
    let api = scaled_objects(client, ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        GUARD,
        "KEDA's webhooks refusing an invalid ScaledObject",
        || async {
            match api.create(&dry, &invalid).await {
                Err(kube::Error::Api(e)) if e.message.contains("must be no more than 63") => {
                    Some(())
                }
                _ => None,
            }
        },
    )
    .await;
    (child, name)
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
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
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
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
        let kc = &control_plane().kubeconfig;
        // The registration first: failing closed, it would refuse every later write of the
        // namespace's ScaledObjects (a finalizer taken off included).
        let _ = kubectl_at(
            kc,
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.webhook_config,
                "--ignore-not-found",
            ],
        );
        self.child.stop();
        self.webhooks.stop();
        // KEDA's finalizer, with no KEDA left to take it off, would keep the namespace
        // Terminating (and kube-controller-manager retrying it) for the rest of the run.
        let listed = kubectl_at(
            kc,
            &["-n", &self.namespace, "get", "scaledobjects", "-o", "name"],
        );
        for so in String::from_utf8_lossy(&listed.stdout).lines() {
            let _ = kubectl_at(
                kc,
                &[
                    "-n",
                    &self.namespace,
                    "patch",
                    so,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
            );
        }
    }
}

/// A process of the test's, stopped when dropped: also when a test fails before the
/// `KedaOperator` that would own it is made (a panic in its start).
struct Stopped(std::process::Child);

impl Stopped {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.stop();
    }
}
