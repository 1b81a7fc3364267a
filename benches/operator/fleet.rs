//! A fleet (issue 37): N TDSets (100 000 by default) spread over many namespaces, applied with
//! `kubectl apply` as a platform's GitOps would, on one operator watching every namespace and
//! then on 4 shards. Measured: converge against `kubectl apply` of the Deployments alone,
//! memory, restart and its first write, steady-state writes, and a boundary of a tenth of the
//! fleet against direct patches of the same Deployments.
//!
//! `TDSET_BENCH_FLEET_N` (100000), `TDSET_BENCH_FLEET_NAMESPACES` (500) and
//! `TDSET_BENCH_FLEET_SHARDS` (4) size it. Run it alone: its operators watch every namespace.

use super::*;
use kube::api::{DeleteParams, Patch, PatchParams};

/// kubectl processes applying at once (a CI job or a GitOps controller syncing several
/// applications).
const APPLIERS: usize = 8;
/// The boundaries: every tenth TDSet has windows 09:00-17:00 at 3 and 17:00-18:00 at 2 (the
/// rest stays at 1): 09:00 for one operator, 17:00 for the shards.
const DAY: &str = "2026-05-01";
/// Stops a hung run only: listing the fleet takes a while.
const READY_LIMIT: Duration = Duration::from_secs(900);

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Whether TDSet `i` crosses the boundary.
fn crosses(i: usize) -> bool {
    i % 10 == 0
}

fn at(time: &str) -> DateTime<Utc> {
    format!("{DAY}T{time}Z").parse().unwrap()
}

/// `kubectl apply -f` of each file, `APPLIERS` processes at a time: how long until all return.
async fn kubectl_apply(kubeconfig: &std::path::Path, files: Vec<std::path::PathBuf>) -> Duration {
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let children: Vec<_> = files
            .iter()
            .map(|f| {
                Command::new(kubectl_path())
                    .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
                    .args(["apply", "-f", f.to_str().unwrap(), "-o", "name"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "kubectl apply: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        started.elapsed()
    })
    .await
    .unwrap()
}

/// `objects` as `appliers` List files in `dir`, object `i` in file `i % appliers`.
fn list_files(
    dir: &std::path::Path,
    prefix: &str,
    appliers: usize,
    objects: impl Iterator<Item = serde_json::Value>,
) -> Vec<std::path::PathBuf> {
    let mut lists: Vec<Vec<serde_json::Value>> = vec![Vec::new(); appliers];
    for (i, o) in objects.enumerate() {
        lists[i % appliers].push(o);
    }
    std::fs::create_dir_all(dir).unwrap();
    lists
        .into_iter()
        .enumerate()
        .map(|(k, items)| {
            let path = dir.join(format!("{prefix}-{k}.json"));
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
            std::fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
            path
        })
        .collect()
}

/// Peak and current RSS of a process, MiB.
fn rss(op: &OperatorProcess) -> (f64, f64) {
    (
        op.proc_status("VmHWM:") as f64 / 1024.0,
        op.proc_status("VmRSS:") as f64 / 1024.0,
    )
}

pub(crate) struct Fleet {
    n: usize,
    namespaces: Vec<String>,
    shards: usize,
    dir: std::path::PathBuf,
}

impl Fleet {
    fn namespace(&self, i: usize) -> &str {
        &self.namespaces[i % self.namespaces.len()]
    }

    fn tdset(&self, i: usize) -> serde_json::Value {
        let windows = if crosses(i) {
            json!([{"startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 17, "endTime": 18, "replica": 2}])
        } else {
            json!([])
        };
        let mut t =
            serde_json::to_value(bench_tdset(Form::Owned, &format!("t{i}"), windows, 1)).unwrap();
        t["metadata"]["namespace"] = json!(self.namespace(i));
        t["metadata"]["labels"] = json!({"shard": format!("s{}", i % self.shards)});
        t
    }
}

impl Bench {
    /// Part 3 of issue 37: N TDSets applied at once by one `kubectl apply`, against the same
    /// of N Deployments alone.
    pub(crate) async fn kubectl_converge(&mut self, n: usize) {
        let fleet = Fleet {
            n,
            namespaces: vec![self.namespace("kconv").await.name.clone()],
            shards: 1,
            dir: self.logs.with_file_name(format!("kconverge-{n}")),
        };
        let (op, line) = self.applied_converge(&fleet, 1).await;
        op.stop();
        let _ = writeln!(self.report, "{line}");
    }

    pub(crate) async fn fleet(&mut self) {
        let n = env_or("TDSET_BENCH_FLEET_N", 100_000);
        let namespaces = env_or("TDSET_BENCH_FLEET_NAMESPACES", 500);
        let shards = env_or("TDSET_BENCH_FLEET_SHARDS", 4);
        let boundary_n = (0..n).filter(|i| crosses(*i)).count();
        let mut fleet = Fleet {
            n,
            namespaces: Vec::new(),
            shards,
            dir: self.logs.with_file_name("fleet"),
        };
        let mut report = Vec::new();

        for _ in 0..namespaces {
            fleet
                .namespaces
                .push(self.namespace("fleet").await.name.clone());
        }
        let (op, line) = self.applied_converge(&fleet, APPLIERS).await;
        report.push(line);
        op.stop();

        // Restart, with one change made while no operator ran: its write is the first.
        let tdsets: Api<TDSet> = Api::namespaced(self.client.clone(), fleet.namespace(1));
        tdsets
            .patch(
                "t1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"defaultReplica": 2}})),
            )
            .await
            .unwrap();
        let first_write = tokio::spawn(watch_replicas(
            Api::namespaced(self.client.clone(), fleet.namespace(1)),
            1,
            2,
            None,
            Duration::from_secs(900),
        ));
        let lead = Duration::from_secs(env_or("TDSET_BENCH_FLEET_LEAD", 180 + n * 3 / 1000) as u64);
        let spawned = Utc::now();
        let boundary_real = spawned + chrono::Duration::from_std(lead).unwrap();
        let started = Instant::now();
        let log = self.logs.join("fleet-restart.log");
        let fake = at("09:00:00") - chrono::Duration::from_std(lead).unwrap();
        let op = launch_operator(&self.sa_kubeconfig, None, Some(fake), &log, &[]);
        op.wait_ready(READY_LIMIT, &log);
        let ready = started.elapsed();
        let (first, _) = first_write.await.unwrap();
        let first = first
            .values()
            .next()
            .map(|t| (*t - spawned).num_milliseconds() as f64 / 1000.0);
        while op.metric("tdset_reconciles_total") < n as f64 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let reconciled = started.elapsed();
        let (restart_peak, restart_rss) = rss(&op);
        let restart_writes = op.writes_by_kind();
        println!(
            "fleet: restart ready {:.1} s, first write {first:?} s, reconciled {:.1} s, peak {restart_peak:.1} MiB, writes {restart_writes}",
            ready.as_secs_f64(),
            reconciled.as_secs_f64()
        );
        // Steady state: a minute with nothing due, ending well before the boundary.
        settled(std::slice::from_ref(&op), boundary_real).await;
        let steady = if Utc::now() + chrono::Duration::seconds(90) < boundary_real {
            let (w0, s0) = (
                op.metric("tdset_api_writes_total"),
                apiserver_writes(&self.client).await,
            );
            tokio::time::sleep(Duration::from_secs(60)).await;
            let (w1, s1) = (
                op.metric("tdset_api_writes_total"),
                apiserver_writes(&self.client).await,
            );
            format!(
                "{:.0} operator writes in 60 s (target 0: {}); the API server saw {:.0} mutating requests besides its Leases",
                w1 - w0,
                if w1 == w0 { "met" } else { "MISSED" },
                s1 - s0
            )
        } else {
            "not measured: the boundary came too soon (raise TDSET_BENCH_FLEET_LEAD)".to_string()
        };
        println!("fleet: steady {steady}");
        report.push(format!(
            "| fleet: restart | N = {n}, one operator | peak RSS **{restart_peak:.1} MiB** from start until every TDSet was reconciled once (target < 512 MiB: {}); RSS then {restart_rss:.1} MiB | ready (every cache listed) {:.1} s after the start; the first write (a TDSet changed while no operator ran) {} s after; every TDSet reconciled {:.1} s after; writes {restart_writes}; steady state: {steady} |",
            if restart_peak < 512.0 { "met" } else { "MISSED" },
            ready.as_secs_f64(),
            first.map_or("never".into(), |f| format!("{f:.1}")),
            reconciled.as_secs_f64(),
        ));

        // The boundary: a tenth of the fleet goes 1 -> 3 at 09:00.
        let probes = vec![(op.addr.clone(), op.pid())];
        let (scale, lags, statuses) = self
            .fleet_boundary(&probes, boundary_n, 1, 3, boundary_real)
            .await;
        let cp_errors = op.metric("tdset_reconcile_errors_total");
        op.stop();
        // The floor: the same identity patching the same Deployments, 16 at a time.
        let direct = self.fleet_direct(&fleet, 5).await;
        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        report.push(format!(
            "| fleet: boundary | {boundary_n} of the {n} TDSets at one boundary, one operator | p50 {p50:.1} s, p99 {p99:.1} s, max {max:.1} s; direct patches p50 {d50:.1} s, p99 {d99:.1} s, max {dmax:.1} s: **ratio {:.2}** | {} of {boundary_n} scaled; every status {statuses:.1} s after the boundary (bound: the scale p99 + the floor's p99 = {:.1} s: {}); reconcile errors {cp_errors:.0}; {scale} |",
            p99 / d99,
            lags.len(),
            p99 + d99,
            if statuses <= p99 + d99 { "met" } else { "MISSED" },
        ));

        // Shards: the same fleet on `shards` processes, each with its selector and Lease;
        // 17:00 is their boundary. Each first sets its tenth back to 3 (the floor's patches
        // left them at 5).
        if shards > 1 {
            self.fleet_shards(&fleet, boundary_n, d99, &mut report)
                .await;
        }
        for line in report {
            let _ = writeln!(self.report, "{line}");
        }
    }

    /// `kubectl apply` (`appliers` processes) of the fleet's N Deployments alone, into
    /// namespaces of their own that are emptied again; then of its N TDSets while one operator
    /// (default flags, the operator's ServiceAccount, every namespace, its clock hours before
    /// 09:00) runs, until every Deployment and status is written. Returns the operator, still
    /// running, and the report's line.
    pub(crate) async fn applied_converge(
        &mut self,
        fleet: &Fleet,
        appliers: usize,
    ) -> (OperatorProcess, String) {
        let (n, namespaces) = (fleet.n, fleet.namespaces.len());
        let mut direct_ns = Vec::new();
        for _ in 0..namespaces {
            direct_ns.push(self.namespace("fleetd").await.name.clone());
        }
        let files = list_files(
            &fleet.dir,
            "deployments",
            appliers,
            (0..n).map(|i| {
                let mut d = app_deployment(&format!("d{i}"), 1);
                d["apiVersion"] = json!("apps/v1");
                d["kind"] = json!("Deployment");
                d["metadata"]["namespace"] = json!(direct_ns[i % namespaces]);
                d
            }),
        );
        let cp0 = control_plane_cpu(&self.logs);
        let direct = kubectl_apply(&self.kubeconfig, files).await;
        let direct_cp = control_plane_cpu(&self.logs) - cp0;
        println!(
            "fleet: kubectl apply of {n} Deployments took {:.1} s",
            direct.as_secs_f64()
        );
        for ns in &direct_ns {
            let _ = Api::<Deployment>::namespaced(self.client.clone(), ns)
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;

        let log = self.logs.join(format!("fleet-converge-{n}.log"));
        // One namespace: the operator watches it alone (other scenarios' TDSets may be left
        // in others); a fleet: every namespace, as deployed.
        let scope = (namespaces == 1).then(|| fleet.namespaces[0].as_str());
        let op = launch_operator(&self.sa_kubeconfig, scope, Some(at("03:00:00")), &log, &[]);
        op.wait_ready(READY_LIMIT, &log);
        let files = list_files(
            &fleet.dir,
            "tdsets",
            appliers,
            (0..n).map(|i| fleet.tdset(i)),
        );
        let (deploys, tdsets): (Api<Deployment>, Api<TDSet>) = match scope {
            Some(ns) => (
                Api::namespaced(self.client.clone(), ns),
                Api::namespaced(self.client.clone(), ns),
            ),
            None => (Api::all(self.client.clone()), Api::all(self.client.clone())),
        };
        let deployments = tokio::spawn(all_where(deploys, n, |d: &Deployment| {
            d.name_any().starts_with('t') && d.spec.as_ref().and_then(|s| s.replicas) == Some(1)
        }));
        let statuses = tokio::spawn(all_where(tdsets, n, |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.desired_replicas == Some(1) && s.observed_generation == t.metadata.generation
            })
        }));
        // Both watches listed before the clock starts.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cp0 = control_plane_cpu(&self.logs);
        let started = Instant::now();
        let applied = kubectl_apply(&self.kubeconfig, files).await;
        deployments.await.unwrap();
        statuses.await.unwrap();
        let converged = started.elapsed();
        let converge_cp = control_plane_cpu(&self.logs) - cp0;
        let (peak, _) = rss(&op);
        let writes = op.writes_by_kind();
        let cpu = op.cpu_seconds();
        let ratio = converged.as_secs_f64() / direct.as_secs_f64();
        println!(
            "fleet: converged in {:.1} s (kubectl apply of the TDSets {:.1} s; of the Deployments {:.1} s), ratio {ratio:.2}, peak {peak:.1} MiB",
            converged.as_secs_f64(),
            applied.as_secs_f64(),
            direct.as_secs_f64(),
        );
        let line = format!(
            "| converge by `kubectl apply` | N = {n} TDSets in {namespaces} namespace{}, one operator (default flags) | {:.2} s until every Deployment and status is written, against {:.2} s for `kubectl apply` of {n} Deployments alone: **ratio {ratio:.2}** (target <= 1.2: {}; {appliers} kubectl process{} each way; the TDSets' own apply returned after {:.2} s) | operator peak RSS {peak:.1} MiB, {cpu:.1} CPU-s; writes {writes}; kube-apiserver + etcd {converge_cp:.1} CPU-s (Deployments alone: {direct_cp:.1} CPU-s) |",
            if namespaces == 1 { "" } else { "s" },
            converged.as_secs_f64(),
            direct.as_secs_f64(),
            if ratio <= 1.2 { "met" } else { "MISSED" },
            if appliers == 1 { "" } else { "es" },
            applied.as_secs_f64(),
        );
        (op, line)
    }

    /// Waits for the boundary at `boundary_real` and returns the profile of its phases, the
    /// lags of `count` Deployments going `from` -> `to`, and when every status said so.
    async fn fleet_boundary(
        &self,
        probes: &[(String, u32)],
        count: usize,
        from: i32,
        to: i32,
        boundary_real: DateTime<Utc>,
    ) -> (String, Vec<f64>, f64) {
        let at_boundary = Snapshot::ahead_of(
            boundary_real,
            Duration::from_secs(3),
            probes,
            &self.client,
            &self.logs,
        );
        let statuses = tokio::spawn(all_where(
            Api::<TDSet>::all(self.client.clone()),
            count,
            move |t: &TDSet| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.desired_replicas == Some(to))
                    && t.spec.scheduling_config.len() == 2
            },
        ));
        let wait =
            (boundary_real - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(600);
        let (seen, _) = watch_replicas(
            Api::all(self.client.clone()),
            count,
            to,
            Some((from, boundary_real)),
            wait,
        )
        .await;
        let scaled = Snapshot::take(probes, &self.client, &self.logs).await;
        statuses.await.unwrap();
        let statused_at = Utc::now();
        let statused = Snapshot::take(probes, &self.client, &self.logs).await;
        let at_boundary = at_boundary.await.unwrap();
        let min = count as f64 / 100.0;
        let profile = format!(
            "profile: {}; {}",
            at_boundary.phase(&scaled, "boundary - 3 s to the last scale seen", min),
            scaled.phase(&statused, "then to every status written", min),
        );
        println!("fleet boundary: {profile}");
        (
            profile,
            lags_from(&seen, boundary_real),
            (statused_at - boundary_real).num_milliseconds() as f64 / 1000.0,
        )
    }

    /// Direct merge patches of the crossing Deployments to `to`, from the operator's identity,
    /// 16 at a time: their lags.
    async fn fleet_direct(&self, fleet: &Fleet, to: i32) -> Vec<f64> {
        let crossing: Vec<usize> = (0..fleet.n).filter(|i| crosses(*i)).collect();
        let watch = tokio::spawn(watch_replicas(
            Api::all(self.client.clone()),
            crossing.len(),
            to,
            None,
            Duration::from_secs(900),
        ));
        tokio::time::sleep(Duration::from_secs(20)).await;
        let t0 = Utc::now();
        stream::iter(crossing)
            .for_each_concurrent(16, |i| {
                let api: Api<Deployment> =
                    Api::namespaced(self.sa_client.clone(), fleet.namespace(i));
                async move {
                    api.patch(
                        &format!("t{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": to}})),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let (seen, _) = watch.await.unwrap();
        lags_from(&seen, t0)
    }

    async fn fleet_shards(
        &mut self,
        fleet: &Fleet,
        boundary_n: usize,
        direct_p99: f64,
        report: &mut Vec<String>,
    ) {
        let shards = fleet.shards;
        let lease_ns = fleet.namespaces[0].clone();
        self.grant_leases(&lease_ns).await;
        // Each shard first claims its TDSets (a status patch each, issue 22): about 6 ms of
        // API server CPU per TDSet on the benchmark's machine.
        let lead = Duration::from_secs(env_or(
            "TDSET_BENCH_FLEET_SHARD_LEAD",
            180 + fleet.n * 8 / 1000,
        ) as u64);
        let boundary_real = Utc::now() + chrono::Duration::from_std(lead).unwrap();
        let fake = at("17:00:00") - chrono::Duration::from_std(lead).unwrap();
        let back = tokio::spawn(watch_replicas(
            Api::all(self.client.clone()),
            boundary_n,
            3,
            None,
            lead,
        ));
        let started = Instant::now();
        let ops: Vec<OperatorProcess> = (0..shards)
            .map(|k| {
                let (shard, selector) = (format!("s{k}"), format!("shard=s{k}"));
                launch_operator(
                    &self.sa_kubeconfig,
                    None,
                    Some(fake),
                    &self.logs.join(format!("fleet-shard-{k}.log")),
                    &[
                        "--shard",
                        &shard,
                        "--shard-selector",
                        &selector,
                        "--lease-namespace",
                        &lease_ns,
                        "--instance",
                        &shard,
                    ],
                )
            })
            .collect();
        for (k, op) in ops.iter().enumerate() {
            op.wait_ready(READY_LIMIT, &self.logs.join(format!("fleet-shard-{k}.log")));
        }
        let ready = started.elapsed();
        let (back, _) = back.await.unwrap();
        let per = (fleet.n / shards) as f64;
        while ops
            .iter()
            .any(|op| op.metric("tdset_reconciles_total") < per)
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let reconciled = started.elapsed();
        // A reconcile that waited for the namespace's claims to be indexed counts too, so the
        // take-over may still be writing: steady state starts once nothing was written for 15 s.
        let settled = settled(&ops, boundary_real).await;
        let peaks: Vec<f64> = ops.iter().map(|op| rss(op).0).collect();
        let claims = ops
            .iter()
            .map(|op| op.writes_by_kind())
            .collect::<Vec<_>>()
            .join(" / ");
        let steady = if Utc::now() + chrono::Duration::seconds(90) < boundary_real {
            let w0: f64 = ops
                .iter()
                .map(|op| op.metric("tdset_api_writes_total"))
                .sum();
            tokio::time::sleep(Duration::from_secs(60)).await;
            let w1: f64 = ops
                .iter()
                .map(|op| op.metric("tdset_api_writes_total"))
                .sum();
            let kinds = ops
                .iter()
                .map(|op| op.writes_by_kind())
                .collect::<Vec<_>>()
                .join(" / ");
            format!(
                "{:.0} writes in 60 s over all shards (target 0: {}; each shard's writes so far, by kind: {kinds})",
                w1 - w0,
                if w1 == w0 { "met" } else { "MISSED" }
            )
        } else {
            "not measured: the boundary came too soon".to_string()
        };
        let scales0: f64 = ops.iter().map(scale_writes).sum();
        let probes: Vec<(String, u32)> = ops.iter().map(|op| (op.addr.clone(), op.pid())).collect();
        let (profile, lags, statuses) = self
            .fleet_boundary(&probes, boundary_n, 3, 2, boundary_real)
            .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let per_shard: Vec<f64> = ops.iter().map(scale_writes).collect();
        let scales = per_shard.iter().sum::<f64>() - scales0;
        let errors: f64 = ops
            .iter()
            .map(|op| op.metric("tdset_reconcile_errors_total"))
            .sum();
        for op in ops {
            op.stop();
        }
        let (p50, p99, max) = summary(&lags);
        report.push(format!(
            "| fleet: {shards} shards | N = {n}, {per:.0} TDSets per shard | restart peak RSS per shard {} MiB (target < 512 MiB each); ready {:.1} s, every TDSet reconciled {:.1} s after the start, the take-over's writes done {settled:.1} s after ({} of {boundary_n} set back to 3 first; writes per shard then: {claims}); steady state: {steady} | boundary ({boundary_n} TDSets 3 -> 2 at 17:00): p50 {p50:.1} s, p99 {p99:.1} s, max {max:.1} s; against the one-operator run's direct p99 {direct_p99:.1} s: ratio {:.2}; every status {statuses:.1} s after the boundary; `/scale` writes at the boundary {scales:.0} for {boundary_n} Deployments (each written once: {}); reconcile errors {errors:.0}; {profile} |",
            peaks.iter().map(|p| format!("{p:.1}")).collect::<Vec<_>>().join(" / "),
            ready.as_secs_f64(),
            reconciled.as_secs_f64(),
            back.len(),
            p99 / direct_p99,
            if scales == boundary_n as f64 { "yes" } else { "NO" },
            n = fleet.n,
        ));
    }
}

/// Waits until `ops` have written nothing for 15 s, or until 90 s before the boundary; returns
/// the seconds waited.
async fn settled(ops: &[OperatorProcess], boundary_real: DateTime<Utc>) -> f64 {
    let started = Instant::now();
    let writes = || -> f64 {
        ops.iter()
            .map(|op| op.metric("tdset_api_writes_total"))
            .sum()
    };
    let (mut last, mut since) = (writes(), Instant::now());
    while since.elapsed() < Duration::from_secs(15)
        && Utc::now() + chrono::Duration::seconds(90) < boundary_real
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = writes();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    started.elapsed().as_secs_f64()
}

/// The operator's `/scale` applies so far.
fn scale_writes(op: &OperatorProcess) -> f64 {
    op.get("/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("tdset_api_writes_total{") && l.contains("deployments/scale"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
