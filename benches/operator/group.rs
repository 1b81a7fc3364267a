//! The group form (issue 21): one TDSet holding N Deployments at a boundary, workloads joining
//! a sleeping group, and 100 groups holding 10 000 workloads in memory.

use super::*;

/// `n` Deployments `prefix{i}` at `replicas`, labelled `env: bench` and `grp: g{i % groups}`.
pub(crate) fn group_deployments(
    prefix: &str,
    n: usize,
    replicas: i32,
    groups: usize,
) -> Vec<Deployment> {
    let mut objs = app_deployments(prefix, n, replicas);
    for (i, d) in objs.iter_mut().enumerate() {
        let labels = d.metadata.labels.get_or_insert_default();
        labels.insert("env".into(), "bench".into());
        labels.insert("grp".into(), format!("g{}", i % groups.max(1)));
    }
    objs
}

/// A group TDSet over `selector` (matchLabels), with `windows` and no defaultReplica (own).
pub(crate) fn group_tdset(
    name: &str,
    selector: serde_json::Value,
    windows: serde_json::Value,
) -> TDSet {
    tdset(
        name,
        json!({
            "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": selector}},
            "schedulingConfig": windows
        }),
    )
}

impl Bench {
    pub(crate) async fn group_lag(&mut self, n: usize) {
        let ns = self.namespace(&format!("grp{n}")).await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        create_all(&deploys, group_deployments("g", n, 1, 1)).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let t = group_tdset(
            "group",
            json!({"env": "bench"}),
            json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
        );
        api.create(&PostParams::default(), &t).await.unwrap();
        let boundary: DateTime<Utc> = "2026-05-01T09:00:00Z".parse().unwrap();
        let lead = Duration::from_secs(if n <= 2000 { 20 } else { 60 });
        let spawned = Utc::now();
        let op = operator_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some(boundary - chrono::Duration::from_std(lead).unwrap()),
            &self.logs.join(format!("group-lag-{n}.log")),
            &[],
        );
        let boundary_real = spawned + chrono::Duration::from_std(lead).unwrap();
        // The profile of the boundary, and of the direct patches below, for comparison.
        let probes = vec![(op.addr.clone(), op.pid())];
        let at_boundary = Snapshot::ahead_of(
            boundary_real,
            Duration::from_secs(3),
            &probes,
            &self.client,
            &self.logs,
        );
        let (seen, before) = watch_replicas(
            deploys.clone(),
            n,
            3,
            Some((1, boundary_real)),
            lead + Duration::from_secs(300),
        )
        .await;
        let scaled = Snapshot::take(&probes, &self.client, &self.logs).await;
        let operator_profile = at_boundary.await.unwrap().phase(
            &scaled,
            "boundary - 3 s to the last scale seen",
            n as f64 / 100.0,
        );
        let errors = op.metric("tdset_reconcile_errors_total");
        let lists = op.metric("tdset_reconciles_total");
        op.stop();
        let lags = lags_from(&seen, boundary_real);
        let early = lags.iter().filter(|l| **l < 0.0).count();
        // The floor: the same identity patching the same Deployments, 16 in flight.
        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t0 = Utc::now();
        let before_direct = Snapshot::take(&[], &self.client, &self.logs).await;
        stream::iter((0..n).map(|i| format!("g{i}")))
            .for_each_concurrent(16, |name| {
                let api = sa_deploys.clone();
                async move {
                    api.patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let (direct_seen, _) = watch.await.unwrap();
        let direct_profile = before_direct.phase(
            &Snapshot::take(&[], &self.client, &self.logs).await,
            "direct patches to the last seen",
            n as f64 / 100.0,
        );
        let direct = lags_from(&direct_seen, t0);
        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let ratio = p99 / d99;
        let _ = writeln!(
            self.report,
            "| boundary lag, group form (one TDSet holding N Deployments), as a ServiceAccount | N = {n} | operator p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s; p99 ratio {ratio:.2} (target <= 1.3: {}) | {} of {n} scaled; {before} seen at their own 1 before the boundary; {early} scaled early; reconciles {lists:.0}; reconcile errors {errors:.0}; profile: {operator_profile}; {direct_profile} |",
            if ratio <= 1.3 { "met" } else { "MISSED" },
            seen.len(),
        );
        println!("profile: {operator_profile}; {direct_profile}");
        println!(
            "group lag N={n}: p50 {p50:.3} p99 {p99:.3}; direct p99 {d99:.3}; ratio {ratio:.2}; early {early}; errors {errors}"
        );
        ns.cleanup().await;
    }

    /// Workloads created with a sleeping group's labels: from each create to its Deployment at
    /// the group's 0.
    pub(crate) async fn group_joins(&mut self, n: usize) {
        let ns = self.namespace(&format!("join{n}")).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let t = group_tdset(
            "group",
            json!({"env": "bench"}),
            json!([{"startTime": "00:00", "endTime": "23:59", "replica": 0}]),
        );
        api.create(&PostParams::default(), &t).await.unwrap();
        let op = operator_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some("2026-05-01T12:00:00Z".parse().unwrap()),
            &self.logs.join(format!("group-joins-{n}.log")),
            &[],
        );
        all_where(api.clone(), 1, |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| s.group.is_some())
        })
        .await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            0,
            None,
            Duration::from_secs(300),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        // One at a time, a quarter second apart: joins as they happen, not a storm.
        let mut created = HashMap::new();
        for d in group_deployments("j", n, 2, 1) {
            let name = d.name_any();
            created.insert(name, Utc::now());
            deploys.create(&PostParams::default(), &d).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let (seen, _) = watch.await.unwrap();
        let errors = op.metric("tdset_reconcile_errors_total");
        op.stop();
        let mut lat: Vec<f64> = seen
            .iter()
            .filter_map(|(name, at)| {
                Some((*at - *created.get(name)?).num_microseconds()? as f64 / 1e6)
            })
            .collect();
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (p50, p99, max) = summary(&lat);
        let _ = writeln!(
            self.report,
            "| joining a sleeping group (created with its labels, 4 a second) | N = {n} | create to asleep p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s | {} of {n} put to sleep; reconcile errors {errors:.0} |",
            seen.len()
        );
        println!("group joins N={n}: p50 {p50:.3} p99 {p99:.3} max {max:.3}");
        ns.cleanup().await;
    }

    /// 100 group TDSets holding 100 Deployments each: peak RSS converging (every workload put
    /// to sleep) and restarted against them.
    pub(crate) async fn group_memory(&mut self, groups: usize, per: usize) {
        let n = groups * per;
        let ns = self.namespace(&format!("grpmem{n}")).await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        create_all(&deploys, group_deployments("m", n, 1, groups)).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..groups)
            .map(|g| {
                group_tdset(
                    &format!("group{g}"),
                    json!({"grp": format!("g{g}")}),
                    json!([{"startTime": "00:00", "endTime": "23:59", "replica": 0}]),
                )
            })
            .collect();
        create_all(&api, objs).await;
        let at = Some("2026-05-01T12:00:00Z".parse().unwrap());
        let started = std::time::Instant::now();
        let first = operator_with(
            &self.kubeconfig,
            Some(&ns.name),
            at,
            &self.logs.join(format!("group-memory-{n}.log")),
            &[],
        );
        all_where(deploys.clone(), n, |d: &Deployment| {
            d.spec.as_ref().and_then(|s| s.replicas) == Some(0)
        })
        .await;
        let converged = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let converge_peak = first.proc_status("VmHWM:") as f64 / 1024.0;
        first.stop();
        let started = std::time::Instant::now();
        let op = operator_with(
            &self.kubeconfig,
            Some(&ns.name),
            at,
            &self.logs.join(format!("group-restart-{n}.log")),
            &[],
        );
        while op.metric("tdset_reconciles_total") < groups as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let peak = op.proc_status("VmHWM:") as f64 / 1024.0;
        let writes = op.metric("tdset_api_writes_total");
        op.stop();
        let verdict = |p: f64| if p < 100.0 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| group memory | {groups} group TDSets holding {per} Deployments each (N = {n}) | peak RSS converging {converge_peak:.1} MiB (target < 100 MiB: {}), restarted {peak:.1} MiB (target < 100 MiB: {}) | every workload asleep {:.1} s after the start; restarted: each group reconciled after {:.2} s, {writes:.0} writes |",
            verdict(converge_peak),
            verdict(peak),
            converged.as_secs_f64(),
            reconciled.as_secs_f64(),
        );
        println!(
            "group memory N={n}: converge {converge_peak:.1} MiB in {:.1}s, restart {peak:.1} MiB, writes {writes}",
            converged.as_secs_f64()
        );
        ns.cleanup().await;
    }

    /// The worst case the schema and the default flags allow for what groups hold in memory:
    /// `groups` groups (the default --concurrency, so all reconcile at once after a restart),
    /// each in its own namespace over --group-max-workloads Deployments with 253-character
    /// names (what a group keeps grows with the count and the names); after the first `tiny`
    /// of them (by name: listed first), `big` carrying ~1.4 MB of labels each (what an object
    /// weighs while it is decoded). Issue 48: with pages sized by the page before, tiny objects
    /// first made the next page 250 objects read whole. Peak RSS after a restart, when every
    /// group lists all of them.
    pub(crate) async fn group_worst(&mut self, groups: usize, per: usize, tiny: usize, big: usize) {
        let labels: std::collections::BTreeMap<String, String> = (0..10_500)
            .map(|i| {
                (
                    format!("t.example.com/l{i:05}-{}", "x".repeat(44)),
                    "v".repeat(63),
                )
            })
            .collect();
        let mut namespaces = Vec::new();
        let started = std::time::Instant::now();
        for g in 0..groups {
            let ns = self.namespace(&format!("grpworst{g}")).await;
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            let mut objs = group_deployments("w", per, 0, 1);
            for (i, d) in objs.iter_mut().enumerate() {
                let name = format!("{}{i:06}", "w".repeat(247));
                d.metadata.name = Some(name);
                if (tiny..tiny + big).contains(&i) {
                    d.metadata
                        .labels
                        .get_or_insert_default()
                        .extend(labels.clone());
                }
            }
            create_all(&deploys, objs).await;
            let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
            let t = group_tdset(
                "group",
                json!({"env": "bench"}),
                json!([{"startTime": "00:00", "endTime": "23:59", "replica": 0}]),
            );
            api.create(&PostParams::default(), &t).await.unwrap();
            namespaces.push(ns);
        }
        let created = started.elapsed();
        let at = Some("2026-05-01T12:00:00Z".parse().unwrap());
        // Converged once (every group's first reconcile), then the restart measured.
        let first = operator_with(
            &self.kubeconfig,
            None,
            at,
            &self.logs.join("group-worst-first.log"),
            &[],
        );
        while first.metric("tdset_reconciles_total") < groups as f64 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let first_peak = first.proc_status("VmHWM:") as f64 / 1024.0;
        first.stop();
        let started = std::time::Instant::now();
        let op = operator_with(
            &self.kubeconfig,
            None,
            at,
            &self.logs.join("group-worst.log"),
            &[],
        );
        while op.metric("tdset_reconciles_total") < groups as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let peak = op.proc_status("VmHWM:") as f64 / 1024.0;
        op.stop();
        let n = groups * per;
        let verdict = if peak < 256.0 {
            "under the chart's 256Mi limit"
        } else {
            "OVER the chart's 256Mi limit"
        };
        let _ = writeln!(
            self.report,
            "| group worst case | {groups} groups (one per namespace, all reconciling at once) x {per} Deployments (N = {n}, names of 253 characters; after the first {tiny} of each, {big} with 1.4 MB of labels) | peak RSS after a restart {peak:.1} MiB ({verdict}); first run {first_peak:.1} MiB | created in {:.0} s; every group reconciled {:.1} s after the restart |",
            created.as_secs_f64(),
            reconciled.as_secs_f64(),
        );
        println!("group worst N={n}: restart peak {peak:.1} MiB, first {first_peak:.1} MiB");
        for ns in namespaces {
            ns.cleanup().await;
        }
    }
}

/// The largest group spec the schema allows, as one shard sees another's: a selector of 32
/// labels (keys of 317 characters, values of 63) and 16 expressions of 64 values each, and
/// 256 excluded names of 253 characters. About 140 kB of spec that every shard indexes,
/// whichever reconciles it (issue 34: one writer per workload across shards).
fn largest_group_spec() -> serde_json::Value {
    let prefix = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    let key = |kind: &str, i: usize| format!("{prefix}/{kind}{}{i:02}", "n".repeat(60));
    let labels: serde_json::Map<String, serde_json::Value> = (0..32)
        .map(|i| (key("l", i), json!("v".repeat(63))))
        .collect();
    let expressions: Vec<serde_json::Value> = (0..16)
        .map(|i| {
            let values: Vec<String> = (0..64)
                .map(|v| format!("{}{v:02}", "x".repeat(61)))
                .collect();
            json!({"key": key("e", i), "operator": "In", "values": values})
        })
        .collect();
    let exclude: Vec<String> = (0..256)
        .map(|i| format!("{}{i:03}", "w".repeat(250)))
        .collect();
    json!({
        "scaleTargetSelector": {
            "kinds": ["Deployment"],
            "selector": {"matchLabels": labels, "matchExpressions": expressions},
            "exclude": exclude
        },
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 3}]
    })
}

impl Bench {
    /// What another shard's group TDSets cost a shard that reconciles none of them: the
    /// operator run as shard `a` over `n` TDSets labelled `shard: b`, each the largest group
    /// spec the schema allows, against the same operator before they were created.
    pub(crate) async fn shard_index(&mut self, n: usize) {
        let ns = self.namespace(&format!("shardidx{n}")).await;
        let extra = [
            "--shard",
            "a",
            "--shard-selector",
            "shard=a",
            "--lease-namespace",
            &ns.name,
        ];
        let rss = |op: &OperatorProcess| op.proc_status("VmRSS:") as f64 / 1024.0;
        let settle = Duration::from_secs(10);
        let empty = operator_with(
            &self.kubeconfig,
            None,
            None,
            &self.logs.join("shard-index-empty.log"),
            &extra,
        );
        tokio::time::sleep(settle).await;
        let before = rss(&empty);
        empty.stop();
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let spec = largest_group_spec();
        let bytes = serde_json::to_string(&spec).unwrap().len();
        let objs: Vec<TDSet> = (0..n)
            .map(|i| {
                let mut t = tdset(&format!("g{i}"), spec.clone());
                t.metadata.labels = Some([("shard".to_string(), "b".to_string())].into());
                t
            })
            .collect();
        let started = std::time::Instant::now();
        create_all(&api, objs).await;
        let created = started.elapsed();
        let op = operator_with(
            &self.kubeconfig,
            None,
            None,
            &self.logs.join("shard-index.log"),
            &extra,
        );
        tokio::time::sleep(settle).await;
        let (after, peak) = (rss(&op), op.proc_status("VmHWM:") as f64 / 1024.0);
        let each = (after - before) * 1024.0 * 1024.0 / n as f64;
        let _ = writeln!(
            self.report,
            "| another shard's groups, in a namespace where shard a has none | {n} group TDSets of shard b, each the largest spec the schema allows ({:.0} kB as JSON), seen by shard a (restarted after they were created) | RSS {after:.1} MiB against {before:.1} MiB with none: {:.1} kB per TDSet (peak {peak:.1} MiB); {} of them kept in a's indexes | created in {:.0} s |",
            bytes as f64 / 1000.0,
            each / 1000.0,
            op.metric("tdset_shard_other_tdsets_indexed"),
            created.as_secs_f64(),
        );
        println!(
            "shard index n={n}: {before:.1} -> {after:.1} MiB, {each:.0} B each, peak {peak:.1}"
        );
        // Shard a's first TDSet there: a needs all of b's now (one writer per workload), and
        // lists the namespace before it writes anything there.
        let mut mine = tdset("mine", spec.clone());
        mine.metadata.labels = Some([("shard".to_string(), "a".to_string())].into());
        let started = std::time::Instant::now();
        create_all(&api, vec![mine]).await;
        while op.metric("tdset_shard_index_fills_total") < 1.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let filled = started.elapsed();
        tokio::time::sleep(settle).await;
        let (kept, peak) = (rss(&op), op.proc_status("VmHWM:") as f64 / 1024.0);
        let _ = writeln!(
            self.report,
            "| the same namespace once shard a has a TDSet there | the {n} TDSets of shard b and one of a | listed and indexed {:.1} s after a's TDSet was created; RSS {kept:.1} MiB (peak {peak:.1} MiB); {} of b's kept | |",
            filled.as_secs_f64(),
            op.metric("tdset_shard_other_tdsets_indexed"),
        );
        println!("shard index filled in {filled:?}: {kept:.1} MiB, peak {peak:.1}");
        op.stop();
        ns.cleanup().await;
    }
}
