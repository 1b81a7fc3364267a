//! Faults on the real control plane: the operator killed mid-way, the API server going away,
//! a leader dying, objects deleted under a reconcile. The operator runs as a real process
//! (the built binary) where a test kills it. Waits are hang guards, not speed assertions.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

const GUARD: Duration = Duration::from_secs(120);
/// How long a setup that no deadline depends on may take to settle on a loaded machine.
const SETTLE: Duration = Duration::from_secs(600);

fn tdset(name: &str, image: &str) -> TDSet {
    serde_json::from_value(json!({
        "apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": name},
        "spec": {"container": {"image": image, "port": 8080},
                 "schedulingConfig": [{"startTime": 0, "endTime": 12, "replica": 2}, {"startTime": 12, "endTime": 0, "replica": 2}],
                 "defaultReplica": 2}
    }))
    .unwrap()
}

async fn wait_until<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut f = f;
    eventually(GUARD, what, || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// Creates TDSet "web" (image nginx:1) and waits until its Deployment exists.
async fn web_created(client: &Client, ns: &str, what: &str) -> (Api<TDSet>, Api<Deployment>) {
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), ns);
    tdsets
        .create(&PostParams::default(), &tdset("web", "nginx:1"))
        .await
        .unwrap();
    wait_until(what, || async {
        deploys.get_opt("web").await.ok().flatten().is_some()
    })
    .await;
    (tdsets, deploys)
}

/// Two replicas with leader election (a 6 s lease in `ns`): `a` (through `a_kubeconfig`)
/// leads, `b` (through `b_kubeconfig`) is a ready standby.
async fn leader_and_standby(
    a_kubeconfig: &std::path::Path,
    b_kubeconfig: &std::path::Path,
    ns: &str,
    log: &str,
) -> (OperatorProcess, OperatorProcess) {
    let lease_args = [
        "--leader-elect",
        "true",
        "--lease-namespace",
        ns,
        "--lease-duration",
        "6",
    ];
    let a = OperatorProcess::start(
        a_kubeconfig,
        ns,
        &[&lease_args[..], &["--instance", "a"]].concat(),
        &format!("{log}-a.log"),
    );
    wait_until("a leads", || async { a.metric("tdset_leader") == 1.0 }).await;
    let b = OperatorProcess::start(
        b_kubeconfig,
        ns,
        &[&lease_args[..], &["--instance", "b"]].concat(),
        &format!("{log}-b.log"),
    );
    wait_until("b ready as a standby", || async {
        b.get("/readyz").is_some_and(|(c, _)| c == 200)
    })
    .await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_converging_then_restart_leaves_no_duplicates_or_orphans() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-kill").await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let op = OperatorProcess::start(&kubeconfig, &ns.name, &[], "fault-kill-1.log");
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let n = 200;
    let creating = {
        let tdsets = tdsets.clone();
        tokio::spawn(async move {
            stream::iter(0..n)
                .map(|i| {
                    let api = tdsets.clone();
                    async move {
                        api.create(&PostParams::default(), &tdset(&format!("t{i}"), "nginx"))
                            .await
                            .map(|_| ())
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await
        })
    };
    // Kill it part-way: some Deployments made, most not.
    wait_until("the operator to be part-way", || async {
        deploys
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len() >= 20)
            .unwrap_or(false)
    })
    .await;
    op.sigkill();
    let at_kill = deploys
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    creating.await.unwrap().unwrap();
    assert!(
        at_kill < n,
        "the operator finished before it was killed ({at_kill}); the test proves nothing"
    );

    let op = OperatorProcess::start(&kubeconfig, &ns.name, &[], "fault-kill-2.log");
    wait_until("all 200 converged after the restart", || async {
        let d = deploys
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let t = tdsets
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        d.iter()
            .filter(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(2))
            .count()
            == n
            && t.iter()
                .filter(|t| {
                    t.status
                        .as_ref()
                        .is_some_and(|s| s.desired_replicas == Some(2))
                })
                .count()
                == n
    })
    .await;
    let d = deploys.list(&ListParams::default()).await.unwrap().items;
    let t = tdsets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(d.len(), n, "duplicates or extras");
    for dep in &d {
        let owner = &dep
            .metadata
            .owner_references
            .as_ref()
            .expect("orphan Deployment")[0];
        let td = t
            .iter()
            .find(|t| t.name_any() == dep.name_any())
            .expect("Deployment without a TDSet of its name");
        assert_eq!(Some(owner.uid.as_str()), td.metadata.uid.as_deref());
    }
    eprintln!(
        "killed with {at_kill}/{n} Deployments made; after restart {}/{n}, all owned",
        d.len()
    );
    assert!(op.sigterm().success(), "SIGTERM must exit 0");
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_outage_is_survived_without_restart() {
    // A private control plane: this test stops its API server.
    let dir = std::env::temp_dir().join(format!("tdset-fault-cp-{}", unique_suffix()));
    let cp = start_control_plane(&dir);
    let client = client_for(&cp.kubeconfig).await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-outage").await;
    let mut op = OperatorProcess::start(&cp.kubeconfig, &ns.name, &[], "fault-outage.log");
    web_created(&client, &ns.name, "converged before the outage").await;

    let restart = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            Command::new(script())
                .arg("restart-apiserver")
                .arg(&dir)
                .arg("6")
                .output()
                .unwrap()
        })
    };
    // While the API server is down (and coming back), the operator keeps answering /healthz.
    let started = Instant::now();
    let mut probes = 0;
    while !restart.is_finished() {
        let (code, _) = op.get("/healthz").expect("operator unreachable");
        assert_eq!(code, 200);
        probes += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = restart.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() >= Duration::from_secs(6) && probes > 10);
    assert!(op.alive(), "the operator exited during the outage");

    // Changes made after the outage converge: the watches reconnected by themselves.
    let client = client_for(&cp.kubeconfig).await;
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    set_container(&tdsets, "web", "nginx:2", 8080).await;
    tdsets
        .create(&PostParams::default(), &tdset("after", "nginx:1"))
        .await
        .unwrap();
    wait_until("changes after the outage applied", || async {
        let web = deploys.get_opt("web").await.ok().flatten();
        let image = web.and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
        image.as_deref() == Some("nginx:2")
            && deploys.get_opt("after").await.ok().flatten().is_some()
    })
    .await;
    assert!(op.alive());
    assert!(op.sigterm().success());
    let _ = Command::new(script()).arg("stop").arg(&dir).status();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_hands_over_to_the_standby() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-leader").await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let (a, b) = leader_and_standby(&kubeconfig, &kubeconfig, &ns.name, "fault-leader").await;
    let (tdsets, deploys) =
        web_created(&client, &ns.name, "the leader creates the Deployment").await;
    assert!(a.metric("tdset_api_writes_total") > 0.0);
    assert_eq!(b.metric("tdset_api_writes_total"), 0.0, "the standby wrote");

    let killed = Instant::now();
    a.sigkill(); // no release: b must wait for the lease to expire
    wait_until("b takes over", || async { b.metric("tdset_leader") == 1.0 }).await;
    let handover = killed.elapsed();
    set_container(&tdsets, "web", "nginx:2", 8080).await;
    wait_until("the new leader applies changes", || async {
        let image = deploys
            .get_opt("web")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
        image.as_deref() == Some("nginx:2")
    })
    .await;
    eprintln!(
        "leader SIGKILLed; standby took over after {:.1} s (lease duration 6 s)",
        handover.as_secs_f64()
    );
    assert!(b.sigterm().success());
    ns.cleanup().await;
}

#[tokio::test]
async fn deletes_under_reconcile_and_create_delete_loops_leave_nothing_behind() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-churn").await;
    let op = Operator::start(&client, &ns.name, SystemClock::default(), None, "churn");
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    // Tight loops: create then delete at once, many names, and the same name over and over.
    for round in 0..5 {
        for i in 0..10 {
            tdsets
                .create(
                    &PostParams::default(),
                    &tdset(&format!("churn-{i}"), "nginx"),
                )
                .await
                .unwrap();
        }
        for i in 0..10 {
            tdsets
                .delete(&format!("churn-{i}"), &DeleteParams::background())
                .await
                .unwrap();
        }
        tdsets
            .create(
                &PostParams::default(),
                &tdset("same", &format!("nginx:{round}")),
            )
            .await
            .unwrap();
        if round < 4 {
            tdsets
                .delete("same", &DeleteParams::background())
                .await
                .unwrap();
            wait_until("same deleted", || async {
                matches!(tdsets.get_opt("same").await, Ok(None))
            })
            .await;
        }
    }
    // The survivor converges; everything else is garbage-collected.
    wait_until("only the survivor's Deployment remains", || async {
        let d = deploys
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        d.len() == 1
            && d[0].name_any() == "same"
            && d[0]
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref()?.containers.first()?.image.clone())
                .as_deref()
                == Some("nginx:4")
    })
    .await;
    let same = tdsets.get("same").await.unwrap();
    let owner = &deploys
        .get("same")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()[0];
    assert_eq!(
        Some(owner.uid.as_str()),
        same.metadata.uid.as_deref(),
        "the survivor's Deployment belongs to the current TDSet"
    );
    wait_until("the survivor is healthy", || async {
        tdsets
            .get("same")
            .await
            .ok()
            .and_then(|t| t.status)
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "False")
            })
    })
    .await;
    // No leak in the caches: the per-TDSet series exist for the survivor only.
    let text = op.metrics.render();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tdset_desired_replicas{"))
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
    assert!(series[0].contains("name=\"same\""));
    // And no error sticks: a fresh change reconciles cleanly.
    let errors = op.counter("tdset_reconcile_errors_total");
    tdsets
        .patch(
            "same",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"defaultReplica": 3,
        "schedulingConfig": []}})),
        )
        .await
        .unwrap();
    wait_until("change after churn", || async {
        deploys
            .get("same")
            .await
            .ok()
            .and_then(|d| d.spec?.replicas)
            == Some(3)
    })
    .await;
    assert_eq!(
        op.counter("tdset_reconcile_errors_total"),
        errors,
        "a reconcile error after the churn"
    );
    eprintln!("reconcile errors during churn (retried): {errors}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_right_after_its_first_scale_the_operator_still_restores_the_true_original() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-original").await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let _: Deployment = create_object(&client, &ns.name, app_deployment("web", 3)).await;
    // A watch, started before the operator, sees the first scale the moment it lands.
    let mut changes = kube::runtime::watcher(
        deploys.clone(),
        kube::runtime::watcher::Config::default().fields("metadata.name=web"),
    )
    .boxed();
    let op = OperatorProcess::start(&kubeconfig, &ns.name, &[], "fault-original-1.log");
    tdsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": "sched"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                         "onDelete": "Restore",
                         "schedulingConfig": [{"startTime": 0, "endTime": 12, "replica": 6}, {"startTime": 12, "endTime": 0, "replica": 6}],
                         "defaultReplica": 6}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let scaled = tokio::time::timeout(GUARD, async {
        while let Some(event) = changes.next().await {
            if let Ok(kube::runtime::watcher::Event::Apply(d)) = event
                && replicas(&d) == Some(6)
            {
                return;
            }
        }
    })
    .await;
    op.sigkill();
    assert!(scaled.is_ok(), "the operator never scaled the Deployment");
    // A new operator, then the deletion: the Deployment goes back to 3, not to the 6 the
    // first operator set.
    let op = OperatorProcess::start(&kubeconfig, &ns.name, &[], "fault-original-2.log");
    tdsets
        .delete("sched", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the TDSet is gone", || async {
        tdsets.get_opt("sched").await.ok().flatten().is_none()
    })
    .await;
    let restored = deploys.get("web").await.unwrap();
    assert_eq!(
        replicas(&restored),
        Some(3),
        "Restore put back the operator's own count"
    );
    assert!(op.sigterm().success());
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_before_the_standby_takes_over() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-blackhole").await;
    let kubeconfig = control_plane().kubeconfig.clone();
    let line = BlackHole::start(&kubeconfig, &std::env::temp_dir()).await;
    // a reaches the API server through the line that will be cut; b directly.
    let (a, b) =
        leader_and_standby(&line.kubeconfig, &kubeconfig, &ns.name, "fault-blackhole").await;
    let (tdsets, deploys) = web_created(&client, &ns.name, "a creates the Deployment").await;

    let cut_at = Instant::now();
    line.cut(true);
    // a must stop before b can lead: poll both, a first, and b's first lead must find a
    // already stopped.
    let mut a_stopped = None;
    eventually(GUARD, "b takes over", || {
        let (a_leads, b_leads) = (a.metric("tdset_leader"), b.metric("tdset_leader"));
        if a_leads == 0.0 && a_stopped.is_none() {
            a_stopped = Some((cut_at.elapsed(), a.metric("tdset_api_writes_total")));
        }
        if b_leads == 1.0 {
            assert!(
                a_stopped.is_some(),
                "b leads while the cut-off a still reconciles"
            );
        }
        async move { (b_leads == 1.0).then_some(()) }
    })
    .await;
    let (stopped_after, a_writes) = a_stopped.unwrap();
    let took_over = cut_at.elapsed();
    // Changes made while a is cut off are b's to apply.
    set_container(&tdsets, "web", "nginx:2", 8080).await;
    wait_until("b applies the change", || async {
        let image = deploys
            .get_opt("web")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone());
        image.as_deref() == Some("nginx:2")
    })
    .await;
    // The line stays down for 40 s, then comes back: a stands by and sends nothing of what it
    // had before it stopped.
    tokio::time::sleep(Duration::from_secs(40).saturating_sub(cut_at.elapsed())).await;
    line.cut(false);
    wait_until("a is ready again as a standby", || async {
        a.get("/readyz").is_some_and(|(c, _)| c == 200)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(a.metric("tdset_leader"), 0.0);
    assert_eq!(b.metric("tdset_leader"), 1.0);
    assert_eq!(
        a.metric("tdset_api_writes_total"),
        a_writes,
        "a wrote after it stopped leading"
    );
    let image = deploys
        .get("web")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.template.spec?.containers.first()?.image.clone());
    assert_eq!(image.as_deref(), Some("nginx:2"), "b's change was undone");
    eprintln!(
        "line cut: a stopped after {:.1} s, b led after {:.1} s (lease 6 s, renew deadline 4 s)",
        stopped_after.as_secs_f64(),
        took_over.as_secs_f64()
    );
    assert!(a.sigterm().success());
    assert!(b.sigterm().success());
    ns.cleanup().await;
}

/// The connections the operator holds go dead under it (a load balancer's backend vanishing
/// without a reset: no error, no reply, ever), while new connections work. The boundary's
/// reconcile sends its write on a pooled dead connection; it must end by its timeout and the
/// retry, on a new connection, must land the window's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_stuck_on_a_dead_connection_ends_and_the_transition_lands_after() {
    let client = client().await;
    install_crd(&client).await;
    let line = BlackHole::start(&control_plane().kubeconfig, &std::env::temp_dir()).await;
    // The cut must come shortly before the boundary, with everything settled, and soon after
    // the operator's last requests (a longer lead leaves no idle connection to die: the
    // boundary's write then opens a new one and proves nothing). The setup settles first under
    // an operator whose clock is an hour before the window, however long a loaded machine
    // takes to make the pod ready (a neighbour's churn can fill the controllers' queues for
    // minutes); a second operator, on the line, then starts shortly before the boundary.
    let mut settled = None;
    for _ in 0..3 {
        settled = settled_then_restarted_before_a_boundary(&client, &line, 25).await;
        if settled.is_some() {
            break;
        }
    }
    let (ns, op, boundary) =
        settled.expect("the restarted operator settled before the boundary in 3 attempts");
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    // Shortly before the boundary, so that the requests before it have left idle connections
    // in the operator's pool, every connection it holds goes dead.
    tokio::time::sleep_until((boundary - Duration::from_secs(5)).into()).await;
    line.cut_open_connections();
    let cut = Instant::now();
    assert_eq!(
        deploys.get("web").await.ok().as_ref().and_then(replicas),
        Some(1),
        "the line was cut after the boundary: the setup was too slow for what this test proves"
    );
    // A request on a dead connection never fails by itself: without a read timeout or a
    // reconcile deadline the reconcile waits for ever and the count never lands. Each dead
    // connection the retries meet costs one read timeout (30 s), so the guard is generous.
    eventually(Duration::from_secs(300), "the window's count lands", || {
        let deploys = deploys.clone();
        async move {
            (deploys.get("web").await.ok().as_ref().and_then(replicas) == Some(3)).then_some(())
        }
    })
    .await;
    assert!(
        op.metric("tdset_reconcile_errors_total") > 0.0,
        "the stuck reconcile ended in an error, and was retried"
    );
    eprintln!(
        "dead connections: the window's count landed {:.1} s after the cut (boundary ~5 s after it)",
        cut.elapsed().as_secs_f64()
    );
    assert!(op.sigterm().success());
    ns.cleanup().await;
}

/// A Deployment at 1 with its replica ready and the TDSet's status written (by an operator
/// whose clock is an hour before a window that takes it from 1 to 3), then a fresh operator on
/// `line` whose clock starts `lead` seconds before that window, once it has written; with the
/// boundary's instant on the test's clock. None, with everything removed, when the fresh
/// operator was not at work 8 s before the boundary.
async fn settled_then_restarted_before_a_boundary(
    client: &Client,
    line: &BlackHole,
    lead: u64,
) -> Option<(TestNamespace, OperatorProcess, Instant)> {
    let ns = TestNamespace::new(client, "fault-stuck").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let window = chrono::DateTime::parse_from_rfc3339("2026-05-01T12:00:00Z").unwrap();
    let clock_at = |before: i64| (window - chrono::Duration::seconds(before)).to_rfc3339();
    let setup = OperatorProcess::start(
        &control_plane().kubeconfig,
        &ns.name,
        &["--fake-now", &clock_at(3600)],
        "fault-stuck-setup.log",
    );
    tdsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "schedule.rs/v1", "kind": "TDSet", "metadata": {"name": "web"},
                "spec": {"container": {"image": "nginx:1", "port": 8080},
                         "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}],
                         "defaultReplica": 1}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // Ready too: a status write still due when the line is cut (the pod's readiness) would
    // take the pooled dead connection itself, and the boundary's write would open a new one.
    // A setup, an hour before the window: it may take as long as a loaded machine needs.
    eventually(
        SETTLE,
        "the Deployment at 1, its replica ready and in status",
        || {
            let (deploys, tdsets) = (deploys.clone(), tdsets.clone());
            async move {
                let at_one = deploys
                    .get_opt("web")
                    .await
                    .ok()
                    .flatten()
                    .as_ref()
                    .and_then(replicas)
                    == Some(1);
                let status = tdsets.get_status("web").await.ok().and_then(|t| t.status);
                (at_one
                    && status.is_some_and(|s| s.replicas == Some(1) && s.ready_replicas == Some(1)))
                .then_some(())
            }
        },
    )
    .await;
    assert!(setup.sigterm().success());
    let op = OperatorProcess::start(
        &line.kubeconfig,
        &ns.name,
        &["--fake-now", &clock_at(lead as i64)],
        "fault-stuck.log",
    );
    let boundary = Instant::now() + Duration::from_secs(lead);
    // A fresh operator reads and watches, which leaves no idle connection in its pool: a change
    // of spec that moves no count has it write the status once, on a connection that then
    // waits in the pool for the boundary's write.
    let at_work = tokio::time::timeout_at((boundary - Duration::from_secs(8)).into(), async {
        eventually(GUARD, "the fresh operator reconciled the TDSet", || {
            let ok = op.metric("tdset_reconciles_total") > 0.0;
            async move { ok.then_some(()) }
        })
        .await;
        let evening = json!({"spec": {"schedulingConfig": [
            {"startTime": "12:00", "endTime": "13:00", "replica": 3},
            {"startTime": "20:00", "endTime": "21:00", "replica": 1}]}});
        let generation = tdsets
            .patch("web", &PatchParams::default(), &Patch::Merge(&evening))
            .await
            .unwrap()
            .metadata
            .generation;
        eventually(GUARD, "the fresh operator wrote the status", || {
            let tdsets = tdsets.clone();
            async move {
                let status = tdsets.get_status("web").await.ok().and_then(|t| t.status);
                (status.and_then(|s| s.observed_generation) == generation).then_some(())
            }
        })
        .await
    })
    .await;
    if at_work.is_ok() {
        return Some((ns, op, boundary));
    }
    eprintln!("the fresh operator was not at work 8 s before the boundary; trying again");
    drop(op);
    ns.cleanup().await;
    None
}

/// A peer that vanishes without a reset (a dropped route, a dead node) is only noticed on an
/// idle connection by TCP keepalive; without it a watch waits for ever. Every connection the
/// operator holds to the API server is probed, and soon (the kernel's default is 2 h).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_to_the_api_server_is_probed_by_keepalive() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "fault-keepalive").await;
    let kubeconfig = &control_plane().kubeconfig;
    let port: u16 = api_server_addr(kubeconfig)
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the kubeconfig's server");
    let op = OperatorProcess::start(kubeconfig, &ns.name, &[], "fault-keepalive.log");
    let (_tdsets, _deploys) = web_created(&client, &ns.name, "the operator at work").await;
    // Sampled until every connection is idle (a connection with a request in flight carries
    // the retransmit timer instead).
    let timers = eventually(GUARD, "a sample with every connection idle", || async {
        let timers = tcp_timers_to(op.pid(), port);
        let idle = !timers.is_empty() && timers.iter().all(|(tr, _)| *tr != 1);
        idle.then_some(timers)
    })
    .await;
    eprintln!("the operator's connections to the API server (timer, fires in s): {timers:?}");
    for (tr, when) in &timers {
        assert_eq!(*tr, 2, "a connection without keepalive: {timers:?}");
        assert!(
            *when <= 30.0,
            "keepalive probes only after {when} s of silence: {timers:?}"
        );
    }
    assert!(op.sigterm().success());
    ns.cleanup().await;
}
