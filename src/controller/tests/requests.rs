//! What one reconcile sends, request by request, for each form.

use std::time::Duration;

use serde_json::{Value, json};

use super::{ApiServer, Operator, echo, patched, status};
use crate::api::TDSet;

const NOW: &str = "2026-11-26T10:00:00Z";
const TDSETS: &str = "/apis/schedule.rs/v1/namespaces/ns/tdsets";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/ns/deployments";
const HPAS: &str = "/apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers";

/// TDSet `t` in namespace `ns` with `spec` (no windows unless it says: `defaultReplica`
/// all day), as the cache holds it, no status yet.
fn tdset(mut spec: Value) -> TDSet {
    if spec.get("schedulingConfig").is_none() {
        spec["schedulingConfig"] = json!([]);
    }
    serde_json::from_value(json!({
        "apiVersion": "schedule.rs/v1",
        "kind": "TDSet",
        "metadata": {"name": "t", "namespace": "ns", "uid": "uid-t", "resourceVersion": "1",
                     "generation": 1, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": spec,
    }))
    .unwrap()
}

/// Deployment `web` of another owner, running `replicas`.
fn web(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web", "resourceVersion": "10",
                     "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        "status": {"replicas": replicas, "readyReplicas": replicas},
    })
}

/// What discovery reads of `apps/v1`: Deployments, with `/scale`.
fn apps_v1() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
        "resources": [
            {"name": "deployments", "singularName": "deployment", "namespaced": true,
             "kind": "Deployment", "verbs": ["get", "list", "watch", "patch"]},
            {"name": "deployments/scale", "singularName": "", "namespaced": true,
             "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch"]},
        ],
    })
}

/// The `/scale` of Deployment `web` after a write of `replicas`.
fn scale(replicas: i64, resource_version: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-web",
                     "resourceVersion": resource_version},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    })
}

/// A Deployment as the API server creates it from `body`.
fn created(body: &Value) -> Value {
    let mut created = body.clone();
    created["metadata"]["uid"] = json!("uid-d");
    created["metadata"]["resourceVersion"] = json!("2");
    created
}

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

/// The write to Deployment `web`'s `/scale` among `sent` (`what`: the failure's words).
fn web_scale_write<'a>(sent: &'a [super::Sent], what: &str) -> &'a super::Sent {
    (sent.iter())
        .find(|s| s.path.ends_with("/deployments/web/scale"))
        .expect(what)
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn the_owned_form_creates_its_deployment_then_queues_its_status() {
    let server = ApiServer::start();
    let t = tdset(json!({"container": {"image": "nginx:1.27", "port": 8080}, "defaultReplica": 2}));
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "POST /apis/apps/v1/namespaces/ns/deployments",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    let created = &sent[0].body;
    assert_eq!(created["spec"]["replicas"], 2);
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "uid-t");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    assert!(
        sent[0].query.contains("fieldManager=tdset-operator"),
        "{}",
        sent[0].query
    );
    assert_eq!(server.events(), vec!["Created".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_with_nothing_to_change_sends_nothing() {
    let server = ApiServer::start();
    let mut t =
        tdset(json!({"container": {"image": "nginx:1.27", "port": 8080}, "defaultReplica": 2}));
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);
    operator.reconcile(&t).await.unwrap();
    // The watches bring back what the first reconcile wrote.
    let sent = server.sent();
    operator.deployments(vec![created(&sent[0].body)]);
    t.status = serde_json::from_value(sent[1].body["status"].clone()).unwrap();
    t.metadata.resource_version = Some("3".into());
    server.clear();

    operator.reconcile(&t).await.unwrap();

    assert_eq!(server.all().len(), 0, "{:#?}", server.all());
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

/// A list of `items` of `kind`, as the API server answers a list.
fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "30"},
           "items": items})
}

/// Deployment `name` of the dev environment, running `replicas`.
fn dev(name: &str, replicas: i32, resource_version: &str) -> Value {
    let mut d = web(replicas);
    d["metadata"]["name"] = json!(name);
    d["metadata"]["uid"] = json!(format!("uid-{name}"));
    d["metadata"]["resourceVersion"] = json!(resource_version);
    d["metadata"]["labels"] = json!({"env": "dev"});
    d
}

#[tokio::test(start_paused = true)]
async fn a_group_puts_its_workloads_to_sleep_each_with_its_own_count_recorded_on_it() {
    let server = ApiServer::start();
    let t = tdset(json!({
        "scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}},
        "defaultReplica": 0,
    }));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    server.lists(DEPLOYMENTS, "held-by-uid=uid-t", list("Deployment", vec![]));
    // What other groups hold of what it selects: nothing.
    server.lists(
        DEPLOYMENTS,
        "held-by-uid!=uid-t",
        list("Deployment", vec![]),
    );
    server.lists(
        DEPLOYMENTS,
        "env=dev",
        list("Deployment", vec![dev("a", 3, "11"), dev("b", 2, "12")]),
    );
    let statefulsets = "/apis/apps/v1/namespaces/ns/statefulsets";
    server.lists(
        statefulsets,
        "held-by-uid=uid-t",
        list("StatefulSet", vec![]),
    );
    server.lists(
        statefulsets,
        "held-by-uid!=uid-t",
        list("StatefulSet", vec![]),
    );
    server.lists(statefulsets, "env=dev", list("StatefulSet", vec![]));
    let cronjobs = "/apis/batch/v1/namespaces/ns/cronjobs";
    server.lists(cronjobs, "held-by-uid=uid-t", list("CronJob", vec![]));
    server.lists(HPAS, "", list("HorizontalPodAutoscaler", vec![]));
    server.on("PATCH", &format!("{DEPLOYMENTS}/a"), echo("13"));
    server.on("PATCH", &format!("{DEPLOYMENTS}/b"), echo("14"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    assert_eq!(
        requests[..12],
        lines(&[
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t",
            // Whether KEDA is installed (its ScaledObjects are listed too where it is).
            "GET /apis",
            // What it holds (its record's label), kind by kind, read whole before anything
            // else; CronJobs only for records (a kind it no longer selects may still carry
            // one). Then, within --group-max-workloads, what other groups hold of what it
            // selects (the HPAs whole), then all it selects.
            "GET /apis/apps/v1/namespaces/ns/deployments",
            "GET /apis/apps/v1/namespaces/ns/statefulsets",
            "GET /apis/batch/v1/namespaces/ns/cronjobs",
            "GET /apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers",
            "GET /apis/apps/v1/namespaces/ns/deployments",
            "GET /apis/apps/v1/namespaces/ns/statefulsets",
            "GET /apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers",
            "GET /apis/apps/v1/namespaces/ns/deployments",
            "GET /apis/apps/v1/namespaces/ns/statefulsets",
            // status.group, durable before the first workload write.
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    // The two workload writes go at once (in either order), then the status.
    let mut writes = requests[12..14].to_vec();
    writes.sort();
    assert_eq!(
        writes,
        lines(&[
            "PATCH /apis/apps/v1/namespaces/ns/deployments/a",
            "PATCH /apis/apps/v1/namespaces/ns/deployments/b",
        ])
    );
    assert_eq!(
        requests[14..],
        lines(&["PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status"])
    );
    let sent = server.sent();
    let queries: Vec<&str> = sent[2..11].iter().map(|s| s.query.as_str()).collect();
    for held in &queries[..4] {
        assert!(
            held.contains("labelSelector=schedule.rs/held-by-uid=uid-t"),
            "{queries:?}"
        );
    }
    for others in [&queries[4], &queries[5]] {
        assert!(
            others.contains(
                "labelSelector=env=dev,schedule.rs/held-by-uid,schedule.rs/held-by-uid!=uid-t"
            ),
            "{queries:?}"
        );
    }
    assert!(queries[7].contains("labelSelector=env=dev&"), "{queries:?}");
    assert!(sent[11].body["status"]["group"].is_object());
    for (name, own, revision) in [("a", "3", "11"), ("b", "2", "12")] {
        let write = sent
            .iter()
            .find(|s| s.path.ends_with(&format!("/deployments/{name}")))
            .unwrap();
        let meta = &write.body["metadata"];
        assert_eq!(write.body["spec"]["replicas"], 0, "{name}");
        assert_eq!(
            meta["annotations"]["schedule.rs/own-replicas"], own,
            "{name}"
        );
        assert_eq!(meta["annotations"]["schedule.rs/held-by"], "t", "{name}");
        assert_eq!(meta["labels"]["schedule.rs/held-by-uid"], "uid-t", "{name}");
        // Guarded: only the object, at the revision, the plan read.
        assert_eq!(meta["uid"], format!("uid-{name}"));
        assert_eq!(meta["resourceVersion"], revision);
    }
    assert_eq!(server.events(), vec!["ScaledDown".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_calendar_with_a_date_it_cannot_read_is_left_out_and_the_schedule_goes_on() {
    let server = ApiServer::start();
    // Thursday 2026-11-26, 10:00 UTC: the weekday window is open, and the calendar would make
    // today a holiday if it could be read.
    let t = tdset(json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 3}],
        "defaultReplica": 1,
        "calendars": ["company"],
    }));
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);
    operator.calendars(vec![json!({
        "apiVersion": "schedule.rs/v1", "kind": "TDCalendar",
        "metadata": {"name": "company"},
        "spec": {"holidays": ["2026-11-26", "2027-02-29"]},
    })]);

    operator.reconcile(&t).await.unwrap();

    assert_eq!(
        server.requests(),
        lines(&[
            "POST /apis/apps/v1/namespaces/ns/deployments",
            "PATCH /apis/schedule.rs/v1/namespaces/ns/tdsets/t/status",
        ])
    );
    let sent = server.sent();
    // The window's count: none of the calendar's dates apply, today's included.
    assert_eq!(sent[0].body["spec"]["replicas"], 3);
    let conditions = sent[1].body["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    let degraded = conditions.iter().find(|c| c["type"] == "Degraded").unwrap();
    assert_eq!(degraded["reason"], "CalendarInvalid");
    let message = degraded["message"].as_str().unwrap();
    assert!(message.contains("TDCalendar company"), "{message}");
    assert!(
        message.contains("spec.holidays[1]: \"2027-02-29\""),
        "{message}"
    );
    let progressing = conditions
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_ne!(progressing["reason"], "Blocked", "{progressing}");
    let mut events = server.events();
    events.sort();
    assert_eq!(
        events,
        vec!["CalendarInvalid".to_string(), "Created".to_string()]
    );
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

#[tokio::test(start_paused = true)]
async fn a_group_says_its_own_failure_before_the_workloads_held_elsewhere() {
    let server = ApiServer::start();
    let t = tdset(json!({
        "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
        "defaultReplica": 0,
    }));
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut held = dev("db", 1, "12");
    held["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "some-operator", "uid": "uid-op",
        "controller": true,
    }]);
    server.lists(DEPLOYMENTS, "held-by-uid=uid-t", list("Deployment", vec![]));
    server.lists(
        DEPLOYMENTS,
        "env=dev",
        list("Deployment", vec![dev("a", 3, "11"), held]),
    );
    for kind in ["statefulsets", "cronjobs"] {
        let group = if kind == "cronjobs" { "batch" } else { "apps" };
        let path = format!("/apis/{group}/v1/namespaces/ns/{kind}");
        server.lists(&path, "", list("List", vec![]));
    }
    server.lists(HPAS, "", list("HorizontalPodAutoscaler", vec![]));
    server.on("PATCH", &format!("{DEPLOYMENTS}/a"), |_| {
        status(403, "Forbidden", "deployments.apps \"a\" is forbidden: no")
    });
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    let last = server.sent().last().unwrap().body["status"].clone();
    let conditions = last["conditions"].as_array().unwrap();
    let degraded = conditions.iter().find(|c| c["type"] == "Degraded").unwrap();
    assert_eq!(degraded["reason"], "Forbidden", "{degraded}");
    let progressing = conditions
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(last["group"]["conflicting"], 1, "{last}");
    // Its own failure is Degraded's; the workload held elsewhere alone would not hold it back.
    assert_eq!(progressing["reason"], "Blocked", "{progressing}");
}

/// The watch updates the indexes before the cache: the index already knows `t` as no group
/// (its form was changed) while the cache still holds its group spec. A reconcile on that
/// spec takes `t`'s own claim (its creationTimestamp), not the oldest possible one, and
/// writes nothing to a workload the older group `a` holds.
#[tokio::test(start_paused = true)]
async fn a_group_reconciled_on_a_stale_spec_takes_nothing_from_an_older_group() {
    let server = ApiServer::start();
    let spec = json!({
        "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
        "defaultReplica": 0,
    });
    let t = tdset(spec.clone());
    let mut older = tdset(spec);
    older.metadata.name = Some("a".into());
    older.metadata.creation_timestamp = tdset_created("2026-10-01T00:00:00Z");
    server.on("PATCH", &format!("{TDSETS}/t"), patched(&t, "2"));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut held = dev("web", 0, "11");
    held["metadata"]["annotations"] = json!({
        "schedule.rs/held-by": "a", "schedule.rs/own-replicas": "3",
        "schedule.rs/scheduled-replicas": "0",
    });
    server.lists(DEPLOYMENTS, "held-by-uid=uid-t", list("Deployment", vec![]));
    server.lists(DEPLOYMENTS, "env=dev", list("Deployment", vec![held]));
    for kind in ["statefulsets", "cronjobs"] {
        let group = if kind == "cronjobs" { "batch" } else { "apps" };
        let path = format!("/apis/{group}/v1/namespaces/ns/{kind}");
        server.lists(&path, "", list("List", vec![]));
    }
    server.lists(HPAS, "", list("HorizontalPodAutoscaler", vec![]));
    server.on("PATCH", &format!("{DEPLOYMENTS}/web"), echo("12"));
    let mut operator = Operator::at(&server, NOW);
    operator.group(&older);

    operator.reconcile_as_cached(&t).await.unwrap();

    let writes: Vec<String> = (server.requests().into_iter())
        .filter(|r| r.contains("/deployments/"))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    let last = server.sent().last().unwrap().body["status"].clone();
    assert_eq!(last["group"]["conflicting"], 1, "{last}");
}

fn tdset_created(at: &str) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    serde_json::from_value(json!(at)).unwrap()
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

/// A TDSet asleep at night woken by a request: the owned Deployment is scaled to the count it
/// wakes to, and the status write carries only the reconcile's part of `requestWake` (its
/// phase): what the wake endpoint wrote is never written back, stale or not. Once the cache
/// holds that status, nothing is sent.
#[tokio::test(start_paused = true)]
async fn a_request_wake_up_scales_and_writes_only_its_phase_back() {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}],
        "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"},
    }));
    t.status = Some(
        serde_json::from_value(json!({
            "requestWake": {"since": "2026-11-26T09:55:00Z", "until": "2026-11-26T10:25:00Z",
                            "requests": 4,
                            "request": {"service": "web:http", "method": "GET", "path": "/"}},
        }))
        .unwrap(),
    );
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    assert_eq!(
        sent[0].body["spec"]["replicas"], 3,
        "woken to the next window's count"
    );
    let status = &sent[1].body["status"];
    assert_eq!(
        status["requestWake"],
        json!({"phase": "Waking"}),
        "{status:#}"
    );
    assert_eq!(status["nextTransitionTime"], "2026-11-26T10:25:00Z");
    assert_eq!(status["nextReplicas"], 0);
    // The Deployment made at the wake-up's count: the wake-up is in the history at once.
    assert_eq!(status["history"][0]["to"], 3, "{status:#}");
    assert_eq!(status["history"][0]["from"], 0, "{status:#}");
    assert!(
        (status["history"][0]["reason"].as_str())
            .is_some_and(|r| r.starts_with("woken by a request")),
        "{status:#}"
    );

    // The watch brings back the status as stored: both managers' fields; nothing is sent.
    operator.deployments(vec![created(&sent[0].body)]);
    let mut stored = status.clone();
    stored["requestWake"] = json!({"phase": "Waking", "since": "2026-11-26T09:55:00Z",
        "until": "2026-11-26T10:25:00Z", "requests": 4,
        "request": {"service": "web:http", "method": "GET", "path": "/"}});
    t.status = serde_json::from_value(stored).unwrap();
    t.metadata.resource_version = Some("3".into());
    server.clear();
    operator.reconcile(&t).await.unwrap();
    assert_eq!(server.all().len(), 0, "{:#?}", server.all());
}

/// The leader that woke the workload for a request stopped before its status was written (its
/// write landed, its status did not): the next leader finds the Deployment at the wake-up's
/// count with 0 on record, writes nothing to it, and records the wake-up in the history, once,
/// saying it was found applied.
#[tokio::test(start_paused = true)]
async fn a_wake_up_whose_status_was_lost_is_recorded_as_found() {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}],
        "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"},
    }));
    t.status = Some(
        serde_json::from_value(json!({
            "desiredReplicas": 0,
            "history": [{"at": "2026-11-25T13:00:00Z", "to": 0, "reason": "no window is active"}],
            "requestWake": {"since": "2026-11-26T09:55:00Z", "until": "2026-11-26T10:25:00Z",
                            "requests": 1, "request": {"service": "web:http"}},
        }))
        .unwrap(),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);
    // The previous leader's write, as the watch shows it.
    let woken = crate::workload::owned::desired_deployment(&t, 3)
        .unwrap()
        .unwrap();
    operator.deployments(vec![created(&serde_json::to_value(&woken).unwrap())]);

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    assert_eq!(sent.len(), 1, "the status alone: {:#?}", server.requests());
    let entry = &sent[0].body["status"]["history"][0];
    assert_eq!(
        (entry["from"].clone(), entry["to"].clone()),
        (json!(0), json!(3)),
        "{entry:#}"
    );
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("woken by a request"),
        "{entry:#}"
    );
    assert!(
        entry["message"].as_str().unwrap().contains("found applied"),
        "{entry:#}"
    );
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices";
const PROXY_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/tdset-system/endpointslices";

/// The wake proxy the operator points its slices at: Service `tdset-system/wake-proxy`.
fn wake_proxy() -> Option<crate::controller::state::WakeProxyRef> {
    Some(crate::controller::state::WakeProxyRef {
        namespace: "tdset-system".into(),
        service: "wake-proxy".into(),
        ports: (20000, 20255),
    })
}

/// Service `web` (port `http` 80 to the pods' 8080), one IPv4 ClusterIP.
fn web_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-svc", "resourceVersion": "30"},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"},
                 "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"], "ipFamilies": ["IPv4"],
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    })
}

/// A list of EndpointSlices of Service `service` in `ns`, each `(address, ready)` one endpoint.
fn slice_list(ns: &str, service: &str, endpoints: &[(&str, bool)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "40"},
        "items": [{
            "metadata": {"name": format!("{service}-abcde"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": endpoints.iter().map(|(ip, ready)| json!({
                "addresses": [ip], "conditions": {"ready": ready}})).collect::<Vec<_>>(),
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }],
    })
}

/// TDSet `t` over Deployment `web` (at 3) with `schedule` and `wakeOnRequest` for Service
/// `web`, and the API server answering the form's reads, Service `web`, the proxy's pods
/// (`proxies`: address, ready) and the TDSet's status.
fn intercepted(schedule: Value, proxies: &[(&str, bool)]) -> (ApiServer, TDSet) {
    intercepted_service(schedule, proxies, web_service())
}

/// `intercepted`, Service `web` being `service`.
fn intercepted_service(
    schedule: Value,
    proxies: &[(&str, bool)],
    service: Value,
) -> (ApiServer, TDSet) {
    let server = ApiServer::start();
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(3));
    let mut spec = schedule;
    spec["scaleTargetRef"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    spec["wakeOnRequest"] = json!({"services": [{"name": "web"}]});
    let t = tdset(spec);
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.returns("GET", "/api/v1/namespaces/ns/services/web", service);
    server.lists(
        PROXY_SLICES,
        "kubernetes.io/service-name=wake-proxy",
        slice_list("tdset-system", "wake-proxy", proxies),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "11"));
    (server, t)
}

/// `intercepted_service`'s TDSet at night (awake 12:00-13:00 only, the count still 3): the
/// slice's apply and the write to 0 answered; an operator pointing slices at the wake proxy.
fn going_to_sleep(proxies: &[(&str, bool)], service: Value) -> (ApiServer, TDSet, Operator) {
    let (server, t) = intercepted_service(
        json!({"defaultReplica": 0,
               "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}]}),
        proxies,
        service,
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/web-tdset-wake-ipv4"),
        echo("41"),
    );
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(0, "12"))
    });
    let operator = Operator::with_wake_proxy(&server, NOW, wake_proxy());
    (server, t, operator)
}

/// The watch brings the slice back (`stored`, at revision 41) and the count is 0: the next
/// reconcile reads the proxy's pods again but writes no slice.
async fn not_written_again(
    server: &ApiServer,
    operator: &mut Operator,
    t: &TDSet,
    mut stored: Value,
) {
    stored["metadata"]["namespace"] = json!("ns");
    stored["metadata"]["resourceVersion"] = json!("41");
    operator.wake_slices(vec![stored]);
    operator.deployments(vec![web(0)]);
    server.clear();
    operator.reconcile(t).await.unwrap();
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.contains("endpointslices/web-tdset-wake")),
        "written again: {:#?}",
        server.requests()
    );
}

/// Going to sleep, the operator's slice for the Service (the proxy's ready pod on a proxy
/// port) is applied before the write that takes the count to 0: the Service never has no
/// endpoint. A reconcile that finds it in place does not write it again.
#[tokio::test(start_paused = true)]
async fn going_to_sleep_the_proxy_is_put_in_the_path_before_the_count_goes_to_0() {
    let (server, t, mut operator) =
        going_to_sleep(&[("10.0.9.1", true), ("10.0.9.2", false)], web_service());

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    let at = |line: &str| {
        requests
            .iter()
            .position(|r| r == line)
            .unwrap_or_else(|| panic!("{line} not sent: {requests:#?}"))
    };
    let slice =
        at("PATCH /apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-tdset-wake-ipv4");
    let to_zero = at("PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale");
    assert!(
        slice < to_zero,
        "the slice after the count went to 0: {requests:#?}"
    );
    let sent = server.sent();
    let applied = &sent[slice].body;
    assert!(
        sent[slice].query.contains("fieldManager="),
        "a server-side apply"
    );
    assert_eq!(
        applied["metadata"]["labels"]["kubernetes.io/service-name"],
        "web"
    );
    assert_eq!(
        applied["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "tdset.schedule.rs"
    );
    assert_eq!(applied["metadata"]["ownerReferences"][0]["uid"], "uid-t");
    // The proxy's ready pod only, marked ready explicitly; the Service's port name on a
    // proxy port of the range.
    assert_eq!(
        applied["endpoints"],
        json!([{"addresses": ["10.0.9.1"],
                 "conditions": {"ready": true, "serving": true, "terminating": false}}])
    );
    assert_eq!(applied["ports"][0]["name"], "http");
    let port = applied["ports"][0]["port"].as_i64().unwrap();
    assert!((20000..=20255).contains(&port), "{port}");

    // The watch brings the slice back: the next reconcile (the count already 0) reads the
    // proxy's pods again but writes no slice.
    not_written_again(&server, &mut operator, &t, applied.clone()).await;
}

/// A Service whose one port has no name: the API server stores the slice's port name as ""
/// (its defaulting, seen on kube-apiserver v1.36), so the slice the operator applies names it
/// "" too, and a reconcile that finds it stored does not write it again.
#[tokio::test(start_paused = true)]
async fn a_slice_for_an_unnamed_port_is_not_written_again_once_stored() {
    let mut svc = web_service();
    svc["spec"]["ports"] = json!([{"port": 80, "targetPort": 8080, "protocol": "TCP"}]);
    let (server, t, mut operator) = going_to_sleep(&[("10.0.9.1", true)], svc);
    operator.reconcile(&t).await.unwrap();
    let sent = server.sent();
    let apply = sent
        .iter()
        .find(|r| r.path.ends_with("/endpointslices/web-tdset-wake-ipv4"))
        .expect("the slice applied");
    let applied_name = apply.body["ports"][0]["name"].clone();

    // Stored as the API server stores it (the port's name "", the protocol TCP).
    let mut stored = apply.body.clone();
    stored["ports"][0]["name"] = json!("");
    not_written_again(&server, &mut operator, &t, stored).await;
    assert_eq!(applied_name, "");
}

/// Awake again (a window), the operator's slice stays while the Service's own endpoints are
/// not ready, and is deleted once one is: nothing of the operator's is in the path.
#[tokio::test(start_paused = true)]
async fn woken_the_slice_goes_once_the_services_own_endpoint_is_ready() {
    let (server, t) = intercepted(json!({"defaultReplica": 3}), &[("10.0.9.1", true)]);
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(3, "12"))
    });
    server.on("DELETE", &format!("{SLICES}/web-tdset-wake-ipv4"), |_| {
        status(200, "", "deleted")
    });
    // (The slice as cached here lacks what the operator puts on it: kept, it is refreshed.)
    server.on(
        "PATCH",
        &format!("{SLICES}/web-tdset-wake-ipv4"),
        echo("42"),
    );
    let ours = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-tdset-wake-ipv4", "namespace": "ns", "resourceVersion": "41",
                     "labels": {"kubernetes.io/service-name": "web",
                                "endpointslice.kubernetes.io/managed-by": "tdset.schedule.rs",
                                "schedule.rs/tdset": "t"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.9.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 20000, "protocol": "TCP"}],
    });
    let mut operator = Operator::with_wake_proxy(&server, NOW, wake_proxy());
    operator.wake_slices(vec![ours]);
    operator.deployments(vec![web(3)]);

    // Its own endpoint not ready yet: kept.
    server.lists(
        SLICES,
        "kubernetes.io/service-name=web",
        slice_list("ns", "web", &[("10.1.0.5", false)]),
    );
    operator.reconcile(&t).await.unwrap();
    assert!(
        !server.requests().iter().any(|r| r.starts_with("DELETE")),
        "{:#?}",
        server.requests()
    );

    // Ready: the slice goes.
    server.first(
        "GET",
        SLICES,
        slice_list("ns", "web", &[("10.1.0.5", true)]),
    );
    server.clear();
    operator.reconcile(&t).await.unwrap();
    assert!(
        server.requests().contains(
            &"DELETE /apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-tdset-wake-ipv4"
                .to_string()
        ),
        "{:#?}",
        server.requests()
    );
}

/// Two TDSets going to sleep at once, each with its own Service, the first one's slice not yet
/// in the watch cache when the second is planned: the second is not given the port the first
/// was (with one port in the range it is refused, never given the same one: the proxy would
/// send its requests to the other Service's pods).
#[tokio::test(start_paused = true)]
async fn a_port_handed_out_is_not_given_again_before_the_cache_has_it() {
    let server = ApiServer::start();
    for name in ["solo-a", "solo-b"] {
        // Each selects its TDSet's pods (the Deployment it owns).
        let mut svc = web_service();
        svc["metadata"]["name"] = json!(name);
        svc["spec"]["selector"] = json!({"schedule.rs/tdset": name});
        server.returns(
            "GET",
            &format!("/api/v1/namespaces/ns/services/{name}"),
            svc,
        );
    }
    server.lists(
        PROXY_SLICES,
        "kubernetes.io/service-name=wake-proxy",
        slice_list("tdset-system", "wake-proxy", &[("10.0.9.1", true)]),
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/solo-a-tdset-wake-ipv4"),
        echo("41"),
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/solo-b-tdset-wake-ipv4"),
        echo("42"),
    );
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    let mut operator = Operator::with_wake_proxy(
        &server,
        NOW,
        Some(crate::controller::state::WakeProxyRef {
            namespace: "tdset-system".into(),
            service: "wake-proxy".into(),
            ports: (20999, 20999),
        }),
    );
    let mut given = Vec::new();
    for service in ["solo-a", "solo-b"] {
        let mut t = tdset(json!({
            "container": {"image": "nginx:1.27", "port": 8080},
            "defaultReplica": 0,
            "wakeOnRequest": {"services": [{"name": service}]},
        }));
        t.metadata.name = Some(service.into());
        t.metadata.uid = Some(format!("uid-{service}"));
        server.on(
            "PATCH",
            &format!("{TDSETS}/{service}/status"),
            patched(&t, "11"),
        );
        server.clear();
        operator.reconcile(&t).await.unwrap();
        given.extend(
            server
                .sent()
                .iter()
                .filter(|s| s.path.contains("/endpointslices/"))
                .map(|s| (service, s.body["ports"][0]["port"].clone())),
        );
    }
    assert_eq!(given, vec![("solo-a", json!(20999))], "{given:?}");
}

const SCALED_OBJECTS: &str = "/apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects";

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
async fn given_up_on_keda(
    server: &ApiServer,
    operator: &mut Operator,
    t: &TDSet,
) -> Vec<super::Sent> {
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
fn object_writes(server: &ApiServer) -> Vec<super::Sent> {
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
    server.first(
        "GET",
        "/apis",
        super::api_groups(&[("keda.sh", "v1alpha1")]),
    );
    server.returns("GET", "/apis/keda.sh/v1alpha1", keda_v1alpha1());
    let mut web = dev("web", 2, "11");
    web["metadata"]["annotations"] = annotations;
    server.lists(DEPLOYMENTS, "held-by-uid=uid-t", list("Deployment", vec![]));
    server.lists(
        DEPLOYMENTS,
        "held-by-uid!=uid-t",
        list("Deployment", vec![]),
    );
    server.lists(DEPLOYMENTS, "env=dev", list("Deployment", vec![web]));
    for kind in ["statefulsets", "cronjobs"] {
        let group = if kind == "cronjobs" { "batch" } else { "apps" };
        let path = format!("/apis/{group}/v1/namespaces/ns/{kind}");
        server.lists(&path, "", list("List", vec![]));
    }
    server.lists(HPAS, "", list("HorizontalPodAutoscaler", vec![]));
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
