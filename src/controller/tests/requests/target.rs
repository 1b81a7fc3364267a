//! `scaleTargetRef` to a workload or an HPA: what one reconcile sends.

use super::*;

/// TDSet `t` whose default count (`default`) is the floor of HPA `web` (its own floor `min`,
/// scaling Deployment `web` at `min`), and the API server answering the reads and the
/// TDSet's writes of that form.
fn hpa_floor(default: i32, min: i32) -> (ApiServer, Operator, TDSet) {
    let server = ApiServer::start();
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-hpa", "resourceVersion": "20"},
        "spec": {"minReplicas": min, "maxReplicas": 10,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {"currentReplicas": min, "desiredReplicas": min},
    });
    let t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"},
        "defaultReplica": default,
    }));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.returns("GET", &format!("{HPAS}/web"), hpa.clone());
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(min));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "21"));
    let mut operator = Operator::at(&server, NOW);
    operator.hpas(vec![hpa]);
    (server, operator, t)
}

#[tokio::test(start_paused = true)]
async fn a_scale_target_taken_over_has_its_original_made_durable_before_the_scale_write() {
    let server = ApiServer::start();
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(5));
    let t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "defaultReplica": 0,
    }));
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "11"));
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(0, "12"))
    });
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            // Discovery: which resource, and whether it has /scale.
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            // No original on record in the cache: the TDSet is read live before one is taken.
            "GET /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            // The original, durable before the write that changes it.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
            "PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale",
            // The status of the reconcile, from the lane.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    let durable = &sent[3].body["status"];
    assert_eq!(durable["target"]["originalReplicas"], 5);
    assert_eq!(durable["target"]["uid"], "uid-web");
    assert_eq!(durable["desiredReplicas"], 0);
    assert_eq!(sent[4].body["spec"]["replicas"], 0);
    assert_eq!(sent[4].body["metadata"]["name"], "web");
    assert_eq!(sent[5].body["status"]["target"]["originalReplicas"], 5);
    assert_eq!(server.events(), vec!["ScaledDown".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn an_hpa_floor_records_the_hpa_s_own_floor_before_raising_it() {
    let (server, mut operator, t) = hpa_floor(3, 1);
    server.on("PATCH", &format!("{HPAS}/web"), echo("22"));

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            // The finalizer first: a deletion must find the floor to give back.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            "GET /apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/web",
            "GET /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            // The HPA's own target, for whether it sleeps.
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
            "PATCH /apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/web",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    assert_eq!(
        sent[0].body["metadata"]["finalizers"],
        json!(["schedule.rs/restore-target"])
    );
    let durable = &sent[5].body["status"]["target"];
    assert_eq!(durable["field"], "spec.minReplicas");
    assert_eq!(durable["originalReplicas"], 1);
    assert_eq!(sent[6].body["spec"]["minReplicas"], 3);
    assert_eq!(sent[6].body["metadata"]["uid"], "uid-hpa");
    assert_eq!(server.events(), vec!["ScaledUp".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_tdset_with_restore_gives_the_original_back_then_lets_go() {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "onDelete": "Restore",
        "defaultReplica": 0,
    }));
    t.metadata.finalizers = Some(vec!["schedule.rs/restore-target".into()]);
    t.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-26T09:59:00Z".parse().unwrap(),
    ));
    t.status = serde_json::from_value(json!({
        "target": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                   "uid": "uid-web", "field": "spec.replicas", "originalReplicas": 5},
        "desiredReplicas": 0,
    }))
    .unwrap();
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(0));
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(5, "13"))
    });
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "14"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            "PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale",
            // Only then is the finalizer taken off.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
        ])
    );
    let sent = server.sent();
    assert_eq!(sent[2].body["spec"]["replicas"], 5);
    assert_eq!(sent[3].body["metadata"]["finalizers"], json!([]));
    assert_eq!(server.events(), vec!["Restored".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_target_that_is_gone_is_reported_and_nothing_is_written() {
    let server = ApiServer::start();
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.on("GET", &format!("{DEPLOYMENTS}/web"), |_| {
        status(404, "NotFound", "deployments.apps \"web\" not found")
    });
    let t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "defaultReplica": 0,
    }));
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "11"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            "GET /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let status = &server.sent()[3].body["status"];
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(degraded["reason"], "TargetNotFound");
    assert_eq!(server.events(), vec!["TargetNotFound".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn an_hpa_floor_of_zero_records_the_workload_it_puts_to_sleep_before_it_does() {
    let (server, mut operator, t) = hpa_floor(0, 2);
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(0, "22"))
    });

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            "GET /apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/web",
            "GET /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            "GET /apis/apps/v1",
            "GET /apis/apps/v1/namespaces/ns/deployments/web",
            // The HPA's floor and the workload about to sleep, durable first.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
            "PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    let durable = &sent[5].body["status"]["target"];
    assert_eq!(durable["originalReplicas"], 2);
    assert_eq!(
        durable["asleep"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"})
    );
    assert_eq!(sent[6].body["spec"]["replicas"], 0);
    assert_eq!(sent[7].body["status"]["target"]["asleep"]["name"], "web");
}

/// The HPA that put `web` to sleep scales `api` now: `web` is woken to the HPA's own floor,
/// by a write guarded by the revision it was read at 0. Someone else's write in between (a
/// 409 here) is never overwritten: the reconcile fails, keeps its record of `web`, and reads
/// again.
#[tokio::test(start_paused = true)]
async fn a_workload_left_asleep_is_woken_only_if_nobody_wrote_it_since_it_was_read() {
    let (server, mut operator, mut t) = hpa_floor(0, 2);
    let retargeted = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-hpa", "resourceVersion": "25"},
        "spec": {"minReplicas": 2, "maxReplicas": 10,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}},
    });
    t.status = serde_json::from_value(json!({
        "desiredReplicas": 0,
        "target": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web",
                   "uid": "uid-hpa", "field": "spec.minReplicas", "originalReplicas": 2,
                   "asleep": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web"}},
    }))
    .unwrap();
    let mut api = web(2);
    api["metadata"]["name"] = json!("api");
    api["metadata"]["uid"] = json!("uid-api");
    let mut asleep = web(0);
    asleep["metadata"]["resourceVersion"] = json!("30");
    // Before the fixture's answers.
    server.first("GET", &format!("{HPAS}/web"), retargeted.clone());
    server.first("GET", &format!("{DEPLOYMENTS}/web"), asleep);
    server.first("GET", &format!("{DEPLOYMENTS}/api"), api);
    operator.hpas(vec![retargeted]);
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        status(409, "Conflict", "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified")
    });

    let result = operator.reconcile(&t).await;

    assert!(result.is_err(), "{result:?}");
    let sent = server.sent();
    let wake = web_scale_write(&sent, "a wake write");
    assert_eq!(wake.body["spec"]["replicas"], 2);
    assert_eq!(
        wake.body["metadata"]["resourceVersion"], "30",
        "{}",
        wake.body
    );
    // Nothing says web is awake: its record stays until a read shows it is not at 0.
    for s in sent.iter().filter(|s| s.path.ends_with("/tdsets/t/status")) {
        assert!(
            !s.body["status"]["target"]["asleep"].is_null(),
            "{}",
            s.body
        );
    }
}

/// An HPA's own `maxReplicas`, recorded and written at the boundary, is not lost when the next
/// reconcile runs on a cached TDSet older than that write while the status that carries it is
/// still queued (a review found the own ceiling then read off the HPA: the schedule's 20).
#[tokio::test(start_paused = true)]
async fn an_own_ceiling_only_queued_survives_a_reconcile_on_an_older_cached_tdset() {
    let server = ApiServer::start();
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-hpa", "resourceVersion": "20"},
        "spec": {"minReplicas": 2, "maxReplicas": 20,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {"currentReplicas": 2, "desiredReplicas": 2},
    });
    let mut t = tdset(json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"},
        "defaultReplica": 2,
        "defaultMaxReplica": 20,
    }));
    t.metadata.finalizers = Some(vec!["schedule.rs/restore-target".into()]);
    // The cache: the floor's record from an earlier day, no ceiling's.
    let target = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                        "name": "web", "uid": "uid-hpa", "field": "spec.minReplicas",
                        "originalReplicas": 2});
    t.status = Some(
        serde_json::from_value(json!({"desiredReplicas": 2, "target": target.clone()})).unwrap(),
    );
    server.returns("GET", &format!("{HPAS}/web"), hpa.clone());
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(2));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "31"));
    let mut operator = Operator::at(&server, NOW);
    operator.hpas(vec![hpa]);
    // What the boundary's reconcile queued after its writes: the own 10 recorded.
    let mut queued = t.status.clone().unwrap();
    queued.target.as_mut().unwrap().original_max_replicas = Some(10);
    operator
        .ctx
        .statuses
        .queued(&t, std::sync::Arc::new(queued));

    operator.reconcile_as_cached(&t).await.unwrap();

    let sent = server.sent();
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.contains("horizontalpodautoscalers/web") && r.starts_with("PATCH")),
        "{:?}",
        server.requests()
    );
    let last = sent.last().expect("a status written");
    assert_eq!(
        last.body["status"]["target"]["originalMaxReplicas"], 10,
        "{}",
        last.body
    );
}
