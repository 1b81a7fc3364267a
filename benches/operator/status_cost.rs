//! What one TDSet status write costs the API server, by how it is sent (issue 37): N TDSets
//! with a full status (three conditions, a full history), each written once per kind at 16
//! in flight, in two mirrored rounds; beside them the same write to copies of the CRD with
//! less schema, and the floors (a one-field custom resource, a Deployment's count). Each
//! write sets a count no earlier write left, so none is a no-op.

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

/// Where a write kind goes.
#[derive(Clone, Copy)]
enum To {
    /// The TDSet, as the operator's ServiceAccount.
    Tdset,
    /// The TDSet, as the admin.
    TdsetAdmin,
    NoCel,
    Schemaless,
    UntypedStatus,
    Floor,
    /// A Deployment itself (`spec.replicas`), not a status, as the ServiceAccount.
    Deployment,
}

/// One write kind at one step: what each object is sent.
struct Write {
    kind: usize,
    /// The whole status the operator would write now.
    new: serde_json::Value,
    /// What changed from the stored status.
    diff: serde_json::Value,
    /// The count the count-only kinds set.
    count: usize,
}

impl Write {
    /// Where the write goes, its parameters and its patch, for object `name`.
    fn of(&self, name: &str, uid: &str, rv: &str) -> (To, PatchParams, Patch<serde_json::Value>) {
        let manager = tdset_operator::workload::owned::FIELD_MANAGER;
        let apply = PatchParams::apply(manager).force();
        let merge = PatchParams {
            field_manager: Some(manager.into()),
            ..Default::default()
        };
        let whole = |status: serde_json::Value, group: &str| {
            Patch::Apply(json!({"apiVersion": format!("{group}/v1"), "kind": "TDSet",
                   "metadata": {"name": name, "uid": uid}, "status": status}))
        };
        let guarded = |status: serde_json::Value| {
            Patch::Merge(json!({"metadata": {"uid": uid, "resourceVersion": rv}, "status": status}))
        };
        let count_only = Patch::Merge(json!({"status": {"desiredReplicas": self.count}}));
        match self.kind {
            0 => (To::Tdset, apply, whole(self.new.clone(), "schedule.rs")),
            1 => (To::Tdset, merge, guarded(self.new.clone())),
            2 => (To::Tdset, merge, guarded(self.diff.clone())),
            3 => (To::Tdset, apply, whole(status_at(0), "schedule.rs")),
            4 => (
                To::TdsetAdmin,
                apply,
                whole(self.new.clone(), "schedule.rs"),
            ),
            5 => (
                To::NoCel,
                apply,
                whole(self.new.clone(), "nocel.schedule.rs"),
            ),
            6 => (
                To::Tdset,
                merge,
                guarded(json!({"desiredReplicas": self.count})),
            ),
            7 => (To::Floor, merge, count_only),
            8 => (
                To::Deployment,
                PatchParams::default(),
                Patch::Merge(json!({"spec": {"replicas": self.count}})),
            ),
            9 => (To::Schemaless, merge, count_only),
            10 => (To::UntypedStatus, merge, count_only),
            _ => (To::TdsetAdmin, merge, count_only),
        }
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
        /// Every CEL rule taken out.
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
        let (nocel, nocel_admin) = self
            .copy_of_crd(&ns.name, n, k, "nocel.schedule.rs", strip)
            .await;
        // No schema at all: what validating the TDSet costs, against storing the same object.
        let (schemaless, _) = self
            .copy_of_crd(&ns.name, n, k, "schemaless.schedule.rs", |schema| {
                *schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            })
            .await;
        // The status's schema alone taken out (the spec's and its CEL rules kept).
        let (untyped_status, _) = self
            .copy_of_crd(&ns.name, n, k, "untypedstatus.schedule.rs", |schema| {
                schema["properties"]["status"] =
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            })
            .await;
        // The floors: the least custom resource there can be, and the Deployments the boundary
        // benchmarks' direct patches write.
        let floor = self.minimal_resources(&ns.name, n).await;
        let deploys: Api<Deployment> = Api::namespaced(self.client.clone(), &ns.name);
        create_all(&deploys, app_deployments("s", n, 1)).await;
        let sa_deploys: Api<Deployment> = Api::namespaced(self.sa_client.clone(), &ns.name);
        let kinds = [
            "server-side apply of the whole status (before)",
            "JSON merge patch of the whole status, uid + resourceVersion guard",
            "JSON merge patch of what changed, uid + resourceVersion guard",
            "server-side apply of the whole status, one history entry",
            "server-side apply of the whole status, as the admin (no RBAC check, exempt from priority and fairness)",
            "server-side apply of the whole status, as the admin, to a copy of the CRD without CEL rules",
            "JSON merge patch of desiredReplicas alone, uid + resourceVersion guard (the least the operator's identity can send)",
            "floor of a custom resource: JSON merge patch of the one-field status of a CRD with a one-field spec, no CEL, as the admin",
            "floor of the direct patches: JSON merge patch of a Deployment's spec.replicas, as the ServiceAccount, as the boundary benchmarks send it",
            "JSON merge patch of desiredReplicas alone, as the admin, to a copy of the CRD with no schema (x-kubernetes-preserve-unknown-fields; the same object)",
            "JSON merge patch of desiredReplicas alone, as the admin, to a copy of the CRD whose status has no schema (the spec's and the CEL rules kept)",
            "JSON merge patch of desiredReplicas alone, as the admin, to the TDSet (the same write as the floor's and the copies')",
        ];
        let forward: Vec<usize> = (0..kinds.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        for (round, order) in [forward, backward].iter().enumerate() {
            for &kind in order {
                // Where each object stands, as a cache would know it; every TDSet holds the
                // same status, so the diff is taken from the first one's.
                let mut rvs = HashMap::new();
                let mut stored_status = serde_json::Value::Null;
                for t in api.list(&ListParams::default()).await.unwrap() {
                    if t.name_any() == "s0" {
                        stored_status = serde_json::to_value(&t.status).unwrap();
                    }
                    rvs.insert(t.name_any(), t.resource_version().unwrap());
                }
                let new = status_at(k + 1);
                // Never a count any earlier write of any kind left: each write changes the object.
                let count = 100 + k;
                k += 1;
                let write = Write {
                    kind,
                    new: new.clone(),
                    diff: merge_diff(&stored_status, &new),
                    count,
                };
                let bytes = match write.of("s0", &uids["s0"], &rvs["s0"]).2 {
                    Patch::Apply(body) | Patch::Merge(body) => {
                        serde_json::to_vec(&body).unwrap().len()
                    }
                    _ => 0,
                };
                let stored = match kind {
                    3 => {
                        let small = status_at(0);
                        format!(
                            "the status itself {} bytes, {} history entries",
                            serde_json::to_vec(&small).unwrap().len(),
                            small["history"].as_array().map_or(0, Vec::len),
                        )
                    }
                    7 => "the status itself one field".to_string(),
                    8 => "a Deployment as Helm creates it".to_string(),
                    _ => format!("the status itself {size} bytes, {MAX_HISTORY} history entries"),
                };
                tokio::time::sleep(Duration::from_secs(2)).await;
                let cpu0 = control_plane_cpu(&self.logs);
                let t0 = Instant::now();
                let done: Vec<f64> = stream::iter(0..n)
                    .map(|i| {
                        let name = format!("s{i}");
                        let uid = match kind {
                            5 => nocel_admin.get(&name).cloned().unwrap_or_default(),
                            _ => uids[&name].clone(),
                        };
                        let (to, pp, patch) = write.of(&name, &uid, &rvs[&name]);
                        let (sa, admin, nocel) = (sa.clone(), api.clone(), nocel.clone());
                        let (floor, sa_deploys) = (floor.clone(), sa_deploys.clone());
                        let (schemaless, untyped_status) =
                            (schemaless.clone(), untyped_status.clone());
                        async move {
                            match to {
                                To::Tdset => sa.patch_status(&name, &pp, &patch).await.map(drop),
                                To::TdsetAdmin => {
                                    admin.patch_status(&name, &pp, &patch).await.map(drop)
                                }
                                To::NoCel => nocel.patch_status(&name, &pp, &patch).await.map(drop),
                                To::Schemaless => {
                                    schemaless.patch_status(&name, &pp, &patch).await.map(drop)
                                }
                                To::UntypedStatus => untyped_status
                                    .patch_status(&name, &pp, &patch)
                                    .await
                                    .map(drop),
                                To::Floor => floor.patch_status(&name, &pp, &patch).await.map(drop),
                                To::Deployment => {
                                    sa_deploys.patch(&name, &pp, &patch).await.map(drop)
                                }
                            }
                            .unwrap();
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
                    "| status write by kind, round {} | N = {n} | {}: {n} writes in {wall:.2} s (done p50 {p50:.2} s, p99 {p99:.2} s) | kube-apiserver + etcd {cpu:.2} CPU-s ({:.2} ms each); body {bytes} bytes; {stored} |",
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

    /// The TDSet CRD copied under `group` and changed by `edit` (its `openAPIV3Schema`), and
    /// `n` of its TDSets in `ns` at status `k`: what a part of the schema costs a status write.
    /// Returns an admin's API for them and their uids.
    async fn copy_of_crd(
        &self,
        ns: &str,
        n: usize,
        k: usize,
        group: &str,
        edit: impl Fn(&mut serde_json::Value),
    ) -> (Api<kube::api::DynamicObject>, HashMap<String, String>) {
        let text = std::fs::read_to_string(repo_root().join("crds/tdset.yaml")).unwrap();
        let mut crd: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        edit(&mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
        crd["metadata"] = json!({"name": format!("tdsets.{group}")});
        crd["spec"]["group"] = json!(group);
        let api = self.install_crd(ns, crd).await;
        let objs: Vec<kube::api::DynamicObject> = (0..n)
            .map(|i| {
                let mut t = serde_json::to_value(bench_tdset(
                    Form::Owned,
                    &format!("s{i}"),
                    json!([{"startTime": 9, "endTime": 17, "replica": 3}]),
                    1,
                ))
                .unwrap();
                t["apiVersion"] = json!(format!("{group}/v1"));
                serde_json::from_value(t).unwrap()
            })
            .collect();
        create_all(&api, objs).await;
        let mut uids = HashMap::new();
        for t in api.list(&ListParams::default()).await.unwrap() {
            let (name, uid) = (t.name_any(), t.uid().unwrap());
            let body = json!({"apiVersion": format!("{group}/v1"), "kind": "TDSet",
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

    /// A CRD with a one-field spec and a one-field status and no CEL rule, and `n` of its
    /// objects in `ns`: the least a custom resource's status write can cost.
    async fn minimal_resources(&self, ns: &str, n: usize) -> Api<kube::api::DynamicObject> {
        let int = json!({"type": "object", "properties": {"replicas": {"type": "integer"}}});
        let status =
            json!({"type": "object", "properties": {"desiredReplicas": {"type": "integer"}}});
        let api = self
            .install_crd(
                ns,
                json!({
                    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "floors.floor.schedule.rs"},
                    "spec": {"group": "floor.schedule.rs", "scope": "Namespaced",
                        "names": {"plural": "floors", "singular": "floor", "kind": "Floor"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                            "subresources": {"status": {}},
                            "schema": {"openAPIV3Schema": {"type": "object",
                                "properties": {"spec": int, "status": status}}}}]}
                }),
            )
            .await;
        let objs = (0..n)
            .map(|i| {
                serde_json::from_value(
                    json!({"apiVersion": "floor.schedule.rs/v1", "kind": "Floor",
                    "metadata": {"name": format!("s{i}")}, "spec": {"replicas": 1}}),
                )
                .unwrap()
            })
            .collect();
        create_all(&api, objs).await;
        api
    }

    /// Applies `crd` (one version, `v1`), gives the API server a moment to serve it, and
    /// returns an admin's API for its objects in `ns`.
    async fn install_crd(&self, ns: &str, crd: serde_json::Value) -> Api<kube::api::DynamicObject> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .patch(
                &crd.name_any(),
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let ar = kube::api::ApiResource {
            group: crd.spec.group.clone(),
            version: "v1".into(),
            api_version: format!("{}/v1", crd.spec.group),
            kind: crd.spec.names.kind.clone(),
            plural: crd.spec.names.plural.clone(),
        };
        Api::namespaced_with(self.client.clone(), ns, &ar)
    }
}
