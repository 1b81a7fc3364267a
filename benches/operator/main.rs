//! Benchmarks against a real local control plane (etcd + kube-apiserver, no controller
//! manager, so pods do not add load that is not the operator's). The operator runs as a
//! separate release process, so its RSS and CPU are its own.
//!
//!   cargo bench --bench operator                 all scenarios, writes BENCHMARKS.md
//!   cargo bench --bench operator -- converge lag  some of them (converge, lag, steady, memory,
//!                                                ref: only the scaleTargetRef scenarios,
//!                                                lag10k: the boundary lag at N = 10 000,
//!                                                shards: at N = 10 000 (TDSET_BENCH_SHARDS_N), one
//!                                                operator and two shards,
//!                                                restart: memory of a restarted operator,
//!                                                history: the same with every history full,
//!                                                writes: a scale's cost by write kind,
//!                                                statuswrites: a status write's cost by kind,
//!                                                against the floors of a custom resource and
//!                                                of a Deployment,
//!                                                kconverge: N = 1000 by kubectl apply,
//!                                                fleet (only when named): 100 000 TDSets over
//!                                                500 namespaces, one operator then 4 shards,
//!                                                group: the group form at a boundary of 1000,
//!                                                100 joins, 100 groups x 100 in memory,
//!                                                groupworst: 16 groups x 2000, the large
//!                                                objects listed first,
//!                                                groupworst-tiny-first (only when named): the
//!                                                same with four tiny objects first,
//!                                                warmup: warmUp Measured against none at
//!                                                three boundaries of 1000 workloads each, pods
//!                                                Ready 5-60 s late, on a control plane of its
//!                                                own with kube-controller-manager and kwok,
//!                                                wakepile: the wake proxy's memory with
//!                                                100 slices of 1 MB piled on a Service,
//!                                                wake (only when named; root, a real node):
//!                                                wake on request's wake-ups, forwarding,
//!                                                and held connections,
//!                                                ingress (only when named; root, a real node):
//!                                                wake on request behind Traefik, timed,
//!                                                and a steady load through it,
//!                                                idle (only when named; Debian's prometheus):
//!                                                10 000 TDSets quiet over 1000 Services sharing
//!                                                one query (TDSET_BENCH_IDLE_N), then asleep)
//!   TDSET_BENCH_STEADY_SECS=60 ...               a shorter steady-state window (default 300)
//!
//! Rooms: this file (the run, its report in BENCHMARKS.md), `fixtures` (what the scenarios
//! create; the operator through the test support's launcher), `measure` (CPU, memory, the API
//! server's counters, lags), and the scenarios: `boundary`, `steady`, `group`, `status_cost`,
//! `fleet`, `warm_up`, `wake`, `wake_pile`, `ingress`, `idle`.

#[path = "../../tests/it/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::*;
use tdset_operator::api::TDSet;

mod boundary;
mod fixtures;
mod fleet;
mod group;
mod idle;
mod ingress;
mod measure;
mod status_cost;
mod steady;
mod wake;
mod wake_pile;
mod warm_up;

use fixtures::*;
use measure::*;

const CONCURRENCY: usize = 32;

struct Bench {
    client: Client,
    kubeconfig: std::path::PathBuf,
    /// A ServiceAccount bound to the operator's ClusterRole: requests as a deployed operator
    /// makes them, subject to API Priority and Fairness (the admin is exempt from it).
    sa_kubeconfig: std::path::PathBuf,
    sa_client: Client,
    logs: std::path::PathBuf,
    report: String,
}

impl Bench {
    async fn namespace(&self, prefix: &str) -> TestNamespace {
        TestNamespace::new(&self.client, prefix).await
    }

    /// The bench's ServiceAccount may hold Leases in `ns` (the chart's leader-election Role).
    async fn grant_leases(&self, ns: &str) {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "tdset-bench-leases"},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]}]
        }))
        .unwrap();
        Api::<Role>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "tdset-bench-leases"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tdset-bench-leases"},
            "subjects": [{"kind": "ServiceAccount", "name": "tdset-bench", "namespace": "default"}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    /// A fresh namespace with an operator process (real clock) reconciling it.
    async fn watched_namespace(
        &self,
        prefix: &str,
        log: impl AsRef<std::path::Path>,
    ) -> (TestNamespace, OperatorProcess) {
        let ns = self.namespace(prefix).await;
        let op = operator(&self.kubeconfig, Some(&ns.name), None, &self.logs.join(log));
        (ns, op)
    }

    /// Waits until `n` Deployments carry `replicas` and `n` TDSets report it in status.
    /// Watched, not polled: a poll adds its interval to the figure and, listing every object
    /// several times a second, loads the API server the operator is measured against.
    async fn converged(&self, ns: &str, n: usize, replicas: i32) {
        let deployments = all_where(
            Api::<Deployment>::namespaced(self.client.clone(), ns),
            n,
            move |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas),
        );
        let tdsets = all_where(
            Api::<TDSet>::namespaced(self.client.clone(), ns),
            n,
            move |t: &TDSet| {
                t.status.as_ref().is_some_and(|s| {
                    s.desired_replicas == Some(replicas)
                        && s.observed_generation == t.metadata.generation
                })
            },
        );
        futures::join!(deployments, tdsets);
    }

    async fn converged_status(&self, ns: &str, n: usize, replicas: i32) {
        all_where(
            Api::<TDSet>::namespaced(self.client.clone(), ns),
            n,
            move |t: &TDSet| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.desired_replicas == Some(replicas))
            },
        )
        .await;
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("tdset-bench-{}", std::process::id()));
        // Without kube-controller-manager: no ReplicaSets or pods, only the operator's load.
        let bins = std::path::PathBuf::from(String::from_utf8_lossy(&Command::new(script()).arg("bin-dir").output().unwrap().stdout).trim());
        assert!(bins.join("kube-apiserver").exists(), "run scripts/control-plane.sh install first");
        let out = Command::new(script()).arg("start").arg(&dir).args(["--watch", &std::process::id().to_string()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let kubeconfig = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let client = client_for(&kubeconfig).await;
        install_crds(&client).await;
        let logs = dir.join("logs");
        let (sa_client, sa_kubeconfig) = operator_role_account(&client, &kubeconfig).await;
        let mut b = Bench { client, kubeconfig, sa_kubeconfig, sa_client, logs, report: String::new() };
        if want("converge") {
            b.converge(100, Form::Owned).await;
            b.converge(1000, Form::Owned).await;
        }
        if want("converge") || want("ref") {
            b.converge(1000, Form::Ref).await;
        }
        if want("lag") {
            b.lag(100, Form::Owned).await;
            b.lag(1000, Form::Owned).await;
        }
        if want("lag10k") {
            b.lag(10_000, Form::Owned).await;
        }
        if want("lag") || want("ref") {
            b.lag(1000, Form::Ref).await;
        }
        if want("shards") {
            let n = std::env::var("TDSET_BENCH_SHARDS_N").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
            b.lag_in_shards(n, Form::Owned, 1).await;
            b.lag_in_shards(n, Form::Owned, 2).await;
        }
        if want("calendar") {
            b.calendar(1000).await;
        }
        if want("writes") {
            b.writes(1000).await;
        }
        if want("statuswrites") {
            b.status_writes(1000).await;
        }
        if want("steady") {
            let secs = std::env::var("TDSET_BENCH_STEADY_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
            b.steady(1000, secs).await;
        }
        if want("memory") {
            b.memory(1000, 0).await;
            b.memory(10_000, 0).await;
        }
        if want("memory") || want("ref") {
            b.memory(10_000, 10_000).await;
        }
        if want("group") {
            b.group_lag(1000).await;
            b.group_joins(100).await;
            b.group_memory(100, 100).await;
        }
        if want("groupworst") {
            b.group_worst(16, 2000, 0, 16).await;
        }
        // The large objects after four tiny ones (issue 48), on a control plane of its own:
        // without a controller manager, the namespaces above are never emptied.
        if args.iter().any(|a| a == "groupworst-tiny-first") {
            b.group_worst(16, 2000, 4, 64).await;
        }
        if want("shardindex") {
            b.shard_index(1000).await;
        }
        if want("warmup") {
            b.warm_up(1000).await;
        }
        if want("kconverge") {
            b.kubectl_converge(1000).await;
        }
        if want("wakepile") {
            b.wake_slice_pile().await;
        }
        if args.iter().any(|a| a == "wake") {
            b.wake().await;
        }
        if args.iter().any(|a| a == "ingress") {
            b.ingress().await;
        }
        if args.iter().any(|a| a == "idle") {
            let n = std::env::var("TDSET_BENCH_IDLE_N").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
            b.idle(n, 1000).await;
        }
        if args.iter().any(|a| a == "fleet") {
            b.fleet().await;
        }
        if want("history") {
            b.restart_with(10_000, true).await;
        }
        if want("memory") || want("restart") {
            b.restart(1000).await;
            b.restart(10_000).await;
        }
        let _ = Command::new(script()).arg("stop").arg(&dir).status();
        let mut md = String::new();
        let _ = writeln!(md, "## Run of {} (`cargo bench --bench operator{}`)\n", Utc::now().format("%Y-%m-%d %H:%M UTC"), if args.is_empty() { String::new() } else { format!(" -- {}", args.join(" ")) });
        let _ = writeln!(md, "Machine: {}. Control plane: etcd 3.6.16 (--unsafe-no-fsync) + kube-apiserver v1.36.3 on the same machine, no controller manager. Operator: release build, separate process; --concurrency 64 as admin for converge, steady and memory; the operator's default flags (concurrency 16) under a ServiceAccount bound to its ClusterRole for the boundary lag. Bench client concurrency {CONCURRENCY}.\n", machine());
        if args.iter().any(|a| a == "wake" || a == "ingress") {
            let _ = writeln!(md, "The wake on request rows: a control plane of their own with kube-controller-manager, kube-scheduler and a real node (containerd, kubelet, kube-proxy in iptables mode); the chart installed with the image of the release build (2 operator and 2 wake proxy pods); requests sent from the node's network namespace by a Python client, instants on this machine's wall clock (the client's, and the bench's watches of the Deployment and of the Service's own EndpointSlices).\n");
            if args.iter().any(|a| a == "ingress") {
                let _ = writeln!(md, "The rows behind Traefik: Traefik (built from its module by `scripts/control-plane.sh install-traefik`) run on the node, in its network namespace, as a process with the cluster's kubeconfig and its Kubernetes Ingress provider (an IngressClass `traefik`, an Ingress per Service by host); requests to its entry point on the node's loopback, Traefik's servers for each Ingress read from its API.\n");
            }
        }
        let _ = writeln!(md, "| scenario | size | result | detail |\n|---|---|---|---|\n{}", b.report);
        println!("\n{md}");
        let path = repo_root().join("BENCHMARKS.md");
        let old = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n\nProduced by `cargo bench --bench operator` (see benches/operator/); newest run first.\n\n".into());
        let (head, rest) = old.split_once("\n## ").map(|(h, r)| (h.to_string() + "\n", format!("## {r}"))).unwrap_or((old.clone(), String::new()));
        std::fs::write(&path, format!("{head}{md}\n{rest}")).unwrap();
    });
}
