//! The owned form (`container`, `template`): what one reconcile sends.

use super::*;

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
