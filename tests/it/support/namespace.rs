//! One test's setting: a namespace of its own, the CRDs installed, a client.

use super::*;

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

    /// Deletes the namespace, and lets its TDSets go without their finalizers: the operator
    /// that would run them stops with the test, and a namespace left `Terminating` is retried
    /// by kube-controller-manager every ~8 s for the rest of the run, some 70 requests each
    /// time (every namespaced resource listed and deleted). A hundred of them kept the API
    /// server busier than the tests.
    pub async fn cleanup(self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await;
        let tdsets: Api<tdset_operator::api::TDSet> = Api::namespaced(self.client, &self.name);
        // Deleted first: no finalizer can be added to an object being deleted, so a running
        // operator cannot put one back.
        let _ = tdsets
            .delete_collection(&DeleteParams::background(), &Default::default())
            .await;
        let Ok(left) = tdsets.list_metadata(&Default::default()).await else {
            return;
        };
        let release = serde_json::json!({"metadata": {"finalizers": null}});
        for t in left {
            let _ = tdsets
                .patch(
                    &kube::ResourceExt::name_any(&t),
                    &PatchParams::default(),
                    &Patch::Merge(&release),
                )
                .await;
        }
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

/// A client, the CRD installed, and a fresh namespace for one test.
pub async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, prefix).await;
    (client, ns)
}
