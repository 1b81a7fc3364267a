//! Told to slow down, the operator slows down: API Priority and Fairness answers its writes
//! with 429 and `Retry-After`, and the boundary still completes. The operator runs as the
//! release binary (its own client stack) under a ServiceAccount, whose writes a FlowSchema
//! sends to a priority level of one seat that rejects what does not fit; a control plane of its
//! own keeps an audit log of those writes, which shows when each refused one came again.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::json;

/// 429s the API server has answered for priority level `level` so far.
async fn rejected(client: &kube::Client, level: &str) -> f64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = client
        .request_text(req)
        .await
        .expect("the API server's metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{"))
        .filter(|l| l.contains(&format!("priority_level=\"{level}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn flowcontrol(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "flowcontrol.apiserver.k8s.io".into(),
        version: "v1".into(),
        api_version: "flowcontrol.apiserver.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[tokio::test]
async fn throttled_with_429s_the_operator_waits_as_told_and_the_boundary_still_completes() {
    let dir = std::env::temp_dir().join(format!("tdset-throttled-{}", unique_suffix()));
    let (cp, audit_log) = start_audited_control_plane(&dir);
    let client = client_for(&cp.kubeconfig).await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "throttled").await;
    let sa = "tdset-throttled";
    // One seat for the ServiceAccount's writes, and no queue: what does not fit gets 429.
    let level = format!("{}-one-seat", ns.name);
    let plc = flowcontrol("PriorityLevelConfiguration", "prioritylevelconfigurations");
    let fs = flowcontrol("FlowSchema", "flowschemas");
    let levels: Api<DynamicObject> = Api::all_with(client.clone(), &plc);
    let schemas: Api<DynamicObject> = Api::all_with(client.clone(), &fs);
    let object = |ar: &ApiResource, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": ar.api_version, "kind": ar.kind,
            "metadata": {"name": level}, "spec": spec
        }))
        .expect("a flowcontrol object")
    };
    levels
        .create(
            &PostParams::default(),
            &object(
                &plc,
                json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                                                       "limitResponse": {"type": "Reject"}}}),
            ),
        )
        .await
        .expect("the priority level");
    schemas
        .create(
            &PostParams::default(),
            &object(
                &fs,
                json!({"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 500,
                       "distinguisherMethod": {"type": "ByUser"},
                       "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": sa, "namespace": ns.name}}],
                                  "resourceRules": [{"verbs": ["create", "update", "patch", "delete"], "apiGroups": ["*"],
                                                     "resources": ["*"], "namespaces": ["*"], "clusterScope": true}]}]}),
            ),
        )
        .await
        .expect("the flow schema");
    let (kubeconfig, user) = operator_service_account(&cp.kubeconfig, &ns.name, sa).await;

    // 60 TDSets whose window starts at 10:00; the operator's clock starts at 09:59:50.
    let n = 60;
    for i in 0..n {
        create_tdset(
            &client,
            &ns.name,
            &tdset(
                &format!("t{i}"),
                json!({"container": {"image": "nginx:1.27", "port": 8080},
                       "schedulingConfig": [{"startTime": "10:00", "endTime": "11:00", "replica": 3}],
                       "defaultReplica": 1}),
            ),
        )
        .await;
    }
    let before = rejected(&client, &level).await;
    let started = tokio::time::Instant::now();
    let op = OperatorProcess::start(
        &kubeconfig,
        &ns.name,
        &["--fake-now", "2026-05-04T09:59:50Z"],
        "throttled.log",
    );
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    eventually(
        Duration::from_secs(600),
        "every Deployment at the window's 3",
        || async {
            let at_3 = deploys
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().filter(|d| replicas(d) == Some(3)).count())
                .unwrap_or(0);
            (at_3 == n).then_some(())
        },
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let rejections = rejected(&client, &level).await - before;
    eprintln!("{rejections} 429s in {elapsed:.1} s");
    assert!(
        rejections > 0.0,
        "the API server refused nothing: the test proves nothing"
    );
    // None of the reconciles gave up on the way.
    assert_eq!(op.metric("tdset_reconcile_errors_total"), 0.0);
    drop(op);

    // Each refused patch or update of an object came again no sooner than the second
    // `Retry-After` asked for. (Creates and Events share their URIs between objects, so only
    // writes to one named object are paired.)
    let writes = audited_writes(&audit_log, &user);
    let refused: Vec<_> = writes
        .iter()
        .filter(|w| w.code == 429 && w.verb != "create" && !w.uri.contains("/events"))
        .collect();
    assert!(
        !refused.is_empty(),
        "no refused patch in the audit log: {} writes",
        writes.len()
    );
    let mut early = Vec::new();
    for r in &refused {
        let next = writes
            .iter()
            .filter(|w| w.verb == r.verb && w.uri == r.uri && w.at > r.at)
            .map(|w| w.at)
            .min();
        if let Some(next) = next
            && (next - r.at).num_milliseconds() < 900
        {
            early.push((r.uri.clone(), (next - r.at).num_milliseconds()));
        }
    }
    eprintln!(
        "{} refused patches, retried after >= 0.9 s: {}",
        refused.len(),
        refused.len() - early.len()
    );
    assert!(early.is_empty(), "sent again before Retry-After: {early:?}");

    let _ = std::process::Command::new(script())
        .arg("stop")
        .arg(dir.join("cp"))
        .status();
    let _ = std::fs::remove_dir_all(&dir);
}
