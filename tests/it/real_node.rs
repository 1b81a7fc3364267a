//! The operator as users run it: the image built from the repository's Dockerfile (its
//! `prebuilt` target, with buildah; docs/install.md, "Build the image"), installed by the Helm chart on a
//! real node (containerd, runc, kubelet, kube-proxy; `control-plane.sh start --real-node`),
//! beside a TDSet whose pods really run. Nothing here is simulated: the probes are real HTTP
//! requests, the operator finds the API server through in-cluster configuration and the
//! `kubernetes` Service, and a deleted pod really gets SIGTERM.
//!
//! Skipped, with the reason, only where `control-plane.sh node-check` says the machine cannot
//! run a node (not root, or containerd/runc/buildah/iptables/CNI plugins missing; test.sh
//! installs them with apt when it runs as root).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::ingress::*;
use crate::support::node::*;
use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tdset_operator::api::TDSet;

const GUARD: Duration = NODE_GUARD;

async fn operator_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app.kubernetes.io/name=tdset-operator"))
        .await
        .expect("listing the operator's pods")
        .items
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(RELEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// A window from a minute ago to half an hour from now (UTC), at `replica`, else 0.
fn window_spec(replica: i32) -> serde_json::Value {
    let now = chrono::Utc::now();
    let at = |t: chrono::DateTime<chrono::Utc>| t.format("%H:%M").to_string();
    json!({
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{
                "name": "web",
                "image": WORKLOAD_IMAGE,
                "imagePullPolicy": "Never",
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true,
                                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }]}
        },
        "service": {"port": 80},
        "timeZone": "UTC",
        "schedulingConfig": [{
            "name": "now",
            "startTime": at(now - chrono::Duration::minutes(1)),
            "endTime": at(now + chrono::Duration::minutes(30)),
            "replica": replica
        }],
        "defaultReplica": 0
    })
}

#[tokio::test]
async fn the_chart_and_its_image_run_for_real_on_a_real_node() {
    if let Some(why) = real_node_unavailable() {
        eprintln!("SKIPPED: this machine cannot run a real node: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tdset-real-node-{}", unique_suffix()));
    let host = HostState::now();
    let t = Instant::now();
    let cp = start_real_node_cluster(&dir);
    eprintln!("real node Ready in {:.1}s", t.elapsed().as_secs_f64());
    let kc = cp.kubeconfig.clone();

    // The image, as docs/install.md, "Build the image" says (buildah standing in for docker).
    let t = Instant::now();
    operator_image_on_node(&dir);
    eprintln!(
        "image built from {} and loaded in {:.1}s",
        env!("CARGO_BIN_EXE_tdset-operator"),
        t.elapsed().as_secs_f64()
    );
    let client = client_for(&kc).await;

    // The chart, with that image; `--wait` returns once both pods pass their real probes.
    let t = Instant::now();
    // Everything at its default but where idleness reads traffic (the node's Prometheus) and
    // the rates' window: 90 s, as long as an answer counts (three reads of 30 s, the default),
    // not 120 s, so the idle test below waits less.
    let prometheus = format!("idle.prometheusUrl={}", node_prometheus_url(&dir));
    install_chart_on_node(&kc, &[&prometheus, "idle.rateWindow=90"]);
    eprintln!(
        "helm install --wait: both operator pods Ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let running = operator_pods(&pods).await;
    assert_eq!(running.len(), 2, "the chart's two replicas");
    for p in &running {
        assert!(ready(p), "{} Ready through its probes", name(p));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("real-node"));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some(RELEASE),
            "the release's ServiceAccount"
        );
        let c = first_container(p);
        assert!(
            c.image.contains(IMAGE_REPO),
            "runs the image built here: {}",
            c.image
        );
    }
    let leader = eventually(GUARD, "a leader", || async { holder(&leases).await }).await;
    assert!(
        running.iter().any(|p| name(p) == leader),
        "the lease is held by one of the operator's pods, not {leader}"
    );

    // One leader, seen from inside each pod (the pod proxy reaches each pod's metrics port).
    let mut leaders = 0.0;
    for p in &running {
        leaders += eventually(GUARD, "a pod's tdset_leader", || async {
            let text = raw_get(
                &kc,
                &format!(
                    "/api/v1/namespaces/{NS}/pods/{}:8080/proxy/metrics",
                    name(p)
                ),
            )?;
            metric(&text, "tdset_leader")
        })
        .await;
    }
    // Each operator process, seen from the host, runs as user 65532 on a read-only root.
    for p in &running {
        let id = first_container(p)
            .container_id
            .clone()
            .expect("a running container's id");
        let pids = container_pids(id.trim_start_matches("containerd://"));
        assert!(!pids.is_empty(), "{}'s process on the host", name(p));
        for pid in pids {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
            assert!(
                uid.split_whitespace().skip(1).all(|u| u == "65532"),
                "{uid}"
            );
            let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
            let root = mounts
                .lines()
                .find(|l| l.split_whitespace().nth(4) == Some("/"))
                .expect("the container's root mount");
            let options = root.split_whitespace().nth(5).unwrap_or_default();
            assert!(options.split(',').any(|o| o == "ro"), "root mount: {root}");
        }
    }
    assert_eq!(leaders, 1.0, "exactly one pod leads");

    // A TDSet, reconciled by the pod through in-cluster configuration and its ServiceAccount:
    // its pods really start and pass a real readiness probe.
    let apps = "apps";
    succeeded(
        "creating the workloads' namespace",
        kubectl_at(&kc, &["create", "namespace", apps]),
    );
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), apps);
    let t = Instant::now();
    create_tdset(&client, apps, &tdset("web", window_spec(3))).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), apps);
    let available = |n: i32| {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get_opt("web").await.ok().flatten()?;
            let s = d.status?;
            (d.spec?.replicas == Some(n)
                && s.available_replicas.unwrap_or(0) == n
                && s.replicas.unwrap_or(0) == n)
                .then_some(())
        }
    };
    eventually(GUARD, "3 of the TDSet's pods Available", || available(3)).await;
    eprintln!(
        "TDSet created -> 3 real pods Available in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let workload_pods: Api<Pod> = Api::namespaced(client.clone(), apps);
    let web = workload_pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(web.len(), 3);
    for p in &web {
        let c = first_container(p);
        assert!(
            c.state.as_ref().and_then(|s| s.running.as_ref()).is_some() && c.ready,
            "{} running and ready: {c:?}",
            name(p)
        );
    }
    // Through the TDSet's Service (its endpoints are the Ready pods), the workload answers.
    let body = eventually(GUARD, "the workload's Service answers", || async {
        raw_get(
            &kc,
            &format!("/api/v1/namespaces/{apps}/services/http:web:80/proxy/healthz"),
        )
    })
    .await;
    assert_eq!(body.trim(), "ok");
    eventually(GUARD, "the TDSet's status: 3 ready", || async {
        let s = tdsets.get("web").await.ok()?.status?;
        (s.replicas == Some(3) && s.ready_replicas == Some(3)).then_some(())
    })
    .await;

    // /metrics through the chart's metrics Service, as Prometheus would scrape it.
    let text = eventually(GUARD, "/metrics through the metrics Service", || async {
        raw_get(
            &kc,
            &format!(
                "/api/v1/namespaces/{NS}/services/http:{RELEASE}-metrics:metrics/proxy/metrics"
            ),
        )
    })
    .await;
    assert!(
        metric(&text, "tdset_leader").is_some(),
        "the operator's metrics behind the Service:\n{text}"
    );

    // `kubectl logs` shows the structured (JSON) logs.
    let logs = succeeded(
        "kubectl logs",
        kubectl_at(&kc, &["-n", NS, "logs", &leader]),
    );
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message"] == "caches synced; ready"),
        "the leader's logs: {logs}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );

    // The leader's pod deleted: the kubelet sends SIGTERM, the operator finishes, gives up the
    // lease and exits 0, and the other pod takes over. Its logs are followed until it ends.
    let mut follow = Command::new(kubectl_path())
        .env("KUBECONFIG", &kc)
        .args(["-n", NS, "logs", "-f", &leader])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    // Read on a thread from here on; the first line (the pod has logged already) says the
    // stream is open before the pod is deleted.
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut out = String::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if out.is_empty() {
                let _ = first_tx.send(());
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    });
    first_rx
        .recv_timeout(GUARD)
        .expect("kubectl logs -f printed the pod's logs");
    let exit_code = {
        let pods = pods.clone();
        let leader = leader.clone();
        tokio::spawn(async move { terminated_exit_code(&pods, &leader).await })
    };
    let t = Instant::now();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .expect("deleting the leader's pod");
    let successor = eventually(GUARD, "another pod leads", || async {
        holder(&leases).await.filter(|h| *h != leader)
    })
    .await;
    let handover = t.elapsed();
    eprintln!(
        "leader pod deleted -> {successor} holds the lease after {:.2}s (lease duration 15s)",
        handover.as_secs_f64()
    );
    // The standby, or the pod the Deployment started in the leader's place, whichever asked
    // first: both are the release's pods.
    assert!(
        operator_pods(&pods)
            .await
            .iter()
            .any(|p| name(p) == successor),
        "one of the release's pods took over, not {successor}"
    );
    let _ = follow.wait();
    let out = reader.join().unwrap();
    let last: Vec<String> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|l| l["message"].as_str().unwrap_or_default().to_string())
        .collect();
    eprintln!(
        "the old leader's last log lines: {:?}",
        &last[last.len().saturating_sub(4)..]
    );
    for expected in [
        "SIGTERM received; finishing in-flight reconciles",
        "released the leader lease",
        "shut down",
    ] {
        assert!(
            last.iter().any(|m| m == expected),
            "{expected:?} in the old leader's logs: {out}"
        );
    }
    assert_eq!(
        exit_code.await.unwrap(),
        0,
        "the operator exits 0 on SIGTERM"
    );

    // The leader crashes (SIGKILL from the host: no release, no clean exit). The kubelet
    // restarts its container, and whichever process asks first after that (the restarted one,
    // which may take a lease naming its own pod at once, or a standby, once the lease has
    // expired) starts a new leadership.
    let crashed = successor;
    let transitions = |l: Option<Lease>| {
        l.and_then(|l| l.spec)
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0)
    };
    let before = transitions(leases.get_opt(RELEASE).await.unwrap());
    // The kubelet reports the container a moment after it starts (it may lead before that).
    let container_id = eventually(GUARD, "the leader's container id", || async {
        let p = pods.get_opt(&crashed).await.ok().flatten()?;
        p.status?.container_statuses?.first()?.container_id.clone()
    })
    .await;
    let container_id = container_id.trim_start_matches("containerd://");
    let killed = kill_container(container_id);
    assert!(killed > 0, "found {crashed}'s process on the host");
    let t = Instant::now();
    let new_leader = eventually(GUARD, "a new leadership after the crash", || async {
        let l = leases.get_opt(RELEASE).await.ok().flatten();
        let holder = l
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.clone());
        (transitions(l) > before).then_some(holder).flatten()
    })
    .await;
    eprintln!(
        "leader {crashed} killed (SIGKILL) -> new leadership by {new_leader} after {:.2}s",
        t.elapsed().as_secs_f64()
    );
    eventually(
        GUARD,
        "the crashed pod's container restarted and Ready",
        || async {
            let p = pods.get_opt(&crashed).await.ok().flatten()?;
            let restarts = p.status.as_ref()?.container_statuses.as_ref()?[0].restart_count;
            (restarts == 1 && ready(&p)).then_some(())
        },
    )
    .await;

    // The new leader acts: the window's count lowered to 1, two pods really stop.
    let t = Instant::now();
    tdsets
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"schedulingConfig": window_spec(1)["schedulingConfig"]}}),
            ),
        )
        .await
        .expect("lowering the window's count");
    eventually(GUARD, "1 pod Available, the others gone", || async {
        available(1).await?;
        let left = workload_pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?
            .items;
        (left.len() == 1).then_some(())
    })
    .await;
    eprintln!(
        "window lowered to 1 -> 2 pods stopped and removed in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    // The Deployment puts a new operator pod beside the leader; it becomes Ready as a standby.
    eventually(GUARD, "two Ready operator pods again", || async {
        let ps = operator_pods(&pods).await;
        (ps.iter().filter(|p| ready(p)).count() == 2).then_some(())
    })
    .await;

    // The wake proxy as the chart installs it by default finds the operator's wake Service by
    // its ClusterIP through the API: this node has no cluster DNS (a `.svc` name timed out at
    // every report, and nothing woke). Ready means it reaches the operator.
    let proxies: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(NODE_GUARD, "two Ready wake-proxy pods", || async {
        let ps = (proxies
            .list(&ListParams::default().labels(WAKE_PROXY_PODS))
            .await)
            .ok()?;
        (ps.items.iter().filter(|p| ready(p)).count() == 2).then_some(())
    })
    .await;

    // On the node at once: the tiers' pods beside the warm-up's and the woken ones, some of
    // them woken through an ingress controller.
    tokio::join!(
        warm_up_on_real_pods(&client, apps),
        tiers_on_real_pods(&client, apps),
        wake_on_real_pods(&client, apps, &dir),
        woken_through_an_ingress_controller(&client, apps, &dir, &kc),
    );
    // Then the faults, one at a time: each stops a part the scenarios above share.
    wake_faults_on_real_pods(&client, apps, &dir).await;

    // Uninstalled, the operator's pods really stop. (Not `--wait`: Kubernetes' ClusterRole
    // aggregation controller may recreate the deleted aggregated role, and Helm would wait for
    // it; docs/install.md, "Install" and tests/helm.rs cover that.)
    succeeded(
        "helm uninstall",
        helm(&kc, &["uninstall", RELEASE, "--namespace", NS]),
    );
    eventually(GUARD, "the operator's pods gone", || async {
        operator_pods(&pods).await.is_empty().then_some(())
    })
    .await;
    // The TDSet's pod is still running: stopping does not depend on draining first.
    stop_leaves_nothing_behind(&dir, &host);
}

/// Stops the cluster and checks the host: no process, mount, network namespace, link,
/// iptables rule or cgroup of the node is left.
fn stop_leaves_nothing_behind(dir: &Path, host: &HostState) {
    let index = std::fs::read_to_string(dir.join("node/index")).expect("the node's index");
    let ns = format!("tdset-node-{}", index.trim());
    script_output("stopping the cluster", &["stop", dir.to_str().unwrap()]);
    assert_eq!(
        &HostState::now(),
        host,
        "the host's settings after the node"
    );
    let output = |cmd: &str, args: &[&str]| {
        let out = Command::new(cmd).args(args).output().expect(cmd);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dir_text = dir.to_string_lossy().into_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&dir_text) && !mounts.contains(&ns),
        "mounts left: {mounts}"
    );
    let netns = output("ip", &["netns", "list"]);
    assert!(
        !netns
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ns.as_str())),
        "network namespace left: {netns}"
    );
    let links = output("ip", &["-o", "link"]);
    assert!(
        !links.contains(&format!("tdn{}-", index.trim())),
        "links left: {links}"
    );
    let rules = output("iptables-save", &[]);
    assert!(
        !rules.contains("KUBE-"),
        "kube-proxy's rules on the host: {rules}"
    );
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let left = hierarchy.path().join(&ns);
        assert!(!left.exists(), "cgroup left: {}", left.display());
    }
    let procs: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        // The watchdog (it stops the cluster when this test exits) is the only one meant to stay.
        .filter(|c| c.contains(&dir_text) && !c.contains("while kill -0"))
        .collect();
    assert!(procs.is_empty(), "processes left: {procs:?}");
    // Nor any process in the node's cgroups (containers, the pause processes).
    let in_cgroups = container_pids(&format!("/{ns}/"));
    assert!(
        in_cgroups.is_empty(),
        "processes left in {ns}'s cgroups: {in_cgroups:?}"
    );
    let shims = output("pgrep", &["-a", "-f", "containerd-shim"]);
    assert!(!shims.contains(&dir_text), "shims left: {shims}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Watches a pod until it is gone and returns the exit code its container reported.
async fn terminated_exit_code(pods: &Api<Pod>, name: &str) -> i32 {
    use futures::TryStreamExt;
    use kube::runtime::watcher;
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(pods.clone(), cfg));
    let mut code = None;
    while let Ok(Some(event)) = tokio::time::timeout(GUARD, stream.try_next())
        .await
        .unwrap_or(Ok(None))
    {
        match event {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                let terminated = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|cs| cs.into_iter().next())
                    .and_then(|c| c.state)
                    .and_then(|s| s.terminated);
                if let Some(t) = terminated {
                    code = Some(t.exit_code);
                }
            }
            watcher::Event::Delete(_) => break,
            _ => {}
        }
    }
    code.expect("the pod's container reported how it ended before the pod was removed")
}

/// What a node could change on the host outside its namespaces: the kernel settings the
/// kubelet sets host-wide, and containerd's default plugin dir.
#[derive(Debug, PartialEq)]
struct HostState {
    sysctls: Vec<String>,
    opt_containerd: bool,
}

impl HostState {
    fn now() -> HostState {
        let sysctls = [
            "kernel/panic_on_oops",
            "kernel/panic",
            "vm/overcommit_memory",
        ]
        .iter()
        .map(|k| std::fs::read_to_string(format!("/proc/sys/{k}")).unwrap_or_default())
        .collect();
        HostState {
            sysctls,
            opt_containerd: Path::new("/opt/containerd").exists(),
        }
    }
}

/// `warmUp: Measured` with real pods (issue 35): two Deployments whose pods are Ready 15 s
/// after they start go 1 -> 3 -> 1 -> 3 on a schedule a minute or two apart, one with a
/// Measured warm-up and one without. The first scale-up of the Measured one is written at its
/// transition and timed; the second is written that time plus its margin ahead, and its 3
/// replicas are ready by the transition (a second's grace for the reconcile that sees it),
/// while the one without is late by about the start-up. Scale-downs are never early. Times
/// are the operator's own records (`status.history`), on its real clock.
async fn warm_up_on_real_pods(client: &kube::Client, apps: &str) {
    use chrono::{DateTime, Duration as Span, Utc};
    let t0 = Utc::now();
    let at = |secs: i64| t0 + Span::seconds(secs);
    let rfc = |t: DateTime<Utc>| t.to_rfc3339();
    let windows = [(40, 90), (150, 200)];
    for (name, warm_up) in [
        ("slow", Some(json!({"mode": "Measured"}))),
        ("slow-off", None),
    ] {
        let _: Deployment = create_object(client, apps, slow_web(name)).await;
        let mut spec = json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "schedulingConfig": [],
            "defaultReplica": 1,
            "overrides": windows.iter().map(|(from, to)| json!({
                "start": rfc(at(*from)), "end": rfc(at(*to)), "replica": 3, "reason": "peak"
            })).collect::<Vec<_>>(),
        });
        if let Some(w) = warm_up {
            spec["warmUp"] = w;
        }
        create_tdset(client, apps, &tdset(name, spec)).await;
    }
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), apps);
    // The history entry of the change at `secs` to `to`, once it is done (a scale-up: ready).
    let entry = |name: &'static str, secs: i64, to: i32| {
        let tdsets = tdsets.clone();
        async move {
            eventually(
                GUARD,
                &format!("{name}: the change to {to} at t0+{secs}s"),
                || async {
                    let s = tdsets.get_status(name).await.ok()?.status?;
                    s.history.into_iter().find(|e| {
                        (utc(&e.at) - at(secs)).num_seconds() == 0
                            && e.to == Some(to)
                            && e.applied_at.is_some()
                            && (to == 1 || e.ready_at.is_some())
                    })
                },
            )
            .await
        }
    };
    let applied = |e: &tdset_operator::api::HistoryEntry| utc(e.applied_at.as_deref().unwrap());
    let ready = |e: &tdset_operator::api::HistoryEntry| utc(e.ready_at.as_deref().unwrap());

    let first = entry("slow", 40, 3).await;
    let took = ready(&first) - applied(&first);
    assert!(applied(&first) >= at(40), "{first:?}");
    // The kubelet counts a probe's initial delay from the container's start as its status
    // keeps it, truncated to the second (status_manager's normalizeStatus): a pod whose
    // container started at :03.9 is probed from :18.0. So 15 s of delay is Ready at least
    // 14 s after the write that started it.
    assert!(
        took >= Span::seconds(14),
        "a readiness probe of 15 s: {first:?}"
    );
    let fall = entry("slow", 90, 1).await;
    assert!(
        applied(&fall) >= at(90),
        "a scale-down is never early: {fall:?}"
    );
    let s = tdsets.get_status("slow").await.unwrap().status.unwrap();
    let w = s.warm_up.expect("status.warmUp");
    let lead = tdset_operator::schedule::parse_duration(&w.lead).unwrap();
    eprintln!(
        "warmUp: first scale-up ready {:.1}s after its write; lead {} ({:?}, samples {:?})",
        took.num_milliseconds() as f64 / 1000.0,
        w.lead,
        w.basis,
        w.samples
    );
    assert_eq!(w.basis, tdset_operator::api::LeadBasis::Measured);

    let second = entry("slow", 150, 3).await;
    let off = entry("slow-off", 150, 3).await;
    let late = |e: &tdset_operator::api::HistoryEntry| {
        (ready(e) - at(150)).num_milliseconds() as f64 / 1000.0
    };
    eprintln!(
        "warmUp: second scale-up written {:.1}s ahead, ready at its transition {:+.1}s \
         (without warmUp: {:+.1}s; + late, - early)",
        (at(150) - applied(&second)).num_milliseconds() as f64 / 1000.0,
        late(&second),
        late(&off)
    );
    assert!(
        applied(&second) >= at(150) - lead - Span::seconds(1),
        "{second:?}, lead {lead}"
    );
    assert!(
        ready(&second) <= at(151),
        "ready by its transition: {second:?}"
    );
    assert!(
        ready(&off) >= at(150) + Span::seconds(10),
        "late without warmUp: {off:?}"
    );
}

/// Ordered wake-up with real pods (issue 35): a group of three tiers whose pods are Ready 6 s
/// after they start. Going to sleep, the front end's pods stop first, the backend's once no
/// front-end pod is ready, the database's last; waking, the database's pod is Ready before any
/// backend pod is created, and the backend's before the front end's. The order is what one
/// watch of the Deployments saw, and the pods' own timestamps (the kubelet's Ready, the API
/// server's creation).
async fn tiers_on_real_pods(client: &kube::Client, apps: &str) {
    use chrono::{Duration as Span, Utc};
    let recorder = Recorder::start(client, apps);
    let tiers = [
        ("tier-db", Some("data")),
        ("tier-api", Some("backend")),
        ("tier-web", None),
    ];
    for (name, tier) in tiers {
        let mut d = probed_web(name, 6);
        d["metadata"]["labels"] = json!({"env": "tiers"});
        if let Some(t) = tier {
            d["metadata"]["labels"]["tier"] = json!(t);
        }
        let _: Deployment = create_object(client, apps, d).await;
    }
    for (name, _) in tiers {
        recorder
            .until(0, name, "its pod ready", |spec, ready| {
                spec == 1 && ready == 1
            })
            .await;
    }
    let t0 = Utc::now();
    let rfc = |secs: i64| (t0 + Span::seconds(secs)).to_rfc3339();
    let spec = json!({
        "scaleTargetSelector": {
            "kinds": ["Deployment"],
            "selector": {"matchLabels": {"env": "tiers"}},
            "order": [{"matchLabels": {"tier": "data"}}, {"matchLabels": {"tier": "backend"}}],
        },
        "schedulingConfig": [],
        "overrides": [{"start": rfc(15), "end": rfc(60), "replica": 0, "reason": "night"}],
    });
    create_tdset(client, apps, &tdset("tiers", spec)).await;

    let mark = recorder.log().len();
    let set = |to: i32| move |spec: i32, _: i32| spec == to;
    let web_down = recorder.until(mark, "tier-web", "set to 0", set(0)).await;
    let web_gone = recorder
        .until(web_down, "tier-web", "no ready pod", |s, r| {
            s == 0 && r == 0
        })
        .await;
    let api_down = recorder.until(mark, "tier-api", "set to 0", set(0)).await;
    let api_gone = recorder
        .until(api_down, "tier-api", "no ready pod", |s, r| {
            s == 0 && r == 0
        })
        .await;
    let db_down = recorder.until(mark, "tier-db", "set to 0", set(0)).await;
    let log = recorder.log();
    assert!(web_gone < api_down && api_gone < db_down, "{log:?}");

    let mark = recorder.log().len();
    let db_up = recorder.until(mark, "tier-db", "set to 1", set(1)).await;
    let db_ready = recorder
        .until(db_up, "tier-db", "ready", |s, r| s == 1 && r == 1)
        .await;
    let api_up = recorder.until(mark, "tier-api", "set to 1", set(1)).await;
    let api_ready = recorder
        .until(api_up, "tier-api", "ready", |s, r| s == 1 && r == 1)
        .await;
    let web_up = recorder.until(mark, "tier-web", "set to 1", set(1)).await;
    let log = recorder.log();
    assert!(db_ready < api_up && api_ready < web_up, "{log:?}");

    // The pods' own record: each tier's pod created no earlier than the one before was Ready.
    let pods: Api<Pod> = Api::namespaced(client.clone(), apps);
    let pod_of = |app: &'static str| {
        let pods = pods.clone();
        async move {
            eventually(GUARD, &format!("{app}'s pod Ready"), || async {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={app}")))
                    .await
                    .ok()?;
                list.items
                    .into_iter()
                    .find(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
            })
            .await
        }
    };
    let ready_at = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "Ready" && c.status == "True")
                    .and_then(|c| c.last_transition_time.clone())
            })
    };
    let created = |p: &Pod| p.metadata.creation_timestamp.clone();
    let (db, api, web) = (
        pod_of("tier-db").await,
        pod_of("tier-api").await,
        pod_of("tier-web").await,
    );
    let (db_ready, api_created) = (
        ready_at(&db).expect("Ready"),
        created(&api).expect("created"),
    );
    let (api_ready, web_created) = (
        ready_at(&api).expect("Ready"),
        created(&web).expect("created"),
    );
    assert!(api_created.0 >= db_ready.0, "{db:?}\n{api:?}");
    assert!(web_created.0 >= api_ready.0, "{api:?}\n{web:?}");
    eprintln!(
        "tiers: db Ready {}, api created {} and Ready {}, web created {}",
        db_ready.0, api_created.0, api_ready.0, web_created.0
    );
}

/// Wake on request on the real node (issue 49), five Services side by side, each a
/// Deployment asleep by its schedule behind a ClusterIP. Requests are sent from the node (its
/// network namespace: kube-proxy's rules, the operator's EndpointSlice, the chart's proxy).
async fn wake_on_real_pods(client: &kube::Client, apps: &str, dir: &Path) {
    tokio::join!(
        woken_twice(client, apps, dir),
        a_large_body_through_a_wake_up(client, apps, dir),
        a_websocket_through_a_wake_up(client, apps, dir),
        a_crowd_wakes_it_once(client, apps, dir),
        held_past_hold_and_ignored(client, apps, dir),
        a_local_traffic_policy_reaches_the_proxy_on_its_node(client, apps, dir),
        a_steady_load_through_sleep_wake_and_hand_over(client, apps, dir),
    );
}

/// A request gets the application's own answer, and the status and history say a request
/// woke it; the proxy then leaves the path. After `wakeFor` it is asleep again with the
/// operator's slice back, and a second request wakes it again.
async fn woken_twice(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper", 1),
        json!({"wakeFor": "1m", "hold": "45s"}),
    )
    .await;
    for round in 1..=2 {
        s.asleep_with_the_proxy_in_its_path(dir).await;
        let t = Instant::now();
        let body = curl_on_node(dir, &s.url, &[]).expect("curl through the ClusterIP");
        assert_eq!(
            body, "ok\n",
            "the application's own answer, not the proxy's"
        );
        eprintln!(
            "wake on request, sleeper round {round}: answered by the woken pod in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        let woke = s.status().await.request_wake.expect("status.requestWake");
        assert_eq!(
            woke.request.as_ref().map(|r| r.service.as_str()),
            Some("sleeper"),
            "{woke:?}"
        );
        assert_eq!(s.request_wake_ups().await, round);
        // While awake the proxy is out of the path: the operator's slice names nobody.
        eventually(
            GUARD,
            "the operator's slice out of the path once awake",
            || async { out_of_the_path(&s.ours().await?).then_some(()) },
        )
        .await;
    }
}

/// A 4 MiB POST that wakes the workload arrives whole (its length and hash, as the pod saw
/// them).
async fn a_large_body_through_a_wake_up(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        echo_web("sleeper-body", 1),
        json!({"wakeFor": "5m", "hold": "45s"}),
    )
    .await;
    let body: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let file = std::env::temp_dir().join(format!("{apps}-body.bin"));
    std::fs::write(&file, &body).unwrap();
    s.asleep_with_the_proxy_in_its_path(dir).await;
    let data = format!("@{}", file.display());
    let answer =
        curl_on_node(dir, &s.url, &["--data-binary", &data]).expect("a POST through the ClusterIP");
    assert_eq!(
        answer,
        format!("bytes={} fnv1a64={:016x}\n", body.len(), fnv1a64(&body)),
        "the body as the woken pod received it"
    );
    assert_eq!(s.request_wake_ups().await, 1);
    let _ = std::fs::remove_file(&file);
}

/// A WebSocket opened to the sleeping Service is upgraded by the woken pod and echoes.
async fn a_websocket_through_a_wake_up(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        echo_web("sleeper-ws", 1),
        json!({"wakeFor": "5m", "hold": "45s"}),
    )
    .await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    // A WebSocket client (RFC 6455: a masked text frame out, the echo's unmasked frame back).
    let client_py = r#"
import base64, hashlib, os, socket, sys
ip, msg = sys.argv[1], sys.argv[2].encode()
s = socket.create_connection((ip, 80), timeout=90)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET /ws HTTP/1.1\r\nHost: sleeper-ws\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % key).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    chunk = s.recv(4096)
    if not chunk: sys.exit("closed before the upgrade: %r" % buf)
    buf += chunk
head, rest = buf.split(b"\r\n\r\n", 1)
accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
if not head.startswith(b"HTTP/1.1 101") or accept not in head: sys.exit("no upgrade: %r" % head)
mask = os.urandom(4)
s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
while len(rest) < 2 + len(msg):
    chunk = s.recv(4096)
    if not chunk: break
    rest += chunk
print(rest[2:2 + rest[1]].decode(), end="")
"#;
    let msg = "hello through a wake-up";
    let out = on_node(dir, &["python3", "-c", client_py, &s.ip, msg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), msg);
    assert_eq!(s.request_wake_ups().await, 1);
}

/// 200 requests at once to the sleeping Service all get the application's answer, and they
/// make one wake-up.
async fn a_crowd_wakes_it_once(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper-crowd", 1),
        json!({"wakeFor": "5m", "hold": "45s"}),
    )
    .await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    let urls: Vec<String> = (0..200).map(|i| format!("{}/{i}", s.url)).collect();
    let mut args = vec![
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        "200",
        "-w",
        "%{http_code}\n",
        "-o",
        "/dev/null",
    ];
    for u in &urls[1..] {
        args.extend(["-o", "/dev/null", u.as_str()]);
    }
    let t = Instant::now();
    let codes = curl_on_node(dir, &urls[0], &args).expect("200 requests at once");
    let ok = codes.lines().filter(|c| *c == "200").count();
    assert_eq!(ok, 200, "every request answered by the woken pod: {codes}");
    eprintln!(
        "wake on request, sleeper-crowd: 200 requests at once, all answered in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        s.request_wake_ups().await,
        1,
        "{:#?}",
        s.status().await.history
    );
}

/// A workload that is not ready within `hold`: the request held that long gets 503 with a
/// Retry-After. Before it, a request whose user agent `ignore` names is answered by the
/// proxy and wakes nothing.
async fn held_past_hold_and_ignored(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper-slow", 600),
        json!({"wakeFor": "5m", "hold": "2s", "ignore": {"userAgents": ["(?i)uptime-bot"]}}),
    )
    .await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    let ignored = curl_on_node(dir, &s.url, &["-i", "-A", "Uptime-Bot/1.0"]).expect("curl");
    assert!(ignored.starts_with("HTTP/1.1 503"), "{ignored}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.status().await.request_wake.is_none(),
        "an ignored request woke it"
    );
    let t = Instant::now();
    let held = curl_on_node(dir, &s.url, &["-i"]).expect("curl");
    let took = t.elapsed();
    assert!(held.starts_with("HTTP/1.1 503"), "{held}");
    assert!(
        held.to_ascii_lowercase().contains("\r\nretry-after: "),
        "{held}"
    );
    assert!(took >= Duration::from_secs(2), "answered after {took:?}");
    // It was woken all the same: the count is up, its pod starting.
    deployment_at(client, apps, "sleeper-slow", 1).await;
}

/// A Service with `internalTrafficPolicy: Local` sends a node's clients only to endpoints on
/// that node: asleep, the operator's endpoints carry the proxy pods' nodes, so kube-proxy on
/// the node that runs a proxy sends the ClusterIP to it (without them it dropped every
/// request while asleep), and a request wakes the workload.
async fn a_local_traffic_policy_reaches_the_proxy_on_its_node(
    client: &kube::Client,
    apps: &str,
    dir: &Path,
) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper-local", 1),
        json!({"wakeFor": "5m", "hold": "45s"}),
    )
    .await;
    Api::<Service>::namespaced(client.clone(), apps)
        .patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"internalTrafficPolicy": "Local"}})),
        )
        .await
        .expect("internalTrafficPolicy: Local");
    s.asleep_with_the_proxy_in_its_path(dir).await;
    let body = curl_on_node(dir, &s.url, &[]).expect("curl through the ClusterIP");
    assert_eq!(
        body, "ok\n",
        "the application's own answer, not the proxy's"
    );
    assert!(s.status().await.request_wake.is_some(), "a request woke it");
}

/// A real ingress controller in front (Traefik, its Kubernetes Ingress provider): routing by
/// EndpointSlices, it follows the operator's slice to the proxy while asleep, a request through
/// it wakes the Service and gets the application's own answer, and once awake it sends to the
/// pod alone. The same for a Service whose one port has no name (Traefik pairs a slice's port
/// with the Service's by name; the API server stores the slice's missing name as "").
async fn woken_through_an_ingress_controller(
    client: &kube::Client,
    apps: &str,
    dir: &Path,
    kc: &Path,
) {
    let traefik = Traefik::start(client, dir, kc).await;
    for (name, port) in [
        (
            "sleeper-ingress",
            json!({"name": "http", "port": 80, "targetPort": "http"}),
        ),
        (
            "sleeper-ingress-unnamed",
            json!({"port": 80, "targetPort": "http"}),
        ),
    ] {
        let s = Sleeper::serving(
            client,
            apps,
            probed_web(name, 1),
            json!({"wakeFor": "30m", "hold": "45s"}),
            Sleeper::asleep_now(),
            port,
        )
        .await;
        let host = ingress_to(client, apps, name).await;
        s.asleep_with_the_proxy_in_its_path(dir).await;
        let proxies = traefik_on_the_proxy(dir, &s).await;
        let t = Instant::now();
        // (On a thread of its own: the scenarios beside this one go on meanwhile.)
        let (d, header) = (dir.to_path_buf(), format!("Host: {host}"));
        let body = tokio::task::spawn_blocking(move || {
            curl_on_node(&d, &format!("http://{WEB}/"), &["-H", &header])
        })
        .await
        .expect("curl's thread")
        .expect("a request through Traefik");
        assert_eq!(
            body, "ok\n",
            "{name}: the application's own answer through Traefik"
        );
        eprintln!(
            "wake on request, {name}: answered through Traefik {} by the woken pod in {:.1}s",
            traefik.version,
            t.elapsed().as_secs_f64()
        );
        woken_through_traefik(dir, &s, &host, &proxies).await;
    }
    asleep_again_once_nobody_comes(client, apps, dir).await;
}

/// Idle sleep read from the cluster's own metrics (`spec.idle`, the Traefik template): the real
/// Prometheus scrapes the real Traefik. A request through Traefik wakes the Service; one request
/// a minute keeps it awake (idle `after` 2m: were they not seen, it would sleep within 3 min of
/// the first); once they stop it sleeps `after` the quiet began (behind the proxy's slice
/// again), and a request through Traefik wakes it again.
async fn asleep_again_once_nobody_comes(client: &kube::Client, apps: &str, dir: &Path) {
    use tdset_operator::api::IdlePhase;
    let prometheus = NodePrometheus::start(dir);
    let name = "sleeper-quiet";
    let s = Sleeper::new(
        client,
        apps,
        probed_web(name, 1),
        json!({"wakeFor": "30m", "hold": "45s"}),
    )
    .await;
    Api::<TDSet>::namespaced(client.clone(), apps)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"idle": {
                "after": "2m", "signals": [{"prometheus": {"template": "traefik"}}]}}})),
        )
        .await
        .expect("spec.idle");
    let host = ingress_to(client, apps, name).await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    traefik_on_the_proxy(dir, &s).await;
    let through_traefik = |host: String| {
        let d = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            curl_on_node(
                &d,
                &format!("http://{WEB}/"),
                &["-H", &format!("Host: {host}")],
            )
        })
    };
    let deployment = || async {
        Api::<Deployment>::namespaced(client.clone(), apps)
            .get(name)
            .await
            .ok()
            .as_ref()
            .and_then(replicas)
    };
    let body = through_traefik(host.clone()).await.expect("curl's thread");
    assert_eq!(body.as_deref(), Ok("ok\n"), "woken through Traefik");
    let woken = Instant::now();
    let series =
        format!(r#"traefik_service_requests_total{{service="{apps}-{name}-80@kubernetes"}}"#);
    eventually(
        GUARD,
        "Prometheus has Traefik's counter for the Service",
        || async {
            prometheus
                .value(dir, &format!("sum({series})"))
                .filter(|v| *v >= 1.0)
        },
    )
    .await;
    // One request a minute: awake throughout.
    for minute in 1..=3 {
        while woken.elapsed() < Duration::from_secs(60 * minute) {
            assert_eq!(
                deployment().await,
                Some(1),
                "awake while a request comes every minute ({:?} after the first): {:?}",
                woken.elapsed(),
                s.status_now().await.and_then(|s| s.idle)
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let body = through_traefik(host.clone()).await.expect("curl's thread");
        assert_eq!(
            body.as_deref(),
            Ok("ok\n"),
            "minute {minute}: the application's answer"
        );
        // Read as traffic. (The request that woke it is the proxy's to count: Traefik's
        // counter for the Service starts with it, so no rate shows that one.)
        if minute == 1 {
            eventually(GUARD, "status.idle Active: a request was read", || async {
                let idle = s.status_now().await?.idle?;
                (idle.phase == IdlePhase::Active).then_some(())
            })
            .await;
        }
    }
    let last = Instant::now();
    // Then nobody comes: asleep once quiet for `after`, and the history says why.
    eventually(Duration::from_secs(420), "asleep by idleness", || async {
        (deployment().await == Some(0)).then_some(())
    })
    .await;
    let slept = last.elapsed();
    // Its status follows the scale write, at the API server's pace.
    let status = eventually(GUARD, "the idle sleep in the history", || async {
        let status = s.status_now().await?;
        let entry = status.history.first()?;
        (entry.to == Some(0) && entry.reason.contains("idle")).then_some(status)
    })
    .await;
    eprintln!(
        "idle sleep through Traefik's counters: awake through {} s of one request a minute; asleep {:.0} s after the last (after 2m, rates over 90 s, read every 30 s); status.idle: {:?}",
        last.duration_since(woken).as_secs(),
        slept.as_secs_f64(),
        status.idle
    );
    // Asleep behind the proxy's slice, and a request through Traefik wakes it again.
    s.asleep_with_the_proxy_in_its_path(dir).await;
    traefik_on_the_proxy(dir, &s).await;
    let body = through_traefik(host.clone()).await.expect("curl's thread");
    assert_eq!(
        body.as_deref(),
        Ok("ok\n"),
        "woken again after the idle sleep"
    );
    eventually(
        GUARD,
        "the second request wake-up in the history",
        || async { (s.request_wake_ups().await == 2).then_some(()) },
    )
    .await;
}

/// Zero failed requests: a steady load (20 requests a second, each counted) from before a
/// scheduled sleep to after the wake-up it causes. At the boundary the operator puts the proxy
/// in the Service's path before the count goes to 0; the next requests are held, wake the
/// workload and are relayed; once the pod is ready the proxy leaves the path (the hand-over).
/// One answer that is not the application's 200 fails the test. (The pod does what a
/// well-behaved one does: it is sent away from the Service before it stops, preStop 5 s.)
async fn a_steady_load_through_sleep_wake_and_hand_over(
    client: &kube::Client,
    apps: &str,
    dir: &Path,
) {
    use chrono::{DateTime, Duration as Span, Utc};
    let mut d = echo_web("sleeper-load", 1);
    d["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"sleep": {"seconds": 5}}});
    // Awake by a window that ends one to two minutes from now (minute precision).
    let hhmm = |t: DateTime<Utc>| t.format("%H:%M").to_string();
    let now = Utc::now();
    let s = Sleeper::scheduled(
        client,
        apps,
        d,
        json!({"wakeFor": "5m", "hold": "45s"}),
        json!({"schedulingConfig": [{"startTime": hhmm(now - Span::hours(1)),
                                     "endTime": hhmm(now + Span::minutes(2)), "replica": 1}],
               "defaultReplica": 0}),
    )
    .await;
    let boundary = eventually(GUARD, "sleeper-load awake, its boundary known", || async {
        let d: Deployment = Api::namespaced(client.clone(), apps)
            .get("sleeper-load")
            .await
            .ok()?;
        let ready = d.status.and_then(|s| s.ready_replicas) == Some(1);
        let next = s.status_now().await?.next_transition_time?;
        ready
            .then(|| DateTime::parse_from_rfc3339(&next).ok())
            .flatten()
    })
    .await;
    let load_for = (boundary.with_timezone(&Utc) - Utc::now()).num_seconds() + 60;
    assert!(load_for > 60, "the boundary is {load_for} s away");
    let load = steady_load(dir, &s.url, load_for, 20, None).await;
    eprintln!(
        "wake on request, sleeper-load: {load_for} s of load at 20/s: {}",
        load.text
    );
    assert!(
        load.total as i64 >= load_for * 15,
        "{} requests in {load_for} s",
        load.total
    );
    assert_eq!(
        load.failed, 0,
        "requests that did not get the application's answer: {}",
        load.text
    );
    // Through a sleep and a wake-up: the history (newest first) has a request's wake-up after
    // the scheduled 0.
    let history = s.status().await.history;
    let slept = history.iter().position(|h| h.to == Some(0));
    let woken = history
        .iter()
        .position(|h| h.reason.contains("woken by a request"));
    assert!(
        matches!((woken, slept), (Some(w), Some(s)) if w < s),
        "{history:#?}"
    );
}

/// Waits until the proxy's two pods are Ready and the operator's slices for `s` name exactly
/// them; returns their names.
async fn slices_follow_the_proxy(client: &kube::Client, s: &Sleeper<'_>) -> BTreeSet<String> {
    eventually(
        GUARD,
        &format!("{}'s slice naming the proxy's Ready pods", s.name),
        || async {
            let pods: Vec<Pod> = (proxy_pods(client).await.into_iter())
                .filter(ready)
                .collect();
            let mut ips: Vec<String> = (pods.iter())
                .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
                .collect();
            ips.sort();
            (pods.len() == 2 && s.proxied_to().await? == ips)
                .then(|| pods.iter().map(name).collect())
        },
    )
    .await
}

/// Wake on request's faults on the real node: the proxy rolled while it holds requests, a
/// proxy pod killed, the operator's leader killed mid wake-up.
async fn wake_faults_on_real_pods(client: &kube::Client, apps: &str, dir: &Path) {
    the_proxy_rolled_while_it_holds(client, apps, dir).await;
    a_proxy_pod_killed(client, apps, dir).await;
    the_operator_killed_mid_wake_up(client, apps, dir).await;
}

/// The proxy's Deployment rolled (`kubectl rollout restart`: a new pod beside an old one,
/// which then stops) while it holds requests for a workload that takes 20 s to be ready, and
/// while another Service sleeps behind it. The stopping pods relay what they hold (they drain),
/// every slice moves to the new pods, and the sleeping Service wakes through them.
async fn the_proxy_rolled_while_it_holds(client: &kube::Client, apps: &str, dir: &Path) {
    let wake = json!({"wakeFor": "5m", "hold": "60s"});
    let idle = Sleeper::new(client, apps, probed_web("sleeper-idle", 1), wake.clone()).await;
    let slow = Sleeper::new(client, apps, probed_web("sleeper-roll", 20), wake).await;
    idle.asleep_with_the_proxy_in_its_path(dir).await;
    slow.asleep_with_the_proxy_in_its_path(dir).await;
    let before = slices_follow_the_proxy(client, &idle).await;
    let held: Vec<_> = (0..6)
        .map(|i| curl_in_background(dir, format!("{}/{i}", slow.url)))
        .collect();
    deployment_at(client, apps, "sleeper-roll", 1).await;

    let t = Instant::now();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let proxy = format!("{RELEASE}-wake-proxy");
    let restarted = chrono::Utc::now().to_rfc3339();
    deployments
        .patch(
            &proxy,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": restarted}}}}})),
        )
        .await
        .expect("rolling the proxy's Deployment");
    for (i, h) in held.into_iter().enumerate() {
        assert_eq!(
            h.await.unwrap().as_deref(),
            Ok("ok\n"),
            "request {i}, held by a proxy pod that was rolled"
        );
    }
    eprintln!(
        "wake on request, the proxy rolled: 6 held requests answered {:.1}s after the roll began",
        t.elapsed().as_secs_f64()
    );
    eventually(GUARD, "the proxy's rollout complete", || async {
        let d = deployments.get(&proxy).await.ok()?;
        let (spec, status) = (d.spec?, d.status?);
        let want = spec.replicas?;
        (status.observed_generation >= d.metadata.generation
            && status.updated_replicas == Some(want)
            && status.available_replicas == Some(want)
            && status.replicas == Some(want))
        .then_some(())
    })
    .await;
    let after = slices_follow_the_proxy(client, &idle).await;
    assert!(before.is_disjoint(&after), "{before:?} -> {after:?}");
    let body = curl_on_node(dir, &idle.url, &[]).expect("curl through the new proxy pods");
    assert_eq!(body, "ok\n");
    assert_eq!(idle.request_wake_ups().await, 1);
}

/// A proxy pod's process killed (SIGKILL: no drain). The kubelet restarts it; the operator
/// takes it out of the slices while it is not ready and back once it is, and a new request
/// wakes the Service through the proxy.
async fn a_proxy_pod_killed(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper-kill", 1),
        json!({"wakeFor": "5m", "hold": "45s"}),
    )
    .await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    slices_follow_the_proxy(client, &s).await;
    let victim = proxy_pods(client)
        .await
        .into_iter()
        .find(ready)
        .expect("a Ready proxy pod");
    let id = first_container(&victim)
        .container_id
        .clone()
        .expect("its container");
    assert!(kill_container(id.trim_start_matches("containerd://")) > 0);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(GUARD, "the killed proxy restarted and Ready", || async {
        let p = pods.get_opt(&name(&victim)).await.ok().flatten()?;
        (first_container(&p).restart_count >= 1 && ready(&p)).then_some(())
    })
    .await;
    slices_follow_the_proxy(client, &s).await;
    let body = curl_on_node(dir, &s.url, &[]).expect("curl after the proxy's crash");
    assert_eq!(body, "ok\n");
    assert_eq!(s.request_wake_ups().await, 1);
}

/// The operator's leader killed (SIGKILL) as soon as a request's wake-up is recorded, before
/// the workload (15 s to be ready) serves. The held request still gets the application's
/// answer: the next leader finishes the wake-up from the status (the count, the hand-over),
/// and it is one wake-up.
async fn the_operator_killed_mid_wake_up(client: &kube::Client, apps: &str, dir: &Path) {
    let s = Sleeper::new(
        client,
        apps,
        probed_web("sleeper-op", 15),
        json!({"wakeFor": "5m", "hold": "60s"}),
    )
    .await;
    s.asleep_with_the_proxy_in_its_path(dir).await;
    let held = curl_in_background(dir, s.url.clone());
    eventually(GUARD, "the wake-up recorded", || async {
        s.status_now().await?.request_wake.map(|_| ())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let leader = holder(&leases).await.expect("a leader");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let p = pods.get(&leader).await.expect("the leader's pod");
    let id = first_container(&p)
        .container_id
        .clone()
        .expect("its container");
    let t = Instant::now();
    assert!(kill_container(id.trim_start_matches("containerd://")) > 0);
    assert_eq!(
        held.await.unwrap().as_deref(),
        Ok("ok\n"),
        "the held request, its wake-up's leader killed"
    );
    eprintln!(
        "wake on request, the leader killed mid wake-up: the held request answered {:.1}s later",
        t.elapsed().as_secs_f64()
    );
    eventually(GUARD, "the proxy out of the path", || async {
        out_of_the_path(&s.ours().await?).then_some(())
    })
    .await;
    deployment_at(client, apps, "sleeper-op", 1).await;
    // The wake-up in the history (the next leader's status follows its writes), once.
    eventually(GUARD, "the wake-up in the history", || async {
        (s.request_wake_ups().await >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.request_wake_ups().await,
        1,
        "{:#?}",
        s.status().await.history
    );
}
