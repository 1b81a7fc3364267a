//! Boundaries: N TDSets converging, crossing a window's start (owned, scaleTargetRef,
//! in shards), a calendar's change, and what one scale costs by write kind.

use super::*;

impl Bench {
    pub(crate) async fn converge(&mut self, n: usize, form: Form) {
        let (ns, op) = self
            .watched_namespace(
                &format!("conv{n}"),
                format!("converge-{}-{n}.log", form.label()),
            )
            .await;
        if form == Form::Ref {
            // The targets exist before the TDSets, at a count the schedule changes.
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("t", n, 1)).await;
        }
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| bench_tdset(form, &format!("t{i}"), json!([]), 2))
            .collect();
        let cp_before = control_plane_cpu(&self.logs);
        let started = Instant::now();
        let create = create_all(&api, objs).await;
        self.converged(&ns.name, n, 2).await;
        let converge = started.elapsed();
        let cp_cpu = control_plane_cpu(&self.logs) - cp_before;
        let writes = op.metric("tdset_api_writes_total");
        let by_kind = op.writes_by_kind();
        let cpu = op.cpu_seconds();
        op.stop();
        // The floor for the operator: the same TDSets created with nobody watching them.
        let alone_ns = self.namespace(&format!("alone{n}")).await;
        let alone_api: Api<TDSet> = Api::namespaced(self.client.clone(), &alone_ns.name);
        let alone = create_all(
            &alone_api,
            (0..n)
                .map(|i| bench_tdset(form, &format!("t{i}"), json!([]), 2))
                .collect(),
        )
        .await;
        // The same client creating the same N Deployments directly.
        let direct_ns = self.namespace(&format!("direct{n}")).await;
        let dapi: Api<Deployment> = Api::namespaced(self.client.clone(), &direct_ns.name);
        let deploys = app_deployments("t", n, 2);
        let cp_before = control_plane_cpu(&self.logs);
        let direct = create_all(&dapi, deploys).await;
        let direct_cp_cpu = control_plane_cpu(&self.logs) - cp_before;
        let ratio = converge.as_secs_f64() / direct.as_secs_f64();
        let verdict = if ratio <= 1.5 { "met" } else { "MISSED" };
        let _ = writeln!(
            self.report,
            "| converge, {} | N = {n} | {:.2} s to converge (TDSet creates took {:.2} s; {:.2} s with no operator running) | direct Deployment creates {:.2} s | ratio {ratio:.2} (target <= 1.5: {verdict}); operator writes {writes:.0} ({:.1}/TDSet: {by_kind}); CPU: operator {cpu:.2} s, API server + etcd {cp_cpu:.2} s (direct: {direct_cp_cpu:.2} s) |",
            form.label(),
            converge.as_secs_f64(),
            create.as_secs_f64(),
            alone.as_secs_f64(),
            direct.as_secs_f64(),
            writes / n as f64
        );
        println!(
            "converge {} N={n}: {:.2}s, direct {:.2}s, TDSets alone {:.2}s, ratio {ratio:.2}, writes {writes} ({by_kind}), CPU operator {cpu:.2}s, control plane {cp_cpu:.2}s (direct {direct_cp_cpu:.2}s)",
            form.label(),
            converge.as_secs_f64(),
            direct.as_secs_f64(),
            alone.as_secs_f64()
        );
        ns.cleanup().await;
        alone_ns.cleanup().await;
        direct_ns.cleanup().await;
    }

    pub(crate) async fn lag(&mut self, n: usize, form: Form) {
        self.lag_in_shards(n, form, 1).await;
    }

    /// The boundary lag with the TDSets split over `shards` operator processes (1: one
    /// operator, not sharded), each with its own selector and Lease.
    pub(crate) async fn lag_in_shards(&mut self, n: usize, form: Form, shards: usize) {
        let ns = self
            .namespace(&if shards > 1 {
                format!("lag{n}s{shards}")
            } else {
                format!("lag{n}")
            })
            .await;
        if shards > 1 {
            self.grant_leases(&ns.name).await;
        }
        if form == Form::Ref {
            let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
            create_all(&deploys, app_deployments("t", n, 1)).await;
        }
        let boundary: DateTime<Utc> = "2026-05-01T09:00:00Z".parse().unwrap();
        // Long enough for the operator to list everything and settle every TDSet at 1 first.
        let lead = Duration::from_secs(match n {
            0..=200 => 12,
            201..=2000 => 40,
            _ => 240,
        });
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                let mut t = bench_tdset(
                    form,
                    &format!("t{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
                    1,
                );
                if shards > 1 {
                    t.metadata.labels =
                        Some([("shard".to_string(), format!("s{}", i % shards))].into());
                }
                t
            })
            .collect();
        create_all(&api, objs).await;
        // The operator's clock reads `boundary - lead` when it starts; the boundary then comes
        // `lead` later in real time (measured from just before the spawn: lag is overstated
        // by the process start-up, never understated). Default flags, ServiceAccount identity.
        let rejected0 = apiserver_rejected(&self.client).await;
        let spawned = Utc::now();
        let ops: Vec<OperatorProcess> = (0..shards)
            .map(|k| {
                let (shard, selector) = (format!("s{k}"), format!("shard=s{k}"));
                let extra: Vec<&str> = if shards > 1 {
                    vec![
                        "--shard",
                        &shard,
                        "--shard-selector",
                        &selector,
                        "--lease-namespace",
                        &ns.name,
                        "--instance",
                        &shard,
                    ]
                } else {
                    vec![]
                };
                operator_with(
                    &self.sa_kubeconfig,
                    Some(&ns.name),
                    Some(boundary - chrono::Duration::from_std(lead).unwrap()),
                    &self
                        .logs
                        .join(format!("lag-{}-{n}-{k}of{shards}.log", form.label())),
                    &extra,
                )
            })
            .collect();
        let boundary_real = spawned + chrono::Duration::from_std(lead).unwrap();
        // The profile: what each phase cost, from just before the boundary.
        let probes: Vec<(String, u32)> = ops.iter().map(|op| (op.addr.clone(), op.pid())).collect();
        let at_boundary = Snapshot::ahead_of(
            boundary_real,
            Duration::from_secs(3),
            &probes,
            &self.client,
            &self.logs,
        );
        // Every status at the new count, watched from before the boundary: a list of N TDSets
        // taken once the scale phase ends would load the API server in the phase it measures.
        let statuses_at_new_count = tokio::spawn(all_where(
            Api::<TDSet>::namespaced(self.client.clone(), &ns.name),
            n,
            |t: &TDSet| {
                t.status
                    .as_ref()
                    .is_some_and(|s| s.desired_replicas == Some(3))
            },
        ));
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let (seen, before) = watch_replicas(
            deploys.clone(),
            n,
            3,
            Some((1, boundary_real)),
            lead + Duration::from_secs(300),
        )
        .await;
        // Bookkeeping done too: every status written after the burst.
        let statuses = std::time::Instant::now();
        let scaled = Snapshot::take(&probes, &self.client, &self.logs).await;
        // TDSET_BENCH_PPROF=1: a CPU profile of kube-apiserver over the first 20 s of the
        // status phase (`go tool pprof -top` reads it).
        let pprof = std::env::var_os("TDSET_BENCH_PPROF").map(|_| {
            let out = self.logs.join(format!("apiserver-status-phase-{n}.pprof"));
            let kubeconfig = self.kubeconfig.clone();
            let path = out.clone();
            (
                out,
                std::thread::spawn(move || {
                    let o = Command::new(kubectl_path())
                        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
                        .args(["get", "--raw", "/debug/pprof/profile?seconds=20"])
                        .output()
                        .unwrap();
                    std::fs::write(&path, o.stdout).unwrap();
                }),
            )
        });
        statuses_at_new_count.await.unwrap();
        let bookkeeping = statuses.elapsed();
        let statused = Snapshot::take(&probes, &self.client, &self.logs).await;
        let at_boundary = at_boundary.await.unwrap();
        // Every Event of the boundary sent (one per TDSet), or two minutes without.
        let mut evented = Snapshot::take(&probes, &self.client, &self.logs).await;
        while at_boundary.count(&evented, "POST events") < n as f64
            && evented.at.duration_since(statused.at) < Duration::from_secs(120)
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
            evented = Snapshot::take(&probes, &self.client, &self.logs).await;
        }
        let min = n as f64 / 100.0;
        let profile = format!(
            "profile: {}; {}; {}; Events of the boundary: {:.0} of {n} sent {:.2} s after the last scale was seen",
            at_boundary.phase(&scaled, "boundary - 3 s to the last scale seen", min),
            scaled.phase(&statused, "then to every status written", min),
            statused.phase(&evented, "then to the Events sent", min),
            at_boundary.count(&evented, "POST events"),
            evented.at.duration_since(statuses).as_secs_f64(),
        );
        println!("{profile}");
        if let Some((path, t)) = pprof {
            let _ = t.join();
            println!(
                "kube-apiserver CPU profile of the status phase: {}",
                path.display()
            );
        }
        let errors: f64 = ops
            .iter()
            .map(|op| op.metric("tdset_reconcile_errors_total"))
            .sum();
        let superseded: f64 = ops
            .iter()
            .map(|op| op.metric("tdset_bookkeeping_superseded_total"))
            .sum();
        for op in ops {
            op.stop();
        }
        let rejected_op = apiserver_rejected(&self.client).await - rejected0;
        let lags = lags_from(&seen, boundary_real);
        let early = lags.iter().filter(|l| **l < 0.0).count();

        // The floor: the same client identity patching the same N Deployments' replicas
        // directly, with the operator's default concurrency (16), timed the same way.
        let rejected0 = apiserver_rejected(&self.client).await;
        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        // Let the watch's initial list finish before the clock starts.
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        stream::iter(names)
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
        let rejected_direct = apiserver_rejected(&self.client).await - rejected0;
        let direct = lags_from(&direct_seen, t0);

        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let ratio = p99 / d99;
        let mut target = String::new();
        if n <= 100 {
            let _ = write!(
                target,
                " (target p99 < 1 s: {})",
                if p99 < 1.0 { "met" } else { "MISSED" }
            );
        }
        if n == 1000 {
            let _ = write!(
                target,
                "; p99 ratio {ratio:.2} (target <= 1.3: {})",
                if ratio <= 1.3 { "met" } else { "MISSED" }
            );
        } else {
            let _ = write!(target, "; p99 ratio {ratio:.2}");
        }
        let _ = writeln!(
            self.report,
            "| boundary lag, {}, default flags, as a ServiceAccount{} | N = {n} | operator p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s{target} | {} of {n} scaled; {before} seen at 1 replica before the boundary; {early} scaled early; every status written {:.2} s after the last scale was seen; 429s from the API server: {rejected_op:.0} during the operator run, {rejected_direct:.0} during the direct patches; operator reconcile errors {errors:.0}; statuses superseded before sending {superseded:.0}; {profile} |",
            form.label(),
            if shards > 1 {
                format!(", {shards} shards (one process each)")
            } else {
                String::new()
            },
            seen.len(),
            bookkeeping.as_secs_f64(),
        );
        println!(
            "lag {} N={n} shards={shards}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; direct p50 {d50:.3} p99 {d99:.3} max {dmax:.3}; ratio {ratio:.2}; scaled {} early {early}; 429s {rejected_op}/{rejected_direct}; errors {errors}",
            form.label(),
            seen.len()
        );
        ns.cleanup().await;
    }

    /// A shared calendar named by N TDSets, changed at the instant it takes effect: today is
    /// added while every weekday window is open, and each Deployment must go to the default.
    /// Timed from the calendar's write to each Deployment at its new count, against N direct
    /// patches from the same identity in the same run.
    pub(crate) async fn calendar(&mut self, n: usize) {
        let ns = self.namespace(&format!("cal{n}")).await;
        let name = format!("bench-{}", ns.name);
        let calendars: Api<tdset_operator::api::TDCalendar> = Api::all(self.client.clone());
        let calendar = |dates: Vec<&str>| -> tdset_operator::api::TDCalendar {
            serde_json::from_value(json!({
                "apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
                "metadata": {"name": name}, "spec": {"holidays": dates}
            }))
            .unwrap()
        };
        let apply = kube::api::PatchParams::apply("bench").force();
        calendars
            .patch(
                &name,
                &apply,
                &kube::api::Patch::Apply(&calendar(vec!["2026-12-25"])),
            )
            .await
            .unwrap();
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                let mut t = bench_tdset(
                    Form::Owned,
                    &format!("c{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3, "days": ["Mon", "Tue", "Wed", "Thu", "Fri"]}]),
                    1,
                );
                t.spec.calendars = vec![tdset_operator::api::CalendarName(name.clone())];
                t
            })
            .collect();
        create_all(&api, objs).await;
        // Thursday 2026-12-03, 10:00 UTC on the operator's clock: every window is open.
        let op = operator_with(
            &self.sa_kubeconfig,
            Some(&ns.name),
            Some("2026-12-03T10:00:00Z".parse().unwrap()),
            &self.logs.join(format!("calendar-{n}.log")),
            &[],
        );
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        watch_replicas(deploys.clone(), n, 3, None, Duration::from_secs(600)).await;
        self.converged_status(&ns.name, n, 3).await;
        // Today becomes a holiday: every TDSet goes to its default, 1.
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            1,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        calendars
            .patch(
                &name,
                &apply,
                &kube::api::Patch::Apply(&calendar(vec!["2026-12-25", "2026-12-03"])),
            )
            .await
            .unwrap();
        let (seen, _) = watch.await.unwrap();
        let errors = op.metric("tdset_reconcile_errors_total");
        op.stop();
        let lags = lags_from(&seen, t0);

        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let watch = tokio::spawn(watch_replicas(
            deploys.clone(),
            n,
            5,
            None,
            Duration::from_secs(600),
        ));
        tokio::time::sleep(Duration::from_secs(if n > 2000 { 10 } else { 2 })).await;
        let t0 = Utc::now();
        stream::iter((0..n).map(|i| format!("c{i}")))
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
        let direct = lags_from(&direct_seen, t0);
        let (p50, p99, max) = summary(&lags);
        let (d50, d99, dmax) = summary(&direct);
        let _ = writeln!(
            self.report,
            "| a shared calendar changed under N TDSets (today added while their windows are open) | N = {n} | from the calendar's write to each Deployment at its new count: p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s; direct patches p50 {d50:.3} s, p99 {d99:.3} s, max {dmax:.3} s; p99 ratio {:.2} | {} of {n} changed; operator reconcile errors {errors:.0} |",
            p99 / d99,
            seen.len(),
        );
        println!(
            "calendar N={n}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; direct p99 {d99:.3}; scaled {}",
            seen.len()
        );
        let _ = calendars.delete(&name, &Default::default()).await;
        ns.cleanup().await;
    }

    /// Waits until `n` TDSets report `replicas` in status.
    /// What a scale costs, by the kind of write: the same ServiceAccount sets the replicas of
    /// the same N operator-shaped Deployments (as the operator creates them) with 16 requests
    /// in flight, once as a JSON merge patch of `spec.replicas` (the lag baseline), once as a
    /// server-side apply of the whole Deployment (what the operator sent before issue 14), once
    /// as a server-side apply to `/scale`. Two rounds in mirrored order, so neither a warm cache
    /// nor a growing etcd favours one kind.
    pub(crate) async fn writes(&mut self, n: usize) {
        let ns = self.namespace(&format!("writes{n}")).await;
        let owner = |i: usize| {
            let mut t = bench_tdset(Form::Owned, &format!("w{i}"), json!([]), 1);
            t.metadata.namespace = Some(ns.name.clone());
            t.metadata.uid = Some(format!("00000000-0000-0000-0000-{i:012}"));
            t
        };
        let desired = |i: usize, replicas: i32| {
            tdset_operator::workload::owned::desired_deployment(&owner(i), replicas)
                .unwrap()
                .unwrap()
        };
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        let sa: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        stream::iter(0..n)
            .map(|i| {
                let (api, d) = (deploys.clone(), desired(i, 1));
                let pp = PostParams {
                    field_manager: Some(tdset_operator::workload::owned::FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                async move { api.create(&pp, &d).await.map(|_| ()) }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await
            .expect("create");
        let kinds = [
            "merge patch of spec.replicas",
            "apply of the whole Deployment",
            "apply to /scale",
        ];
        let mut replicas = 1;
        for (round, order) in [[0, 1, 2], [2, 1, 0]].iter().enumerate() {
            for &k in order {
                replicas += 1;
                let watch = tokio::spawn(watch_replicas(
                    deploys.clone(),
                    n,
                    replicas,
                    None,
                    Duration::from_secs(600),
                ));
                tokio::time::sleep(Duration::from_secs(2)).await;
                let cpu0 = control_plane_cpu(&self.logs);
                let t0 = Utc::now();
                stream::iter(0..n)
                    .for_each_concurrent(16, |i| {
                        let api = sa.clone();
                        let name = format!("w{i}");
                        let manager = tdset_operator::workload::owned::FIELD_MANAGER;
                        let whole = desired(i, replicas);
                        async move {
                            match k {
                                0 => api
                                    .patch(
                                        &name,
                                        &kube::api::PatchParams::default(),
                                        &kube::api::Patch::Merge(
                                            json!({"spec": {"replicas": replicas}}),
                                        ),
                                    )
                                    .await
                                    .map(|_| ()),
                                1 => api
                                    .patch(
                                        &name,
                                        &kube::api::PatchParams::apply(manager).force(),
                                        &kube::api::Patch::Apply(&whole),
                                    )
                                    .await
                                    .map(|_| ()),
                                _ => api
                                    .patch_scale(
                                        &name,
                                        &kube::api::PatchParams::apply(manager).force(),
                                        &kube::api::Patch::Apply(
                                            &tdset_operator::workload::target::scale_body(
                                                &name, replicas,
                                            ),
                                        ),
                                    )
                                    .await
                                    .map(|_| ()),
                            }
                            .unwrap();
                        }
                    })
                    .await;
                let (seen, _) = watch.await.unwrap();
                let cpu = control_plane_cpu(&self.logs) - cpu0;
                let (p50, p99, max) = summary(&lags_from(&seen, t0));
                let _ = writeln!(
                    self.report,
                    "| scale by write kind, round {} | N = {n} | {}: p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s | {} of {n} seen; kube-apiserver + etcd {cpu:.2} CPU-s |",
                    round + 1,
                    kinds[k],
                    seen.len(),
                );
                println!(
                    "writes round {} {}: p50 {p50:.3} p99 {p99:.3} max {max:.3}; control plane {cpu:.2} CPU-s",
                    round + 1,
                    kinds[k]
                );
            }
        }
        ns.cleanup().await;
    }
}
