//! At a boundary the workload writes go first (issue 25): what users wait for is their
//! workloads' counts; the TDSets' statuses and Events can follow. The operator runs as the
//! release binary under a ServiceAccount, on a control plane of its own whose audit log records
//! every write it makes, in the order the API server received them.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use serde_json::json;
use tdset_operator::api::TDSet;

const N: usize = 200;
const GUARD: Duration = Duration::from_secs(600);

/// N TDSets whose window (3 replicas) starts at 10:00; 1 before. Their pods never schedule (no
/// node has the label), so no readiness changes make status writes of their own around the
/// boundary: every write after the start-up is the boundary's.
async fn tdsets_at_one_boundary(client: &kube::Client, ns: &str) {
    for i in 0..N {
        create_tdset(
            client,
            ns,
            &tdset(
                &format!("t{i}"),
                json!({"template": {"metadata": {"labels": {"app": format!("t{i}")}},
                                    "spec": {"nodeSelector": {"tdset-test/no-such-node": "true"},
                                             "containers": [{"name": "app", "image": "nginx:1.27"}]}},
                       "schedulingConfig": [{"startTime": "10:00", "endTime": "11:00", "replica": 3}],
                       "defaultReplica": 1}),
            ),
        )
        .await;
    }
}

/// Every Deployment at `replicas`, and every TDSet's status saying so.
async fn settled_at(client: &kube::Client, ns: &str, replicas: i32) {
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), ns);
    eventually(
        GUARD,
        &format!("every Deployment and status at {replicas}"),
        || async {
            let d = deploys.list(&ListParams::default()).await.ok()?.items;
            let t = tdsets.list(&ListParams::default()).await.ok()?.items;
            let deployed = d
                .iter()
                .filter(|d| crate::support::replicas(d) == Some(replicas))
                .count();
            let reported = t
                .iter()
                .filter(|t| {
                    t.status
                        .as_ref()
                        .is_some_and(|s| s.desired_replicas == Some(replicas))
                })
                .count();
            (deployed == N && reported == N).then_some(())
        },
    )
    .await;
}

/// The boundary's writes, told by what they write: a Deployment to 3, a status saying 3, a
/// ScaledUp Event. (Start-up writes, and statuses following kube-controller-manager's pace
/// before the boundary, say 1.)
fn workload_to_3(w: &AuditedWrite) -> bool {
    w.uri.contains("/deployments/") && w.body["spec"]["replicas"] == 3
}
fn status_at_3(w: &AuditedWrite) -> bool {
    w.uri.contains("/tdsets/")
        && w.uri.contains("/status")
        && w.body["status"]["desiredReplicas"] == 3
}
fn scaled_up_event(w: &AuditedWrite) -> bool {
    w.uri.contains("/events") && w.body["reason"] == "ScaledUp"
}

/// One test's cluster: an audited control plane, N TDSets at one boundary, and the operator
/// (as a ServiceAccount) started 30 s before it, once every Deployment is at 1.
struct Boundary {
    dir: std::path::PathBuf,
    audit_log: std::path::PathBuf,
    client: kube::Client,
    ns: TestNamespace,
    kubeconfig: std::path::PathBuf,
    user: String,
}

impl Boundary {
    async fn start(name: &str) -> (Boundary, OperatorProcess) {
        let dir = std::env::temp_dir().join(format!("tdset-{name}-{}", unique_suffix()));
        let (cp, audit_log) = start_audited_control_plane(&dir);
        let client = client_for(&cp.kubeconfig).await;
        install_crd(&client).await;
        let ns = TestNamespace::new(&client, name).await;
        let (kubeconfig, user) = operator_service_account(&cp.kubeconfig, &ns.name, "tdset").await;
        tdsets_at_one_boundary(&client, &ns.name).await;
        let op = OperatorProcess::start(
            &kubeconfig,
            &ns.name,
            &["--fake-now", "2026-05-04T09:59:30Z"],
            &format!("{name}-1.log"),
        );
        settled_at(&client, &ns.name, 1).await;
        let b = Boundary {
            dir,
            audit_log,
            client,
            ns,
            kubeconfig,
            user,
        };
        (b, op)
    }

    fn stop(self) {
        let _ = std::process::Command::new(script())
            .arg("stop")
            .arg(self.dir.join("cp"))
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn at_a_boundary_every_workload_write_is_sent_before_any_status_or_event() {
    let (b, op) = Boundary::start("order").await;
    let (client, audit_log, user) = (b.client.clone(), b.audit_log.clone(), b.user.clone());
    let ns = &b.ns;
    settled_at(&client, &ns.name, 3).await;
    // Every Event of the boundary is sent, too.
    eventually(GUARD, "a ScaledUp Event per TDSet", || async {
        let sent = audited_writes(&audit_log, &user)
            .iter()
            .filter(|w| scaled_up_event(w) && w.code == 201)
            .count();
        (sent >= N).then_some(())
    })
    .await;
    drop(op);

    let writes = audited_writes(&audit_log, &user);
    let workload: Vec<_> = writes.iter().filter(|w| workload_to_3(w)).collect();
    let statuses: Vec<_> = writes.iter().filter(|w| status_at_3(w)).collect();
    let events: Vec<_> = writes.iter().filter(|w| scaled_up_event(w)).collect();
    assert_eq!(
        workload.len(),
        N,
        "one workload write per TDSet: {workload:#?}"
    );
    assert_eq!(events.len(), N, "one Event per TDSet");
    let reported: std::collections::HashSet<_> = statuses
        .iter()
        .filter_map(|w| w.uri.split("/tdsets/").nth(1)?.split('/').next())
        .collect();
    assert_eq!(reported.len(), N, "a status at 3 for every TDSet");
    let bookkeeping: Vec<_> = statuses.iter().chain(events.iter()).collect();
    let first_workload = workload.iter().map(|w| w.at).min().unwrap();
    let last_workload = workload.iter().map(|w| w.at).max().unwrap();
    let first_bookkeeping = bookkeeping.iter().map(|w| w.at).min().unwrap();
    let last_bookkeeping = bookkeeping.iter().map(|w| w.at).max().unwrap();
    eprintln!(
        "{N} workload writes in {} ms; then {} statuses and {} Events in {} ms, the first {} ms after the last workload write",
        (last_workload - first_workload).num_milliseconds(),
        statuses.len(),
        events.len(),
        (last_bookkeeping - first_bookkeeping).num_milliseconds(),
        (first_bookkeeping - last_workload).num_milliseconds()
    );
    let early: Vec<_> = bookkeeping
        .iter()
        .filter(|w| w.at < last_workload)
        .map(|w| (w.at, w.uri.clone()))
        .collect();
    assert!(
        early.is_empty(),
        "{} status or Event writes of the boundary sent before its last workload write ({last_workload}): {early:#?}",
        early.len()
    );

    b.stop();
}

/// The operator killed the moment every Deployment is at the window's count (its statuses and
/// Events still waiting in the lane, or on their way) and started again: every status becomes
/// right, and not one workload is written again.
#[tokio::test]
async fn killed_right_after_the_scale_phase_the_operator_rewrites_no_workload() {
    let (b, op) = Boundary::start("crash").await;
    let (client, audit_log, user) = (b.client.clone(), b.audit_log.clone(), b.user.clone());
    let ns = &b.ns;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let generations = eventually(GUARD, "every Deployment at 3", || async {
        let d = deploys.list(&ListParams::default()).await.ok()?.items;
        d.iter()
            .all(|d| crate::support::replicas(d) == Some(3))
            .then(|| {
                d.iter()
                    .map(|d| (d.metadata.name.clone(), d.metadata.generation))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
    })
    .await;
    op.sigkill();
    let killed_at = chrono::Utc::now();
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let reported_before = tdsets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|t| {
            t.status
                .as_ref()
                .is_some_and(|s| s.desired_replicas == Some(3))
        })
        .count();
    assert_eq!(generations.len(), N);

    let restarted = OperatorProcess::start(
        &b.kubeconfig,
        &ns.name,
        &["--fake-now", "2026-05-04T10:00:30Z"],
        "crash-2.log",
    );
    settled_at(&client, &ns.name, 3).await;
    let workload_after: Vec<_> = audited_writes(&audit_log, &user)
        .into_iter()
        .filter(|w| w.at > killed_at && w.uri.contains("/deployments"))
        .collect();
    eprintln!(
        "killed with {reported_before} of {N} statuses at 3; after the restart every status at 3, {} workload writes",
        workload_after.len()
    );
    assert!(
        workload_after.is_empty(),
        "workloads written again after the restart: {workload_after:#?}"
    );
    let now: std::collections::BTreeMap<_, _> = deploys
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|d| (d.metadata.name.clone(), d.metadata.generation))
        .collect();
    assert_eq!(now, generations, "no Deployment's generation moved");
    drop(restarted);

    b.stop();
}
