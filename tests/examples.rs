//! Every manifest under examples/ applied to the real API server; the operator, run at two
//! instants, sets exactly the replicas `preview` computes for them.

mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use support::*;
use tdset_operator::clock::SystemClock;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[tokio::test]
async fn examples_apply_and_converge_to_preview() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "examples").await;
    let _ = kubectl(&["create", "namespace", "temp"]);
    let mut examples: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 5, "{examples:?}");

    // (path, namespace, name, schedule)
    let mut applied = Vec::new();
    for path in &examples {
        let (tdset, schedule) =
            tdset_operator::preview::load_manifest(path.to_str().unwrap()).unwrap();
        // The seed names its namespace; the others go where they are applied.
        let target = tdset
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| ns.name.clone());
        let out = kubectl(&["apply", "-n", &target, "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        applied.push((
            path.clone(),
            target,
            tdset.metadata.name.clone().unwrap(),
            schedule,
        ));
    }

    // A weekday morning in Europe, then a night in New York.
    for at in [utc("2026-05-06T10:00:00Z"), utc("2026-05-07T03:00:00Z")] {
        let mut operators = Vec::new();
        for target in [ns.name.as_str(), "temp"] {
            operators.push(Operator::start(
                &client,
                target,
                SystemClock::starting_at(at),
                None,
                "examples",
            ));
        }
        for (path, target, name, schedule) in &applied {
            let want = schedule.evaluate(at).replicas;
            let api: Api<Deployment> = Api::namespaced(client.clone(), target);
            eventually(
                Duration::from_secs(60),
                &format!("{} at {at}: {want} replicas", path.display()),
                || async {
                    api.get_opt(name)
                        .await
                        .ok()
                        .flatten()
                        .filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(want))
                },
            )
            .await;
        }
        for op in operators {
            op.stop().await;
        }
    }
    let svc = Api::<Service>::namespaced(client.clone(), &ns.name)
        .get("hello-with-service")
        .await
        .unwrap();
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 80);
    let seed = repo_root().join("examples/tdset_helloworld.yaml");
    let _ = kubectl(&["delete", "-f", seed.to_str().unwrap(), "--wait=false"]);
    ns.cleanup().await;
}
