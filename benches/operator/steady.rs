//! Steady state and memory: writes while nothing is due, the operator's memory at N, and
//! after a restart.

use super::*;

impl Bench {
    pub(crate) async fn steady(&mut self, n: usize, secs: u64) {
        let (ns, op) = self.watched_namespace("steady", "steady.log").await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        // No transition in the window: every window is 10 minutes wide and far from now.
        let now = Utc::now();
        let far = (now + chrono::Duration::hours(12))
            .format("%H:00")
            .to_string();
        let far_end = (now + chrono::Duration::hours(13))
            .format("%H:00")
            .to_string();
        let objs = (0..n)
            .map(|i| {
                bench_tdset(
                    Form::Owned,
                    &format!("t{i}"),
                    json!([{"startTime": far, "endTime": far_end, "replica": 5}]),
                    2,
                )
            })
            .collect();
        create_all(&api, objs).await;
        self.converged(&ns.name, n, 2).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (w0, cpu0, server0) = (
            op.metric("tdset_api_writes_total"),
            op.cpu_seconds(),
            apiserver_writes(&self.client).await,
        );
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (w1, cpu1, server1) = (
            op.metric("tdset_api_writes_total"),
            op.cpu_seconds(),
            apiserver_writes(&self.client).await,
        );
        op.stop();
        let writes = w1 - w0;
        let verdict = if writes == 0.0 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| steady state | N = {n}, {secs} s | {writes:.0} operator writes (target 0: {verdict}); API server saw {:.0} mutating requests other than its own Leases | {:.2} CPU s ({:.3}% of one core) |",
            server1 - server0,
            cpu1 - cpu0,
            (cpu1 - cpu0) / secs as f64 * 100.0
        );
        println!(
            "steady N={n}: writes {writes}, server writes {}, cpu {:.2}s",
            server1 - server0,
            cpu1 - cpu0
        );
        ns.cleanup().await;
    }

    /// Peak RSS while converging `n` TDSets, with `unmanaged` Deployments the operator does
    /// not manage in the same namespace (its metadata watch sees them all).
    pub(crate) async fn memory(&mut self, n: usize, unmanaged: usize) {
        let ns = self.namespace(&format!("mem{n}")).await;
        if unmanaged > 0 {
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("unmanaged-", unmanaged, 1)).await;
        }
        let op = operator(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("memory-{n}-{unmanaged}.log")),
        );
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n).map(|i| bench_tdset(Form::Owned, &format!("t{i}"), json!([{"startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 17, "endTime": 9, "replica": 1}]), 2)).collect();
        create_all(&api, objs).await;
        let tdsets: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        loop {
            let ok = tdsets
                .list(&ListParams::default())
                .await
                .map(|l| l.items.iter().filter(|t| t.status.is_some()).count())
                .unwrap_or(0);
            if ok >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (hwm, rss) = (op.proc_status("VmHWM:"), op.proc_status("VmRSS:"));
        op.stop();
        let peak = hwm as f64 / 1024.0;
        let target = if n >= 10_000 {
            if peak < 100.0 {
                " (target < 100 MiB: met)"
            } else {
                " (target < 100 MiB: MISSED)"
            }
        } else {
            ""
        };
        let _ = writeln!(
            self.report,
            "| memory | N = {n}{} | peak RSS {peak:.1} MiB{target} | RSS after converging {:.1} MiB |",
            if unmanaged > 0 {
                format!(", with {unmanaged} unmanaged Deployments")
            } else {
                String::new()
            },
            rss as f64 / 1024.0
        );
        println!("memory N={n}: peak {peak:.1} MiB");
        ns.cleanup().await;
    }

    /// Peak RSS of an operator started against a cluster that already holds `n` converged
    /// TDSets and their Deployments, from its start until it has reconciled each of them once.
    pub(crate) async fn restart(&mut self, n: usize) {
        self.restart_with(n, false).await;
    }

    /// Restart memory; with `full_history`, every TDSet's status carries the 10 entries of
    /// history it has after ten changes (the most it keeps) before the operator restarts.
    pub(crate) async fn restart_with(&mut self, n: usize, full_history: bool) {
        let ns = self
            .namespace(&if full_history {
                format!("history{n}")
            } else {
                format!("restart{n}")
            })
            .await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n).map(|i| bench_tdset(Form::Owned, &format!("t{i}"), json!([{"startTime": 9, "endTime": 17, "replica": 3}, {"startTime": 17, "endTime": 9, "replica": 1}]), 2)).collect();
        create_all(&api, objs).await;
        let first = operator(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("restart-first-{n}.log")),
        );
        all_where(api.clone(), n, |t: &TDSet| t.status.is_some()).await;
        let converge_peak = first.proc_status("VmHWM:") as f64 / 1024.0;
        first.stop();
        if full_history {
            // Ten changes, as the operator records them (times to the millisecond, a window's
            // name as the reason).
            let entries: Vec<serde_json::Value> = (0..tdset_operator::api::MAX_HISTORY)
                .map(|i| {
                    json!({"at": format!("2026-05-{:02}T09:00:00Z", 10 - i), "appliedAt": format!("2026-05-{:02}T09:00:00.412Z", 10 - i),
                           "from": 1, "to": 3, "reason": "window 09:00-17:00"})
                })
                .collect();
            stream::iter(0..n)
                .for_each_concurrent(CONCURRENCY, |i| {
                    let (api, entries) = (api.clone(), entries.clone());
                    async move {
                        api.patch_status(
                            &format!("t{i}"),
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(json!({"status": {"history": entries}})),
                        )
                        .await
                        .unwrap();
                    }
                })
                .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let started = std::time::Instant::now();
        let op = operator(
            &self.kubeconfig,
            Some(&ns.name),
            None,
            &self.logs.join(format!("restart-{n}.log")),
        );
        let ready = started.elapsed();
        while op.metric("tdset_reconciles_total") < n as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let reconciled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (hwm, rss) = (op.proc_status("VmHWM:"), op.proc_status("VmRSS:"));
        let writes = op.metric("tdset_api_writes_total");
        op.stop();
        let peak = hwm as f64 / 1024.0;
        let target = if n >= 10_000 {
            format!(
                " (target < 64 MiB: {})",
                if peak < 64.0 { "met" } else { "MISSED" }
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            self.report,
            "| restart memory{} | N = {n} converged TDSets and Deployments | peak RSS {peak:.1} MiB from start until each TDSet was reconciled once{target} | ready (caches synced) after {:.2} s, all reconciled after {:.2} s, {writes:.0} writes; RSS then {:.1} MiB; the first operator peaked at {converge_peak:.1} MiB converging them |",
            if full_history {
                ", every status with a full history (10 entries)"
            } else {
                ""
            },
            ready.as_secs_f64(),
            reconciled.as_secs_f64(),
            rss as f64 / 1024.0
        );
        println!(
            "restart N={n}: peak {peak:.1} MiB (converge {converge_peak:.1} MiB), ready {:.2}s, reconciled {:.2}s, writes {writes}",
            ready.as_secs_f64(),
            reconciled.as_secs_f64()
        );
        ns.cleanup().await;
    }
}
