//! A KEDA ScaledObject, as the target and through a group: what one reconcile sends.

use super::*;

const SCALED_OBJECTS: &str = "/apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects";

/// KEDA is installed: `keda.sh` among the API groups, ScaledObjects served (a group looks).
fn keda_served(server: &ApiServer) {
    server.first("GET", "/apis", api_groups(&[("keda.sh", "v1alpha1")]));
    server.returns("GET", "/apis/keda.sh/v1alpha1", keda_v1alpha1());
}

/// What discovery reads of `keda.sh/v1alpha1`: ScaledObjects, with no `/scale`.
fn keda_v1alpha1() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "keda.sh/v1alpha1",
        "resources": [
            {"name": "scaledobjects", "singularName": "scaledobject", "namespaced": true,
             "kind": "ScaledObject", "verbs": ["get", "list", "watch", "patch"]},
            {"name": "scaledobjects/status", "singularName": "", "namespaced": true,
             "kind": "ScaledObject", "verbs": ["get", "patch"]},
        ],
    })
}

/// ScaledObject `web` over Deployment `web` (floor 2, ceiling 10), with `annotations` (the
/// operator's, in its managedFields, or someone else's) and KEDA's Paused condition `paused`.
fn scaled_object(annotations: Value, paused: &str) -> Value {
    let keys: serde_json::Map<String, Value> = (annotations.as_object().into_iter().flatten())
        .map(|(k, _)| (format!("f:{k}"), json!({})))
        .collect();
    let ours = annotations.get("autoscaling.keda.sh/paused-replicas") == Some(&json!("0"));
    let manager = if ours {
        "tdset-operator"
    } else {
        "kubectl-annotate"
    };
    json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-so", "resourceVersion": "30",
                     "annotations": annotations,
                     "managedFields": [{"manager": manager, "operation": "Update",
                                        "fieldsV1": {"f:metadata": {"f:annotations": keys}}}]},
        "spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": 2, "maxReplicaCount": 10,
                 "triggers": []},
        "status": {"hpaName": "keda-hpa-web",
                   "conditions": [{"type": "Paused", "status": paused}]},
    })
}

/// TDSet `t` over ScaledObject `web` at `default` all day (with `status`, as the cache holds
/// it), the API server answering the form's reads (the ScaledObject `so`, none if null; the
/// workload at `replicas`) and the TDSet's writes.
fn over_scaled_object(
    default: i32,
    so: Value,
    replicas: i32,
    status: Value,
) -> (ApiServer, Operator, TDSet) {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "web"},
        "defaultReplica": default,
    }));
    t.metadata.finalizers = Some(vec!["schedule.rs/restore-target".into()]);
    if !status.is_null() {
        t.status = Some(serde_json::from_value(status).unwrap());
    }
    server.returns("GET", "/apis/keda.sh/v1alpha1", keda_v1alpha1());
    if so.is_null() {
        server.on("GET", &format!("{SCALED_OBJECTS}/web"), |_| {
            super::status(404, "NotFound", "scaledobjects.keda.sh \"web\" not found")
        });
    } else {
        server.returns("GET", &format!("{SCALED_OBJECTS}/web"), so.clone());
    }
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(replicas));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "21"));
    server.on("PATCH", &format!("{SCALED_OBJECTS}/web"), move |body| {
        // The object as the API server merges the patch into it.
        let mut merged = so.clone();
        json_patch::merge(&mut merged, body);
        merged["metadata"]["resourceVersion"] = json!("31");
        (200, merged)
    });
    let operator = Operator::at(&server, NOW);
    (server, operator, t)
}

#[tokio::test(start_paused = true)]
async fn a_scaled_object_put_to_sleep_has_the_user_s_pause_made_durable_before_the_pause() {
    let so = scaled_object(json!({"autoscaling.keda.sh/paused-replicas": "1"}), "True");
    let (server, mut operator, t) = over_scaled_object(0, so, 1, Value::Null);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "GET /apis/keda.sh/v1alpha1",
            "GET /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            // No record in the cache: the TDSet is read live before one is taken.
            "GET /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            // The workload KEDA scales, for the check.
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            // The user's own pause, durable before the schedule's replaces it.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
            "PATCH /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    let durable = &sent[5].body["status"]["target"];
    assert_eq!(durable["originalPause"], json!({"pausedReplicas": "1"}));
    assert_eq!(durable["originalReplicas"], 2);
    assert_eq!(durable["uid"], "uid-so");
    // The workload it puts to sleep, to be woken whatever becomes of the ScaledObject.
    assert_eq!(
        durable["asleep"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"})
    );
    // Refused if the ScaledObject changed since the pause above was recorded from it.
    assert_eq!(
        sent[6].body,
        json!({"metadata": {"uid": "uid-so", "resourceVersion": "30", "annotations": {
            "autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"}}})
    );
    assert_eq!(server.events(), vec!["ScaledDown".to_string()]);
}

/// The ScaledObject answers its reads with `first`, then `then` (revision 33).
fn read_twice(server: &ApiServer, first: Value, mut then: Value) {
    then["metadata"]["resourceVersion"] = json!("33");
    let reads = std::sync::atomic::AtomicUsize::new(0);
    server.first_on(
        "GET",
        &format!("{SCALED_OBJECTS}/web"),
        move |_| match reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => (200, first.clone()),
            _ => (200, then.clone()),
        },
    );
}

/// Someone annotated the ScaledObject between the operator's read and its pause (a 409 for
/// the revision the pause was decided from; read again, its annotations differ): the write is
/// not forced, the reconcile fails and reads it again.
#[tokio::test(start_paused = true)]
async fn a_scaled_object_changed_since_it_was_read_is_not_paused_over() {
    let so = scaled_object(json!({"autoscaling.keda.sh/paused-replicas": "1"}), "True");
    let (server, mut operator, t) = over_scaled_object(0, so.clone(), 1, Value::Null);
    let annotated = scaled_object(json!({"autoscaling.keda.sh/paused-replicas": "4"}), "True");
    read_twice(&server, so, annotated);
    server.first_on("PATCH", &format!("{SCALED_OBJECTS}/web"), |_| {
        status(
            409,
            "Conflict",
            "the object has been modified; please apply your changes",
        )
    });

    let result = operator.reconcile(&t).await;

    assert!(result.is_err(), "{result:?}");
    let sent = server.sent();
    let pauses: Vec<_> = (sent.iter())
        .filter(|s| s.method == "PATCH" && s.path.starts_with(SCALED_OBJECTS))
        .collect();
    assert_eq!(pauses.len(), 1, "not sent again: {:?}", server.requests());
    assert_eq!(pauses[0].body["metadata"]["resourceVersion"], "30");
    // Nothing said done: the failed reconcile is said, not a scale-down.
    assert_eq!(server.events(), vec!["ReconcileError".to_string()]);
}

/// KEDA wrote the ScaledObject's status between the operator's read and its pause (every
/// polling interval it does): a 409 all the same, but read again its annotations, counts and
/// uid are as they were, so the pause is sent again at the new revision, and the reconcile
/// does not fail for it.
#[tokio::test(start_paused = true)]
async fn a_pause_refused_only_for_keda_s_status_write_is_sent_again_at_the_new_revision() {
    let so = scaled_object(json!({"autoscaling.keda.sh/paused-replicas": "1"}), "True");
    let (server, mut operator, t) = over_scaled_object(0, so.clone(), 1, Value::Null);
    let mut polled = so.clone();
    polled["status"]["lastActiveTime"] = json!("2026-11-26T09:59:30Z");
    read_twice(&server, so, polled);
    let refused = std::sync::atomic::AtomicBool::new(false);
    server.first_on("PATCH", &format!("{SCALED_OBJECTS}/web"), move |body| {
        if !refused.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return status(409, "Conflict", "the object has been modified");
        }
        let mut merged = scaled_object(json!({}), "True");
        json_patch::merge(&mut merged, body);
        merged["metadata"]["resourceVersion"] = json!("34");
        (200, merged)
    });

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    let pauses: Vec<_> = (sent.iter())
        .filter(|s| s.method == "PATCH" && s.path.starts_with(SCALED_OBJECTS))
        .collect();
    assert_eq!(pauses.len(), 2, "{:?}", server.requests());
    assert_eq!(pauses[0].body["metadata"]["resourceVersion"], "30");
    assert_eq!(pauses[1].body["metadata"]["resourceVersion"], "33");
    assert_eq!(
        pauses[1].body["metadata"]["annotations"],
        pauses[0].body["metadata"]["annotations"]
    );
    assert!(
        !server.events().iter().any(|e| e == "ReconcileError"),
        "{:?}",
        server.events()
    );
}

/// The record as a night left it: the user's own pause at 1, their floor 2, Deployment `web`
/// asleep through it.
fn night_record() -> Value {
    json!({"target": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "web",
                      "uid": "uid-so", "field": "spec.minReplicaCount", "originalReplicas": 2,
                      "originalPause": {"pausedReplicas": "1"},
                      "asleep": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "uid-web"}}})
}

/// The ScaledObject deleted while it held its workload at 0 (KEDA's finalizer leaves the
/// workload as it is): the workload is woken to the ScaledObject's own floor, guarded by the
/// revision it was read at 0, and nothing is left asleep on record.
#[tokio::test(start_paused = true)]
async fn a_scaled_object_deleted_while_it_sleeps_has_its_workload_woken() {
    let (server, mut operator, t) = over_scaled_object(0, Value::Null, 0, night_record());
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), echo("11"));

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    let wake = web_scale_write(&sent, "a wake write");
    assert_eq!(wake.body["spec"]["replicas"], 2);
    assert_eq!(wake.body["metadata"]["resourceVersion"], "10");
    let last = &sent.last().unwrap().body["status"];
    assert_eq!(last["target"].get("asleep"), None, "{last}");
    // Woken, and the ScaledObject's absence said.
    assert_eq!(
        server.events(),
        vec!["Restored".to_string(), "TargetNotFound".to_string()]
    );
}

/// TDSet `t`, being deleted, over ScaledObject `web` paused at 0 by the schedule (none of the
/// user's on record, `{}`, as a night records it), Deployment `web` asleep through it.
fn deleted_asleep_through_keda() -> (ApiServer, Operator, TDSet) {
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    let record = json!({"target": {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "web", "uid": "uid-so",
        "field": "spec.minReplicaCount", "originalReplicas": 2, "originalPause": {},
        "asleep": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"}}});
    let (server, operator, mut t) = over_scaled_object(0, scaled_object(night, "True"), 0, record);
    t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-26T09:59:00Z".parse().unwrap(),
    ));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "22"));
    (server, operator, t)
}

/// A TDSet deleted while its ScaledObject sleeps by the schedule (no pause of the user's): the
/// pause comes off, and the TDSet is kept (its finalizer) until KEDA runs the workload again.
/// KEDA still saying Paused past the grace gets the unpause its documentation allows, once;
/// once KEDA has resumed, made its HPA and scaled the workload off 0, the finalizer goes.
#[tokio::test(start_paused = true)]
async fn a_tdset_deleted_while_its_scaled_object_sleeps_is_kept_until_keda_runs_it_again() {
    let (server, mut operator, t) = deleted_asleep_through_keda();
    let so = format!("{SCALED_OBJECTS}/web");

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "GET /apis/keda.sh/v1alpha1",
            "GET /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            // The schedule's pause off...
            "PATCH /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            // ...and the workload read: KEDA still says Paused. The finalizer stays.
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
        ])
    );
    assert_eq!(
        server.sent()[2].body["metadata"]["annotations"],
        json!({"autoscaling.keda.sh/paused-replicas": null, "autoscaling.keda.sh/paused": null})
    );

    // Within the grace KEDA is only waited for; past it, still Paused: `paused: "false"`,
    // once.
    server.first("GET", &so, scaled_object(json!({}), "True"));
    let mut unpaused = scaled_object(json!({"autoscaling.keda.sh/paused": "false"}), "True");
    unpaused["metadata"]["managedFields"][0]["manager"] = json!("tdset-operator");
    for (after, writes) in [(10, 0), (25, 1), (10, 0)] {
        server.clear();
        tokio::time::advance(Duration::from_secs(after)).await;
        operator.reconcile(&t).await.unwrap();
        let sent = server.sent();
        let patches: Vec<_> = sent.iter().filter(|s| s.method == "PATCH").collect();
        assert_eq!(patches.len(), writes, "{:?}", server.requests());
        if let Some(unpause) = patches.first() {
            assert_eq!(unpause.path, so);
            assert_eq!(
                unpause.body["metadata"]["annotations"],
                json!({"autoscaling.keda.sh/paused-replicas": null,
                       "autoscaling.keda.sh/paused": "false"})
            );
            server.first("GET", &so, unpaused.clone());
        }
    }

    // KEDA resumed: not Paused, its HPA there, the workload scaled up to its floor.
    let mut resumed = unpaused;
    resumed["status"]["conditions"][0]["status"] = json!("False");
    server.first("GET", &so, resumed);
    server.first("GET", &format!("{DEPLOYMENTS}/web"), web(2));
    operator.hpas(vec![json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "keda-hpa-web", "namespace": "ns", "uid": "uid-hpa"},
        "spec": {"minReplicas": 2, "maxReplicas": 10,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
    })]);
    server.clear();
    tokio::time::advance(Duration::from_secs(3)).await;
    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    assert_eq!(
        requests.last().map(String::as_str),
        Some("PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t"),
        "{requests:?}"
    );
    let sent = server.sent();
    // The unpause of the operator's taken off first, now that KEDA runs it (as by day).
    assert_eq!(
        sent.iter()
            .find(|s| s.method == "PATCH" && s.path == so)
            .map(|s| s.body["metadata"]["annotations"].clone()),
        Some(json!({"autoscaling.keda.sh/paused-replicas": null,
                    "autoscaling.keda.sh/paused": null}))
    );
    assert_eq!(
        sent.last().unwrap().body["metadata"]["finalizers"],
        json!([])
    );
    assert!(
        server.events().iter().all(|e| e != "KedaNotResumed"),
        "{:?}",
        server.events()
    );
}

/// The same with KEDA never answering (its operator down): past twice the grace the TDSet
/// goes all the same, the workload it put to sleep woken to the ScaledObject's floor by the
/// operator, and a Warning says what KEDA did not do.
#[tokio::test(start_paused = true)]
async fn a_tdset_deleted_while_keda_is_down_wakes_its_workload_itself_and_goes() {
    let (server, mut operator, t) = deleted_asleep_through_keda();
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), echo("11"));
    let sent = given_up_on_keda(&server, &mut operator, &t).await;
    let wake = web_scale_write(&sent, "the workload woken by the operator");
    assert_eq!(wake.body["spec"]["replicas"], 2);
}

/// The same with the wake refused (a webhook down, a conflict): the TDSet goes all the same at
/// the bound, saying so; the bound is not started again.
#[tokio::test(start_paused = true)]
async fn a_tdset_deleted_while_keda_is_down_goes_at_the_bound_though_its_wake_fails() {
    let (server, mut operator, t) = deleted_asleep_through_keda();
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        status(500, "InternalError", "failed calling webhook")
    });
    given_up_on_keda(&server, &mut operator, &t).await;
}

/// KEDA never answers a TDSet deleted over its sleeping ScaledObject: kept for twice the
/// grace, with the pause off and `paused: "false"` written once (not each look), then the
/// finalizer goes with a Warning. What the last reconcile sent.
async fn given_up_on_keda(server: &ApiServer, operator: &mut Operator, t: &TDSet) -> Vec<Sent> {
    let so = format!("{SCALED_OBJECTS}/web");
    operator.reconcile(t).await.unwrap();
    server.first("GET", &so, scaled_object(json!({}), "True"));
    let mut unpaused = scaled_object(json!({"autoscaling.keda.sh/paused": "false"}), "True");
    unpaused["metadata"]["managedFields"][0]["manager"] = json!("tdset-operator");
    for (after, writes) in [(20, 0), (15, 1), (10, 0), (10, 0)] {
        server.clear();
        tokio::time::advance(Duration::from_secs(after)).await;
        operator.reconcile(t).await.unwrap();
        let requests = server.requests();
        assert!(
            !requests.iter().any(|r| r.ends_with("/tdsets/t")),
            "kept within twice the grace: {requests:?}"
        );
        let patches = requests.iter().filter(|r| r.starts_with("PATCH")).count();
        assert_eq!(patches, writes, "{requests:?}");
        if writes > 0 {
            server.first("GET", &so, unpaused.clone());
        }
    }
    server.clear();
    tokio::time::advance(Duration::from_secs(10)).await;

    operator.reconcile(t).await.unwrap();

    let sent = server.sent();
    assert_eq!(
        sent.last().unwrap().body["metadata"]["finalizers"],
        json!([])
    );
    assert_eq!(server.events(), vec!["KedaNotResumed".to_string()]);
    sent
}

/// A let-go's wait ends with it: a TDSet that schedules its ScaledObject again (a retarget
/// undone) and is deleted later starts the bound afresh, not from the first wait.
#[tokio::test(start_paused = true)]
async fn a_let_go_undone_leaves_no_wait_behind_for_the_next() {
    let (server, mut operator, t) = deleted_asleep_through_keda();
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), echo("11"));
    operator.reconcile(&t).await.unwrap();
    // Scheduled again: the same TDSet, not being deleted.
    let mut live = t.clone();
    live.metadata.deletion_timestamp = None;
    tokio::time::advance(Duration::from_secs(1)).await;
    operator.reconcile(&live).await.unwrap();
    tokio::time::advance(Duration::from_secs(600)).await;
    server.first(
        "GET",
        &format!("{SCALED_OBJECTS}/web"),
        scaled_object(
            json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"}),
            "True",
        ),
    );
    server.clear();

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.ends_with("/tdsets/t") || r.ends_with("/scale")),
        "waited for KEDA afresh, not given up at once: {requests:?}"
    );
    assert!(server.events().iter().all(|e| e != "KedaNotResumed"));
}

/// The same while the TDSet is suspended: nothing is written to the workload (as `suspend`
/// says); the record of it stays, so it is woken once the TDSet is resumed.
#[tokio::test(start_paused = true)]
async fn a_scaled_object_deleted_while_it_sleeps_and_suspended_leaves_the_wake_for_later() {
    let (server, mut operator, mut t) = over_scaled_object(0, Value::Null, 0, night_record());
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), echo("11"));
    t.spec.suspend = Some(true);

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    assert!(
        !requests.iter().any(|r| r.ends_with("/scale")),
        "nothing written while suspended: {requests:?}"
    );
    let sent = server.sent();
    let last = &sent.last().unwrap().body["status"];
    assert_eq!(
        last["target"]["asleep"]["name"], "web",
        "still on record: {last}"
    );

    // Resumed: woken.
    t.spec.suspend = None;
    server.clear();
    operator.reconcile(&t).await.unwrap();
    let sent = server.sent();
    let wake = web_scale_write(&sent, "a wake write once resumed");
    assert_eq!(wake.body["spec"]["replicas"], 2);
}

#[tokio::test(start_paused = true)]
async fn the_morning_gives_the_user_s_pause_back_as_theirs_then_sets_the_floor() {
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    let (server, mut operator, t) =
        over_scaled_object(3, scaled_object(night, "True"), 0, night_record());

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "GET /apis/keda.sh/v1alpha1",
            "GET /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            // The record is durable already: nothing to write before. The user's pause, under
            // a field manager that is not the operator's (it is the user's again)...
            "PATCH /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            // ...then the floor, the operator's.
            "PATCH /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
            // The pause given back is no longer on record.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    assert_eq!(
        sent[4].body,
        json!({"metadata": {"uid": "uid-so", "resourceVersion": "30", "annotations": {
                  "autoscaling.keda.sh/paused-replicas": "1", "autoscaling.keda.sh/paused": null}}})
    );
    assert!(
        sent[4]
            .query
            .contains("fieldManager=tdset-operator-give-back"),
        "{}",
        sent[4].query
    );
    assert_eq!(
        sent[5].body,
        json!({"metadata": {"uid": "uid-so"}, "spec": {"minReplicaCount": 3}})
    );
    assert!(
        sent[5].query.contains("fieldManager=tdset-operator"),
        "{}",
        sent[5].query
    );
    let target = &sent[6].body["status"]["target"];
    assert_eq!(target.get("originalPause"), None);
    assert_eq!(target.get("asleep"), None, "KEDA runs it again");
    assert_eq!(target["originalReplicas"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_workload_that_drifted_while_paused_is_put_right_through_the_scaled_object() {
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    let (server, mut operator, t) =
        over_scaled_object(0, scaled_object(night, "True"), 3, night_record());

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    let patches: Vec<_> = server
        .sent()
        .into_iter()
        .filter(|s| s.method == "PATCH" && s.path.starts_with(SCALED_OBJECTS))
        .collect();
    assert_eq!(patches.len(), 1, "{requests:?}");
    // The pause spelled the other way: the same to KEDA, a change it reconciles on.
    assert_eq!(
        patches[0].body["metadata"]["annotations"],
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "True"})
    );
    assert_eq!(patches[0].body["metadata"]["resourceVersion"], "30");
    assert!(
        !requests.iter().any(|r| r.ends_with("/scale")),
        "never through /scale: {requests:?}"
    );
    assert_eq!(server.events(), vec!["DriftCorrected".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_scaled_object_asleep_and_taken_is_not_written() {
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    let (server, mut operator, t) =
        over_scaled_object(0, scaled_object(night, "True"), 0, night_record());

    operator.reconcile(&t).await.unwrap();

    let writes: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET") && !r.contains("/tdsets/"))
        .collect();
    assert_eq!(writes, Vec::<String>::new());
}

/// The patches sent to anything but the TDSet.
fn object_writes(server: &ApiServer) -> Vec<Sent> {
    (server.sent().into_iter())
        .filter(|s| s.method == "PATCH" && !s.path.contains("/tdsets/"))
        .collect()
}

/// A group over `env: dev` at 0 all day, where KEDA is installed: Deployment `web` (2
/// replicas, carrying `annotations`) and ScaledObject `web` over it, as the API server lists
/// them. What the group holds is listed empty, so each reconcile reads the object as given.
fn group_over_keda(annotations: Value) -> (ApiServer, Operator, TDSet) {
    let server = ApiServer::start();
    let t = tdset(json!({
        "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
        "defaultReplica": 0,
    }));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    keda_served(&server);
    let mut web = dev("web", 2, "11");
    web["metadata"]["annotations"] = annotations;
    server.lists(DEPLOYMENTS, "held-by-uid=uid-t", list("Deployment", vec![]));
    server.lists(
        DEPLOYMENTS,
        "held-by-uid!=uid-t",
        list("Deployment", vec![]),
    );
    server.lists(DEPLOYMENTS, "env=dev", list("Deployment", vec![web]));
    no_other_workloads(&server);
    server.lists(
        SCALED_OBJECTS,
        "held-by-uid=uid-t",
        list("ScaledObject", vec![]),
    );
    let so = scaled_object(json!({}), "False");
    server.lists(SCALED_OBJECTS, "", list("ScaledObject", vec![so]));
    server.on("PATCH", &format!("{DEPLOYMENTS}/web"), echo("12"));
    server.on("PATCH", &format!("{SCALED_OBJECTS}/web"), echo("31"));
    // Read back once held: paused by the operator, not yet by KEDA.
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    server.returns(
        "GET",
        &format!("{SCALED_OBJECTS}/web"),
        scaled_object(night, "False"),
    );
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), dev("web", 2, "12"));
    let operator = Operator::at(&server, NOW);
    (server, operator, t)
}

/// The night of a workload KEDA scales, in a group: its count is never written. First the
/// record on the workload (what to wake it to should its ScaledObject go), alone; the pause on
/// the ScaledObject only once that record is there, with the ScaledObject's own record in the
/// same apply, guarded by its uid and revision.
#[tokio::test(start_paused = true)]
async fn a_group_records_a_keda_workload_s_sleep_on_it_before_it_pauses_its_scaled_object() {
    let (server, mut operator, t) = group_over_keda(json!({}));

    operator.reconcile(&t).await.unwrap();

    let writes = object_writes(&server);
    assert_eq!(writes.len(), 1, "{:?}", server.requests());
    let record = &writes[0];
    assert_eq!(record.path, format!("{DEPLOYMENTS}/web"));
    // Its count as read, unchanged, guarded by the revision it was read at (an apply that left
    // it out would reset it where the operator's earlier applies own it).
    assert_eq!(record.body["spec"], json!({"replicas": 2}));
    assert_eq!(
        record.body["metadata"]["annotations"],
        json!({"schedule.rs/held-by": "t", "schedule.rs/own-replicas": "2",
               "schedule.rs/scheduled-replicas": "0"})
    );
    assert_eq!(record.body["metadata"]["resourceVersion"], "11");

    let (server, mut operator, t) = group_over_keda(json!({
        "schedule.rs/held-by": "t", "schedule.rs/own-replicas": "2",
        "schedule.rs/scheduled-replicas": "0",
    }));

    operator.reconcile(&t).await.unwrap();

    let writes = object_writes(&server);
    assert_eq!(writes.len(), 1, "{:?}", server.requests());
    let pause = &writes[0];
    assert_eq!(pause.path, format!("{SCALED_OBJECTS}/web"));
    assert!(pause.query.contains("force=true"), "{}", pause.query);
    assert_eq!(
        pause.body["metadata"]["annotations"],
        json!({"schedule.rs/held-by": "t", "schedule.rs/own-min-replicas": "2",
               "schedule.rs/scheduled-min-replicas": "2,paused",
               "autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"})
    );
    assert_eq!(
        pause.body["metadata"]["labels"]["schedule.rs/held-by-uid"],
        "uid-t"
    );
    assert_eq!(
        (
            &pause.body["metadata"]["uid"],
            &pause.body["metadata"]["resourceVersion"]
        ),
        (&json!("uid-so"), &json!("30"))
    );
    assert_eq!(pause.body["spec"], json!({"minReplicaCount": 2}));
    // Then read back (nothing watches ScaledObjects), with its workload: KEDA is given its
    // grace from this write, so nothing is said yet.
    let requests = server.requests();
    let read_back = [
        "GET /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web",
        "GET /apis/apps/v1/namespaces/ns/deployments/web",
    ];
    for r in read_back {
        assert!(requests.contains(&r.to_string()), "{requests:?}");
    }
    let last = server.sent().last().unwrap().body["status"].clone();
    let conditions = last["conditions"].as_array().unwrap();
    let degraded = conditions.iter().find(|c| c["type"] == "Degraded").unwrap();
    assert_eq!(degraded["status"], "False", "{degraded}");
}

/// A group at the level `own` after a night its ScaledObject carried (no `defaultReplica`): the
/// ScaledObject's pause and record are gone, the workload is still at 0 with the group's
/// record of the night, and KEDA still says Paused (keda#6982).
fn own_morning_keda_stuck() -> (ApiServer, Operator, TDSet) {
    let server = ApiServer::start();
    let t = tdset(json!({
        "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
    }));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    keda_served(&server);
    let mut web = dev("web", 0, "11");
    web["metadata"]["annotations"] = json!({"schedule.rs/held-by": "t",
        "schedule.rs/own-replicas": "2", "schedule.rs/scheduled-replicas": "0"});
    web["metadata"]["labels"]["schedule.rs/held-by-uid"] = json!("uid-t");
    server.lists(
        DEPLOYMENTS,
        "held-by-uid=uid-t",
        list("Deployment", vec![web.clone()]),
    );
    server.lists(
        DEPLOYMENTS,
        "held-by-uid!=uid-t",
        list("Deployment", vec![]),
    );
    server.lists(DEPLOYMENTS, "env=dev", list("Deployment", vec![web]));
    no_other_workloads(&server);
    let so = scaled_object(json!({}), "True");
    server.lists(SCALED_OBJECTS, "", list("ScaledObject", vec![so.clone()]));
    server.returns("GET", &format!("{SCALED_OBJECTS}/web"), so);
    server.on("PATCH", &format!("{SCALED_OBJECTS}/web"), echo("31"));
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), dev("web", 0, "11"));
    let operator = Operator::at(&server, NOW);
    (server, operator, t)
}

/// Found in review: a ScaledObject given back (the level `own`) left the group's checks at
/// once, so a KEDA that stayed paused was never read back: the workload stayed at 0 all day.
/// It is watched while its workload is asleep on the group's record (which stays until KEDA
/// runs it again), and past KEDA's grace `paused: "false"` is written, as the form does.
#[tokio::test(start_paused = true)]
async fn a_scaled_object_given_back_is_watched_until_keda_runs_its_workload_again() {
    let (server, mut operator, t) = own_morning_keda_stuck();

    operator.reconcile(&t).await.unwrap();

    let read_back = "GET /apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/web".to_string();
    assert!(
        server.requests().contains(&read_back),
        "{:?}",
        server.requests()
    );
    assert!(
        object_writes(&server).is_empty(),
        "the workload's record stays"
    );

    tokio::time::advance(Duration::from_secs(31)).await;
    operator.reconcile(&t).await.unwrap();

    let writes = object_writes(&server);
    assert_eq!(writes.len(), 1, "{:?}", server.requests());
    assert_eq!(writes[0].path, format!("{SCALED_OBJECTS}/web"));
    assert_eq!(
        writes[0].body["metadata"]["annotations"]["autoscaling.keda.sh/paused"],
        "false"
    );
}

/// Found in review: a read-back that fails (here the workload's, a 503) after the group's
/// writes landed failed the whole reconcile, and the status of what was written was lost. It
/// is said for that ScaledObject, and the reconcile goes on.
#[tokio::test(start_paused = true)]
async fn a_failed_read_back_is_said_and_the_group_s_reconcile_goes_on() {
    let (server, mut operator, t) = group_over_keda(json!({
        "schedule.rs/held-by": "t", "schedule.rs/own-replicas": "2",
        "schedule.rs/scheduled-replicas": "0",
    }));
    server.first_on("GET", &format!("{DEPLOYMENTS}/web"), |_| {
        status(503, "ServiceUnavailable", "etcd leader changed")
    });

    operator.reconcile(&t).await.unwrap();

    let pause = object_writes(&server);
    assert_eq!(pause.len(), 1, "the pause landed");
    let last = server.sent().last().unwrap().body["status"].clone();
    let conditions = last["conditions"].as_array().unwrap();
    let degraded = conditions.iter().find(|c| c["type"] == "Degraded").unwrap();
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("reading back ScaledObject web"),
        "{degraded}"
    );
    assert!(
        last["history"].as_array().is_some_and(|h| !h.is_empty()),
        "{last}"
    );
}

/// The reason Degraded gives in the last status this reconcile sent, if it sent one.
fn degraded_reason(server: &ApiServer) -> Option<String> {
    let sent = server.sent();
    let status = &(sent
        .iter()
        .rfind(|r| r.path.ends_with("/tdsets/t/status"))?)
    .body["status"];
    (status["conditions"].as_array()?.iter())
        .find(|c| c["type"] == "Degraded" && c["status"] == "True")
        .and_then(|c| c["reason"].as_str().map(String::from))
}

/// A leader that starts just after the night's pause was written (the one before stopped,
/// KEDA not yet paused): it remembers no write of the pause, and gives KEDA its grace from
/// when it first sees the pause not taken, instead of saying KedaPauseNotApplied at once (an
/// open question of the wake proxy's review).
#[tokio::test(start_paused = true)]
async fn a_pause_written_before_a_restart_is_given_keda_s_grace_by_the_next_leader() {
    let night =
        json!({"autoscaling.keda.sh/paused-replicas": "0", "autoscaling.keda.sh/paused": "true"});
    let (server, mut operator, t) =
        over_scaled_object(0, scaled_object(night, "False"), 2, night_record());

    operator.reconcile(&t).await.unwrap();
    assert_eq!(
        degraded_reason(&server),
        None,
        "KEDA given no grace: {:#?}",
        server.sent()
    );

    // Past the grace, still not paused: said.
    tokio::time::advance(Duration::from_secs(31)).await;
    server.clear();
    operator.reconcile(&t).await.unwrap();
    assert_eq!(
        degraded_reason(&server).as_deref(),
        Some("KedaPauseNotApplied")
    );
}
