//! What one TDSet status write costs the API server, by how it is sent (issue 37): N TDSets
//! with a full status (three conditions, a full history), each written N times per kind at
//! 16 in flight from the operator's identity, in two mirrored rounds.

use super::*;
use kube::api::{Patch, PatchParams};
use tdset_operator::api::MAX_HISTORY;

/// A status as the operator writes it at boundary `k` (the k-th change of the day).
fn status_at(k: usize) -> serde_json::Value {
    let at = |j: usize| format!("2026-05-01T{:02}:{:02}:00Z", (j / 60) % 24, j % 60);
    let history: Vec<serde_json::Value> = (k.saturating_sub(MAX_HISTORY - 1)..=k)
        .map(|j| {
            json!({"at": at(j), "appliedAt": at(j), "from": j % 7 + 1, "to": (j + 1) % 7 + 1,
                   "reason": "window 09:00-17:00 is active"})
        })
        .collect();
    let cond = |t: &str, status: &str, reason: &str, message: String| {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "observedGeneration": 1, "lastTransitionTime": at(k)})
    };
    json!({
        "observedGeneration": 1,
        "desiredReplicas": (k + 1) % 7 + 1,
        "replicas": k % 7 + 1,
        "readyReplicas": k % 7 + 1,
        "activeWindow": format!("{:02}:00-17:00", k % 24),
        "nextTransitionTime": at(k + 1),
        "nextReplicas": (k + 2) % 7 + 1,
        "savings": {"cpu": "0", "memory": "0", "replicas": 0},
        "conditions": [
            cond("Available", "False", "ReplicasNotReady", format!("{}/{} replicas ready; see `kubectl describe deployment t0`", k % 7 + 1, (k + 1) % 7 + 1)),
            cond("Progressing", "True", "Scaling", format!("scaling Deployment t0 to {} replicas ({} now)", (k + 1) % 7 + 1, k % 7 + 1)),
            cond("Degraded", "False", "AsExpected", "the schedule is valid and applied".into()),
        ],
        "history": history,
    })
}

/// The fields of `new` that differ from `old`, as a JSON merge patch (RFC 7386): objects
/// recursively, anything else whole, a key gone as null.
fn merge_diff(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    match (old, new) {
        (serde_json::Value::Object(o), serde_json::Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov) => {
                        out.insert(k.clone(), merge_diff(ov, v));
                    }
                    None => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), serde_json::Value::Null);
            }
            serde_json::Value::Object(out)
        }
        _ => new.clone(),
    }
}

impl Bench {
    pub(crate) async fn status_writes(&mut self, n: usize) {
        let ns = self.namespace(&format!("statuscost{n}")).await;
        let api: Api<TDSet> = Api::namespaced(self.client.clone(), &ns.name);
        let objs = (0..n)
            .map(|i| {
                bench_tdset(
                    Form::Owned,
                    &format!("s{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
                    1,
                )
            })
            .collect();
        create_all(&api, objs).await;
        let sa: Api<TDSet> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let manager = tdset_operator::workload::owned::FIELD_MANAGER;
        let mut uids = HashMap::new();
        for t in api.list(&ListParams::default()).await.unwrap() {
            uids.insert(t.name_any(), t.uid().unwrap());
        }
        // Every TDSet at a full history, written by the operator's manager as it does now.
        let mut k = MAX_HISTORY;
        let ssa = |name: &str, uid: &str, k: usize| {
            json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet",
                   "metadata": {"name": name, "uid": uid}, "status": status_at(k)})
        };
        stream::iter(0..n)
            .for_each_concurrent(16, |i| {
                let (sa, name) = (sa.clone(), format!("s{i}"));
                let body = ssa(&name, &uids[&name], k);
                async move {
                    sa.patch_status(
                        &name,
                        &PatchParams::apply(manager).force(),
                        &Patch::Apply(&body),
                    )
                    .await
                    .unwrap();
                }
            })
            .await;
        let size = serde_json::to_vec(&status_at(k)).unwrap().len();
        let (nocel, nocel_admin) = self.without_cel(&ns.name, n, k).await;
        let kinds = [
            "server-side apply of the whole status (before)",
            "JSON merge patch of the whole status, uid + resourceVersion guard",
            "JSON merge patch of what changed, uid + resourceVersion guard",
            "server-side apply of the whole status, one history entry",
            "server-side apply of the whole status, as the admin (no RBAC check)",
            "server-side apply of the whole status, as the admin, to a copy of the CRD without CEL rules",
            "JSON merge patch of desiredReplicas alone, uid + resourceVersion guard (the least a status write can send)",
        ];
        for (round, order) in [[0, 1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1, 0]]
            .iter()
            .enumerate()
        {
            for &kind in order {
                // Where each object stands, as a cache would know it.
                let mut rvs = HashMap::new();
                for t in api.list(&ListParams::default()).await.unwrap() {
                    rvs.insert(t.name_any(), t.resource_version().unwrap());
                }
                let (old, new) = (status_at(k), status_at(k + 1));
                k += 1;
                let diff = merge_diff(&old, &new);
                let bytes = match kind {
                    0 | 4 | 5 => serde_json::to_vec(&ssa("s0", &uids["s0"], k))
                        .unwrap()
                        .len(),
                    1 => serde_json::to_vec(&json!({"status": new})).unwrap().len() + 90,
                    3 => serde_json::to_vec(&ssa("s0", &uids["s0"], 0))
                        .unwrap()
                        .len(),
                    6 => {
                        serde_json::to_vec(&json!({"status": {"desiredReplicas": 1}}))
                            .unwrap()
                            .len()
                            + 90
                    }
                    _ => serde_json::to_vec(&json!({"status": diff})).unwrap().len() + 90,
                };
                let (size, entries) = if kind == 3 {
                    let small = status_at(k % 2);
                    (
                        serde_json::to_vec(&small).unwrap().len(),
                        small["history"].as_array().map_or(0, Vec::len),
                    )
                } else {
                    (size, MAX_HISTORY)
                };
                tokio::time::sleep(Duration::from_secs(2)).await;
                let cpu0 = control_plane_cpu(&self.logs);
                let t0 = Instant::now();
                let done: Vec<f64> = stream::iter(0..n)
                    .map(|i| {
                        let (sa, name) = (sa.clone(), format!("s{i}"));
                        let (admin, nocel) = (api.clone(), nocel.clone());
                        let nocel_uid = nocel_admin.get(&name).cloned();
                        let (uid, rv) = (uids[&name].clone(), rvs[&name].clone());
                        let (new, diff) = (new.clone(), diff.clone());
                        async move {
                            let meta = json!({"uid": uid, "resourceVersion": rv});
                            let apply = PatchParams::apply(manager).force();
                            let merge = PatchParams {
                                field_manager: Some(manager.into()),
                                ..Default::default()
                            };
                            let whole = |uid: &str, status: serde_json::Value, group: &str| {
                                Patch::Apply(
                                    json!({"apiVersion": format!("{group}/v1"), "kind": "TDSet",
                                    "metadata": {"name": name, "uid": uid}, "status": status}),
                                )
                            };
                            // `None`: the copy of the CRD without CEL rules (a dynamic type).
                            let (api, pp, patch) = match kind {
                                0 => (Some(sa), apply, whole(&uid, new, "schedule.rs")),
                                1 => (
                                    Some(sa),
                                    merge,
                                    Patch::Merge(json!({"metadata": meta, "status": new})),
                                ),
                                2 => (
                                    Some(sa),
                                    merge,
                                    Patch::Merge(json!({"metadata": meta, "status": diff})),
                                ),
                                3 => (
                                    Some(sa),
                                    apply,
                                    whole(&uid, status_at(k % 2), "schedule.rs"),
                                ),
                                4 => (Some(admin), apply, whole(&uid, new, "schedule.rs")),
                                5 => {
                                    let uid = nocel_uid.unwrap_or_default();
                                    (None, apply, whole(&uid, new, "nocel.schedule.rs"))
                                }
                                // Only the count: the object stays as large as before.
                                _ => {
                                    let status = json!({"desiredReplicas": new["desiredReplicas"]});
                                    (
                                        Some(sa),
                                        merge,
                                        Patch::Merge(json!({"metadata": meta, "status": status})),
                                    )
                                }
                            };
                            match api {
                                Some(api) => {
                                    api.patch_status(&name, &pp, &patch).await.unwrap();
                                }
                                None => {
                                    nocel.patch_status(&name, &pp, &patch).await.unwrap();
                                }
                            }
                            t0.elapsed().as_secs_f64()
                        }
                    })
                    .buffer_unordered(16)
                    .collect()
                    .await;
                let wall = t0.elapsed().as_secs_f64();
                let cpu = control_plane_cpu(&self.logs) - cpu0;
                let mut done = done;
                done.sort_by(f64::total_cmp);
                let (p50, p99, _) = summary(&done);
                let _ = writeln!(
                    self.report,
                    "| status write by kind, round {} | N = {n} | {}: {n} writes in {wall:.2} s (done p50 {p50:.2} s, p99 {p99:.2} s) | kube-apiserver + etcd {cpu:.2} CPU-s ({:.2} ms each); body {bytes} bytes; the status itself {size} bytes, {entries} history entries |",
                    round + 1,
                    kinds[kind],
                    cpu * 1000.0 / n as f64,
                );
                println!(
                    "status writes round {} {}: {wall:.2}s, control plane {cpu:.2} CPU-s, body {bytes} B",
                    round + 1,
                    kinds[kind]
                );
            }
        }
        ns.cleanup().await;
    }

    /// The TDSet CRD copied under group `nocel.schedule.rs` with every CEL rule taken out, and
    /// `n` of its TDSets in `ns` at status `k`: what the rules cost a status write. Returns an
    /// admin's API for them and their uids.
    async fn without_cel(
        &self,
        ns: &str,
        n: usize,
        k: usize,
    ) -> (Api<kube::api::DynamicObject>, HashMap<String, String>) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.remove("x-kubernetes-validations");
                    m.values_mut().for_each(strip);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let text = std::fs::read_to_string(repo_root().join("crds/tdset.yaml")).unwrap();
        let mut crd: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        strip(&mut crd);
        crd["metadata"] = json!({"name": "tdsets.nocel.schedule.rs"});
        crd["spec"]["group"] = json!("nocel.schedule.rs");
        let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .patch(
                "tdsets.nocel.schedule.rs",
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let ar = kube::api::ApiResource {
            group: "nocel.schedule.rs".into(),
            version: "v1".into(),
            api_version: "nocel.schedule.rs/v1".into(),
            kind: "TDSet".into(),
            plural: "tdsets".into(),
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        let objs: Vec<kube::api::DynamicObject> = (0..n)
            .map(|i| {
                let mut t = serde_json::to_value(bench_tdset(
                    Form::Owned,
                    &format!("s{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
                    1,
                ))
                .unwrap();
                t["apiVersion"] = json!("nocel.schedule.rs/v1");
                serde_json::from_value(t).unwrap()
            })
            .collect();
        create_all(&api, objs).await;
        let mut uids = HashMap::new();
        for t in api.list(&ListParams::default()).await.unwrap() {
            let (name, uid) = (t.name_any(), t.uid().unwrap());
            let body = json!({"apiVersion": "nocel.schedule.rs/v1", "kind": "TDSet",
                "metadata": {"name": name, "uid": uid}, "status": status_at(k)});
            api.patch_status(
                &name,
                &PatchParams::apply(tdset_operator::workload::owned::FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap();
            uids.insert(name, uid);
        }
        (api, uids)
    }
}
