//! Overrides, suspend and ramps on the real API server, the operator in-process with an
//! injected clock that starts seconds before the instant under test.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::{Clock, SystemClock};

#[tokio::test]
async fn an_override_takes_the_deployment_at_its_start_and_gives_it_back_at_its_end() {
    let (client, ns) = setup("cal-override").await;
    let t0 = utc("2026-11-27T12:00:00Z");
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 3}],
        "defaultReplica": 1,
        "intervalMint": 60,
        "overrides": [
            {"start": "2026-11-27T12:00:04Z", "end": "2026-11-27T12:00:08Z", "replica": 7, "reason": "launch"},
            {"start": "2026-11-26T00:00:00Z", "end": "2026-11-26T01:00:00Z", "replica": 9}
        ]
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    let clock = SystemClock::starting_at(t0);
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 3).await;
    let during = deployment_at(&client, &ns.name, "web", 7).await;
    let seen = clock.now();
    assert!(
        seen >= utc("2026-11-27T12:00:04Z"),
        "scaled before the override started: {seen}"
    );
    assert!(during.metadata.owner_references.is_some());
    let t = object_where(
        &client,
        &ns.name,
        "web",
        "status names the override",
        |t: &TDSet| t.status.as_ref().and_then(|s| s.active_override.as_deref()) == Some("launch"),
    )
    .await;
    assert_eq!(
        t.status.unwrap().next_transition_time.as_deref(),
        Some("2026-11-27T12:00:08Z")
    );
    deployment_at(&client, &ns.name, "web", 3).await;
    assert!(clock.now() >= utc("2026-11-27T12:00:08Z"));
    wait_for_event(&client, &ns.name, "web", |(_, r, note)| {
        r == "ScaledUp" && note.contains("override launch is active")
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn suspend_stops_every_write_and_resume_applies_the_schedule_at_once() {
    let (client, ns) = setup("cal-suspend").await;
    let op = Operator::start(
        &client,
        &ns.name,
        SystemClock::starting_at(utc("2026-05-01T12:00:00Z")),
        None,
        "test",
    );
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 4}],
        "defaultReplica": 1,
        "intervalMint": 60
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    deployment_at(&client, &ns.name, "web", 4).await;
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let set_suspend = |on: bool| {
        let tdsets = tdsets.clone();
        async move {
            tdsets
                .patch(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"suspend": on}})),
                )
                .await
                .unwrap();
        }
    };
    set_suspend(true).await;
    let t = tdset_with_reason(&client, &ns.name, "web", "Progressing", "Suspended").await;
    assert!(
        condition(&t, "Progressing")
            .unwrap()
            .message
            .contains("wants 4")
    );

    // A manual scale is left alone while suspended, through reconciles.
    let out = kubectl(&["-n", &ns.name, "scale", "deployment/web", "--replicas=9"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writes = op.writes();
    for i in 0..2 {
        let reconciles = op.counter("tdset_reconciles_total");
        tdsets
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"poke": i.to_string()}}})),
            )
            .await
            .unwrap();
        eventually(GUARD, "a reconcile while suspended", || async {
            (op.counter("tdset_reconciles_total") > reconciles).then_some(())
        })
        .await;
    }
    let d: Deployment = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(replicas(&d), Some(9), "scaled while suspended");
    let deployment_writes = |op: &Operator| {
        op.metrics
            .render()
            .lines()
            .filter(|l| l.starts_with("tdset_api_writes_total{resource=\"deployments"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let before = deployment_writes(&op);
    assert!(op.writes() >= writes, "counters only grow");

    // Resumed: the drift is reverted at once.
    set_suspend(false).await;
    deployment_at(&client, &ns.name, "web", 4).await;
    assert!(deployment_writes(&op) > before);
    object_where(
        &client,
        &ns.name,
        "web",
        "Progressing no longer Suspended",
        |t: &TDSet| condition(t, "Progressing").is_some_and(|c| c.reason != "Suspended"),
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_ramp_takes_the_deployment_through_its_steps_at_their_instants() {
    let (client, ns) = setup("cal-ramp").await;
    // 2, then 4 from 09:00; one replica a minute: 3 from 08:59, 4 from 09:00.
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"name": "day", "startTime": 9, "endTime": 17, "replica": 4}],
        "defaultReplica": 2,
        "intervalMint": 60,
        "ramp": {"step": 1, "every": "1m", "direction": "Up"}
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    let step = utc("2026-05-01T08:59:00Z");
    let clock = SystemClock::starting_at(step - chrono::Duration::seconds(3));
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 2).await;
    deployment_at(&client, &ns.name, "web", 3).await;
    assert!(clock.now() >= step, "the step came before its instant");
    let t = object_where(
        &client,
        &ns.name,
        "web",
        "status of the ramp",
        |t: &TDSet| {
            t.status
                .as_ref()
                .is_some_and(|s| s.desired_replicas == Some(3))
        },
    )
    .await;
    let s = t.status.unwrap();
    assert_eq!(
        s.next_transition_time.as_deref(),
        Some("2026-05-01T09:00:00Z")
    );
    assert_eq!(s.next_replicas, Some(4));
    wait_for_event(&client, &ns.name, "web", |(_, r, note)| {
        r == "ScaledUp" && note.contains("ramping up toward 4")
    })
    .await;
    op.stop().await;
    ns.cleanup().await;
}
