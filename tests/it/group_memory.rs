//! The group form's memory on the real API server: what a group reads costs what its plan
//! keeps, not what a tenant stores, under the orderings and shapes a tenant can choose. Apart
//! from `group.rs` so that these three (each has the API server encode tens of MB) run beside
//! the rest of the suite rather than at the end of the group's own tests.

use std::time::Duration;

use crate::group::{create_deployment_group, labelled};
use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;

/// The operator's peak RSS (MiB) once a group over `deployments` (created in the test's
/// namespace, all labelled `env: dev`) has matched them and listed them again after `edits`
/// label edits of `big-0`.
async fn group_peak_mib(
    client: &Client,
    n: &str,
    deployments: Vec<Value>,
    edits: usize,
    log: &str,
) -> u64 {
    let count = deployments.len() as i32;
    for mut d in deployments {
        // Paused: no ReplicaSet is made from the template (another copy of each large object
        // for the API server to store, send and delete), and the group reads none.
        d["spec"]["paused"] = json!(true);
        let _: Deployment = create_object(client, n, d).await;
    }
    create_deployment_group(client, n, "night", -60, 3600).await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let op = OperatorProcess::start(&kubeconfig, n, &[], log);
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    // Listing tens of MB takes a while on a loaded machine: a longer guard than GUARD.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    eventually(Duration::from_secs(600), "all matched", || async {
        let t = tdsets.get("night").await.ok()?;
        let matched = t.status?.group?.matched;
        (matched == count).then_some(())
    })
    .await;
    // Label edits, each waking the group to list them all again.
    for edit in 0..edits {
        let patch = json!({"metadata": {"labels": {"edit": edit.to_string()}}});
        api.patch("big-0", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        let reconciles = op.metric("tdset_reconciles_total");
        eventually(
            Duration::from_secs(600),
            "the group reconciled after the edit",
            || async { (op.metric("tdset_reconciles_total") > reconciles).then_some(()) },
        )
        .await;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", op.pid())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    peak_kib / 1024
}

/// What a group reads costs what the plan keeps, not what a tenant stores: 30 Deployments of
/// ~1 MB each (a pod template with a long `env` list, 200 KB of annotations), selected by one
/// group and edited six times, keep the operator's peak memory far under the chart's limit
/// (256 MiB).
#[tokio::test]
async fn large_workloads_in_a_group_do_not_cost_their_size_in_memory() {
    let (client, ns) = setup("group-large").await;
    let env: Vec<Value> = (0..9000)
        .map(|i| json!({"name": format!("SETTING_{i:05}"), "value": "x".repeat(60)}))
        .collect();
    let deployments = (0..30)
        .map(|i| {
            let mut d = labelled(app_deployment(&format!("big-{i}"), 0), "dev");
            d["spec"]["template"]["spec"]["containers"][0]["env"] = json!(env);
            // Annotations may hold 256 KiB in all.
            d["metadata"]["annotations"] = json!({"example.com/notes": "n".repeat(200_000)});
            d
        })
        .collect();
    let peak = group_peak_mib(&client, &ns.name, deployments, 6, "group-large.log").await;
    eprintln!("peak RSS {peak} MiB for 30 large workloads");
    assert!(peak < 96, "peak RSS {peak} MiB for 30 large workloads");
    ns.cleanup().await;
}

/// A page of a list is not sized by the objects a tenant names first: four tiny Deployments
/// (`a-0`..`a-3`, listed first) then 60 of ~1.1 MB each. Sized by the first page's average,
/// the next page asked for 250 objects and read them whole (issue 48: hundreds of MiB, and
/// with 120 such objects no reconcile finished within its 60 s); decoded as it arrives, a
/// page costs its largest object and what the plan keeps of the rest.
#[tokio::test]
async fn tiny_workloads_named_first_do_not_size_the_next_page() {
    let (client, ns) = setup("group-tiny-first").await;
    let env: Vec<Value> = (0..12_000)
        .map(|i| json!({"name": format!("SETTING_{i:05}"), "value": "x".repeat(60)}))
        .collect();
    let tiny = (0..4).map(|i| labelled(app_deployment(&format!("a-{i}"), 0), "dev"));
    let big = (0..60).map(|i| {
        let mut d = labelled(app_deployment(&format!("big-{i}"), 0), "dev");
        d["spec"]["template"]["spec"]["containers"][0]["env"] = json!(env);
        d
    });
    let deployments = tiny.chain(big).collect();
    let peak = group_peak_mib(&client, &ns.name, deployments, 1, "group-tiny-first.log").await;
    eprintln!("peak RSS {peak} MiB for 4 tiny then 60 large workloads");
    assert!(
        peak < 96,
        "peak RSS {peak} MiB for 4 tiny then 60 large workloads"
    );
    ns.cleanup().await;
}

/// Labels have no total bound (annotations do): 60 Deployments with ~0.9 MB of labels each
/// and 400 containers, each with requests, beside eight other groups that name their keys.
/// The group keeps of them what its placing reads (whether each selector picks them, the
/// summed requests), so the peak stays where the smaller case's is.
#[tokio::test]
async fn workloads_full_of_labels_and_containers_do_not_cost_their_size_in_memory() {
    let (client, ns) = setup("group-labels").await;
    let labels: serde_json::Map<String, Value> = (0..6500)
        .map(|i| {
            (
                format!("tenant.example.com/label-{i:05}-{}", "l".repeat(40)),
                json!("v".repeat(63)),
            )
        })
        .collect();
    let containers: Vec<Value> = (0..400)
        .map(|i| {
            json!({"name": format!("c{i}"), "image": "nginx:1.27",
                   "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}})
        })
        .collect();
    let deployments = (0..60)
        .map(|i| {
            let mut d = labelled(app_deployment(&format!("big-{i}"), 0), "dev");
            for (k, v) in &labels {
                d["metadata"]["labels"][k] = v.clone();
            }
            d["spec"]["template"]["spec"]["containers"] = json!(containers);
            d
        })
        .collect();
    // Eight more groups, each naming 32 of those keys (with values none has): what placing
    // reads of a workload's labels must not grow with the groups beside it.
    let keys: Vec<&String> = labels.keys().collect();
    for g in 0..8 {
        let named: serde_json::Map<String, Value> = (keys[g * 32..(g + 1) * 32].iter())
            .map(|k| (k.to_string(), json!("other")))
            .collect();
        let spec = json!({
            "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": named}},
            "schedulingConfig": [], "defaultReplica": 0,
        });
        create_tdset(&client, &ns.name, &tdset(&format!("other{g}"), spec)).await;
    }
    let peak = group_peak_mib(&client, &ns.name, deployments, 6, "group-labels.log").await;
    eprintln!("peak RSS {peak} MiB for 60 workloads full of labels");
    assert!(
        peak < 96,
        "peak RSS {peak} MiB for 60 workloads full of labels"
    );
    ns.cleanup().await;
}
