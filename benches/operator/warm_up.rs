//! `warmUp: Measured` at a boundary of many workloads (issue 35): pods that go Ready after a
//! delay of their own, drawn from 5 to 60 s (kwok's stage delay), on a control plane with
//! kube-controller-manager, kube-scheduler and kwok's nodes (the rest of the benchmarks run
//! without them, so that pods add no load that is not the operator's). Each workload has a
//! twin with the same delay and the same schedule, without `warmUp`, in the same run.

use super::*;

/// How far apart the boundaries are, and how long each window lasts: room for the longest
/// delay and the controller manager's queue within a window, and for the lead within the dip
/// before the next one (a lead that reaches back to the previous fall writes the rise at its
/// instant: no dip, no entry).
const EVERY: i64 = 420;
const WINDOW: i64 = 210;
const BOUNDARIES: i64 = 3;
/// kube-controller-manager's requests/s: at its default 20, its several requests per
/// workload's scale-up (the ReplicaSet, the pod, their statuses and Events) paced 2000
/// workloads at about 1.3 pods/s (the first run), so no window saw its pods.
const KCM_QPS: &str = "300";

/// A pod's readiness delay in seconds, spread over 5..=60 by the workload's index.
fn delay(i: usize) -> usize {
    5 + (i * 37) % 56
}

/// What one set of TDSets did at one boundary.
struct Boundary {
    ready_by: usize,
    lateness: Vec<f64>,
    early_replica_seconds: f64,
    lead: Vec<f64>,
    seen: usize,
}

impl Bench {
    pub(crate) async fn warm_up(&mut self, n: usize) {
        // A control plane of its own, with the parts that run pods.
        let dir = std::env::temp_dir().join(format!("tdset-bench-warm-{}", std::process::id()));
        let out = Command::new(script())
            .env("TDSET_KCM_QPS", KCM_QPS)
            .arg("start")
            .arg(&dir)
            .args(["--kcm", "--watch", &std::process::id().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let client = client_for(&kubeconfig).await;
        install_crds(&client).await;
        let ns = TestNamespace::new(&client, "bench-warm").await;
        let deployments: Vec<Deployment> = ["measured", "off"]
            .iter()
            .flat_map(|set| {
                (0..n).map(move |i| {
                    let mut d = app_deployment(&format!("{set}{i}"), 0);
                    d["spec"]["template"]["metadata"]["annotations"] =
                        json!({"pod-ready.stage.kwok.x-k8s.io/delay": format!("{}s", delay(i))});
                    serde_json::from_value(d).unwrap()
                })
            })
            .collect();
        create_all(
            &Api::<Deployment>::namespaced(client.clone(), &ns.name),
            deployments,
        )
        .await;
        // The boundaries, from a minute after the TDSets exist.
        // Whole seconds: history records instants to the second.
        let first =
            chrono::SubsecRound::trunc_subsecs(Utc::now(), 0) + chrono::Duration::seconds(90);
        let boundary = |k: i64| first + chrono::Duration::seconds(k * EVERY);
        let overrides: Vec<serde_json::Value> = (0..BOUNDARIES)
            .map(|k| {
                json!({"start": boundary(k).to_rfc3339(),
                       "end": (boundary(k) + chrono::Duration::seconds(WINDOW)).to_rfc3339(),
                       "replica": 1, "reason": format!("boundary {k}")})
            })
            .collect();
        let tdsets: Vec<TDSet> = ["measured", "off"]
            .iter()
            .flat_map(|set| {
                let overrides = overrides.clone();
                (0..n).map(move |i| {
                    let name = format!("{set}{i}");
                    let mut spec = json!({
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                        "schedulingConfig": [], "defaultReplica": 0, "overrides": overrides,
                    });
                    if *set == "measured" {
                        spec["warmUp"] = json!({"mode": "Measured"});
                    }
                    tdset(&name, spec)
                })
            })
            .collect();
        let op = operator(
            &kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join("warm-up.log"),
        );
        create_all(&Api::<TDSet>::namespaced(client.clone(), &ns.name), tdsets).await;
        let last = boundary(BOUNDARIES - 1) + chrono::Duration::seconds(WINDOW - 10);
        let wait = (last - Utc::now()).to_std().unwrap_or_default();
        eprintln!(
            "warm-up: {} workloads; boundaries from {first}, done at {last}",
            2 * n
        );
        tokio::time::sleep(wait).await;
        let rss = op.metric("process_resident_memory_bytes") / 1048576.0;
        let listed = Api::<TDSet>::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        for set in ["measured", "off"] {
            for k in 0..BOUNDARIES {
                let b = at_boundary(&listed, set, boundary(k));
                let mut lateness = b.lateness.clone();
                lateness.sort_by(f64::total_cmp);
                let mut lead = b.lead.clone();
                lead.sort_by(f64::total_cmp);
                let q = |v: &[f64], p: f64| {
                    v.get(((v.len() as f64 * p).ceil() as usize).saturating_sub(1))
                        .copied()
                        .unwrap_or(f64::NAN)
                };
                let _ = writeln!(
                    self.report,
                    "| warm-up {set}, boundary {} | {n} workloads, Ready 5-60 s after binding; kube-controller-manager at {KCM_QPS} requests/s | **{:.1} % ready by T** ({} of {n}; {} seen ready) | lateness p50 {:.1} s, p99 {:.1} s; replica-seconds early {:.0} ({:.1} per workload); written ahead p50 {:.1} s, p99 {:.1} s; operator RSS {rss:.1} MiB |",
                    k + 1,
                    100.0 * b.ready_by as f64 / n as f64,
                    b.ready_by,
                    b.seen,
                    q(&lateness, 0.5),
                    q(&lateness, 0.99),
                    b.early_replica_seconds,
                    b.early_replica_seconds / n as f64,
                    q(&lead, 0.5),
                    q(&lead, 0.99),
                );
            }
        }
        drop(op);
        let _ = Command::new(script()).arg("stop").arg(&dir).status();
    }
}

/// What the TDSets of `set` recorded of their scale-up at `at`.
fn at_boundary(tdsets: &[TDSet], set: &str, at: DateTime<Utc>) -> Boundary {
    let mut b = Boundary {
        ready_by: 0,
        lateness: Vec::new(),
        early_replica_seconds: 0.0,
        lead: Vec::new(),
        seen: 0,
    };
    let t = |s: &str| tdset_operator::preview::parse_rfc3339(s);
    let secs = |d: chrono::Duration| d.num_milliseconds() as f64 / 1000.0;
    for td in tdsets.iter().filter(|t| {
        t.name_any().starts_with(set)
            && t.name_any()[set.len()..]
                .chars()
                .all(|c| c.is_ascii_digit())
    }) {
        let Some(e) = td.status.as_ref().and_then(|s| {
            s.history
                .iter()
                .find(|e| {
                    t(&e.at).is_some_and(|a| (a - at).num_milliseconds().abs() < 1000)
                        && e.to == Some(1)
                })
                .cloned()
        }) else {
            continue;
        };
        if let Some(applied) = e.applied_at.as_deref().and_then(t) {
            b.lead.push(secs(at - applied).max(0.0));
        }
        let Some(ready) = e.ready_at.as_deref().and_then(t) else {
            continue;
        };
        b.seen += 1;
        b.lateness.push(secs(ready - at).max(0.0));
        if ready <= at {
            b.ready_by += 1;
            b.early_replica_seconds += secs(at - ready);
        }
    }
    b
}
