//! The group form (`scaleTargetSelector`): what one reconcile sends.

use super::*;

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
    no_other_workloads(&server);
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
    no_other_workloads(&server);
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
