//! Scheduled HPA ceilings (`maxReplica`, issue 36) on the real API server, with
//! kube-controller-manager's HPA controller holding the Deployment between the floor and the
//! ceiling the schedule writes. What a review of the first version broke is here as a test:
//! a target put to sleep under a ceiling below the day's floor, `onDelete: Restore` after a
//! day's floor, a ceiling taken over by an older claim, and a second writer of `maxReplicas`.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

/// Noon on a Friday, inside 09:00-17:00.
fn noon() -> SystemClock {
    SystemClock::starting_at(utc("2026-05-01T12:00:00Z"))
}

/// A TDSet spec over HPA `name`: `floor` under `ceiling` from `start`:00 to 17:00 (UTC),
/// `default` otherwise; plus `extra`.
fn ceilings(
    name: &str,
    start: u32,
    floor: i32,
    ceiling: Option<i32>,
    default: i32,
    extra: Value,
) -> Value {
    let mut window = json!({"name": "office", "startTime": start, "endTime": 17, "replica": floor});
    if let Some(max) = ceiling {
        window["maxReplica"] = json!(max);
    }
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": name},
        "schedulingConfig": [window],
        "defaultReplica": default,
        "intervalMint": 60
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

fn limits(h: &HorizontalPodAutoscaler) -> Option<(i32, i32)> {
    h.spec
        .as_ref()
        .map(|s| (s.min_replicas.unwrap_or(1), s.max_replicas))
}

/// Waits until HPA `name` is at `min..max`.
async fn hpa_at(client: &Client, ns: &str, name: &str, min: i32, max: i32) {
    object_where(client, ns, name, &format!("HPA at {min}..{max}"), |h| {
        limits(h) == Some((min, max))
    })
    .await;
}

/// The HPA's own `maxReplicas` as the TDSet's status records it.
fn own_max(t: &TDSet) -> Option<i32> {
    t.status.as_ref()?.target.as_ref()?.original_max_replicas
}

async fn patch_spec(client: &Client, ns: &str, name: &str, spec: Value) {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .expect("editing the TDSet");
}

/// A scheduled ceiling (`maxReplica`, issue 36): the HPA's `maxReplicas` follows the window,
/// kube-controller-manager's HPA controller itself holds the Deployment under it, and the
/// owner's own `maxReplicas` (recorded first) comes back when no ceiling applies any more and
/// when the TDSet is deleted (`onDelete: Keep`: a ceiling left behind would cap the HPA).
#[tokio::test]
async fn a_scheduled_ceiling_holds_the_deployment_under_it_and_the_own_comes_back() {
    let (client, ns) = setup("wl-hpa-max").await;
    let n = &ns.name;
    // Someone's load has the Deployment at 8, under its HPA's own 2..10.
    let _: Deployment = create_object(&client, n, app_deployment("web", 8)).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("web", "web", 2, 10)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    let window = |max: Option<i32>| {
        let mut w = json!({"name": "office", "startTime": 9, "endTime": 17, "replica": 2});
        if let Some(max) = max {
            w["maxReplica"] = json!(max);
        }
        json!([w])
    };
    let spec = ceilings("web", 9, 2, Some(4), 2, json!({}));
    create_tdset(&client, n, &tdset("sched", spec)).await;
    let max_of = |h: &HorizontalPodAutoscaler| h.spec.as_ref().map(|s| s.max_replicas);
    object_where(
        &client,
        n,
        "web",
        "HPA ceiling 4",
        |h: &HorizontalPodAutoscaler| max_of(h) == Some(4),
    )
    .await;
    // The HPA controller, not the operator, brings the Deployment under the ceiling.
    deployment_at(&client, n, "web", 4).await;
    let own = |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.target.as_ref())
            .and_then(|t| t.original_max_replicas)
    };
    object_where(
        &client,
        n,
        "sched",
        "the HPA's own ceiling recorded",
        |t: &TDSet| own(t) == Some(10),
    )
    .await;
    wait_for_event(&client, n, "sched", |(ty, r, m)| {
        ty == "Normal" && r == "CeilingSet" && m.contains("from 10 to 4")
    })
    .await;

    // The window no longer sets a ceiling: the own comes back, and nothing is kept of it.
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let set_window = |max: Option<i32>| {
        let tdsets = tdsets.clone();
        let w = window(max);
        async move {
            tdsets
                .patch(
                    "sched",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"schedulingConfig": w}})),
                )
                .await
                .expect("editing the window")
        }
    };
    set_window(None).await;
    object_where(
        &client,
        n,
        "web",
        "HPA ceiling 10 again",
        |h: &HorizontalPodAutoscaler| max_of(h) == Some(10),
    )
    .await;
    object_where(&client, n, "sched", "no own ceiling kept", |t: &TDSet| {
        own(t).is_none() && t.status.is_some()
    })
    .await;

    // A ceiling again, then the TDSet goes: the own ceiling comes back with it.
    set_window(Some(3)).await;
    object_where(
        &client,
        n,
        "web",
        "HPA ceiling 3",
        |h: &HorizontalPodAutoscaler| max_of(h) == Some(3),
    )
    .await;
    delete_tdset_and_wait(&client, n, "sched").await;
    let h: HorizontalPodAutoscaler = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(max_of(&h), Some(10), "the ceiling was left behind");
    op.stop().await;
    ns.cleanup().await;
}

/// Asleep under a ceiling below the day's floor (the floor left on the HPA would be above it:
/// the API server refuses that, and the first version never slept), woken again, and then
/// `onDelete: Restore` gives the owner's 2..5 back, not 2..8 (the first version gave the
/// ceiling back before the floor, clamped to the day's floor).
#[tokio::test]
async fn asleep_under_a_low_ceiling_then_restored_the_owners_floor_and_ceiling_come_back() {
    let (client, ns) = setup("ceil-sleep").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("web", 3)).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("web", "web", 2, 5)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    // By day 8 under 20; otherwise asleep (0) under 3.
    let spec = |start| {
        ceilings(
            "web",
            start,
            8,
            Some(20),
            0,
            json!({"defaultMaxReplica": 3, "onDelete": "Restore"}),
        )
    };
    create_tdset(&client, n, &tdset("sched", spec(9))).await;
    hpa_at(&client, n, "web", 8, 20).await;
    deployment_at(&client, n, "web", 8).await;
    object_where(&client, n, "sched", "the own 5 recorded", |t: &TDSet| {
        own_max(t) == Some(5)
    })
    .await;

    // The window now starts at 13:00: at noon the default, asleep under 3.
    patch_spec(&client, n, "sched", spec(13)).await;
    deployment_at(&client, n, "web", 0).await;
    hpa_at(&client, n, "web", 3, 3).await;
    // Reported once the edit is (a durable write before the sleep says 0 earlier).
    object_where(
        &client,
        n,
        "sched",
        "asleep under 3, not Degraded",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.observed_generation == Some(2)
                    && s.desired_replicas == Some(0)
                    && s.desired_max_replicas == Some(3)
            }) && condition(t, "Degraded").is_some_and(|c| c.status == "False")
        },
    )
    .await;
    wait_for_event(&client, n, "sched", |(ty, r, m)| {
        ty == "Normal" && r == "CeilingSet" && m.contains("minReplicas lowered from 8 to 3")
    })
    .await;

    // Woken by day again: floor and ceiling, and the Deployment up to the floor.
    patch_spec(&client, n, "sched", spec(9)).await;
    hpa_at(&client, n, "web", 8, 20).await;
    deployment_at(&client, n, "web", 8).await;

    delete_tdset_and_wait(&client, n, "sched").await;
    let h: HorizontalPodAutoscaler = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(limits(&h), Some((2, 5)), "the owner's floor and ceiling");
    op.stop().await;
    ns.cleanup().await;
}

/// A younger TDSet set a ceiling; an older one takes the HPA over (retargeted to it). The
/// older one takes the HPA's own ceiling from the younger one's record, not the younger
/// one's ceiling it finds on the HPA (the first version did, and the own 10 was lost: the
/// younger one left it to its holder, and the holder gave back 4).
#[tokio::test]
async fn a_ceiling_taken_over_by_an_older_claim_gives_the_hpas_own_back_in_the_end() {
    let (client, ns) = setup("ceil-takeover").await;
    let n = &ns.name;
    for name in ["web", "other"] {
        let _: Deployment = create_object(&client, n, app_deployment(name, 2)).await;
        let _: HorizontalPodAutoscaler = create_object(&client, n, hpa(name, name, 2, 10)).await;
    }
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(
        &client,
        n,
        &tdset("older", ceilings("other", 9, 2, Some(6), 2, json!({}))),
    )
    .await;
    hpa_at(&client, n, "other", 2, 6).await;
    create_tdset(
        &client,
        n,
        &tdset("younger", ceilings("web", 9, 2, Some(4), 2, json!({}))),
    )
    .await;
    hpa_at(&client, n, "web", 2, 4).await;
    object_where(&client, n, "younger", "the own 10 recorded", |t: &TDSet| {
        own_max(t) == Some(10)
    })
    .await;

    // The older TDSet now names web: it holds it, and its ceiling 6 applies.
    patch_spec(
        &client,
        n,
        "older",
        json!({"scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"}}),
    )
    .await;
    hpa_at(&client, n, "web", 2, 6).await;
    // Let go of: other's own ceiling back.
    hpa_at(&client, n, "other", 2, 10).await;
    let older = object_where(
        &client,
        n,
        "older",
        "web's own ceiling recorded",
        |t: &TDSet| {
            own_max(t).is_some()
                && t.status
                    .as_ref()
                    .and_then(|s| s.target.as_ref())
                    .is_some_and(|t| t.name == "web")
        },
    )
    .await;
    assert_eq!(
        own_max(&older),
        Some(10),
        "the younger one's ceiling taken for the own"
    );
    tdset_with_reason(&client, n, "younger", "Degraded", "ConflictingTDSet").await;

    delete_tdset_and_wait(&client, n, "younger").await;
    hpa_at(&client, n, "web", 2, 6).await;
    delete_tdset_and_wait(&client, n, "older").await;
    let h: HorizontalPodAutoscaler = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(limits(&h), Some((2, 10)), "web's own ceiling was lost");
    op.stop().await;
    ns.cleanup().await;
}

/// A GitOps tool that keeps setting `maxReplicas` back to its manifest's is not reverted at
/// watch speed (the first version did: a write and an Event per watch event): reverts slow
/// down as a count's do, and the TDSet says who it fights.
#[tokio::test]
async fn a_writer_that_keeps_resetting_max_replicas_is_reported_and_not_followed_at_watch_speed() {
    let (client, ns) = setup("ceil-gitops").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("web", 2)).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("web", "web", 2, 10)).await;
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(
        &client,
        n,
        &tdset("sched", ceilings("web", 9, 2, Some(4), 2, json!({}))),
    )
    .await;
    hpa_at(&client, n, "web", 2, 4).await;
    let hpa_patches = || {
        op.counter("tdset_api_writes_total{resource=\"horizontalpodautoscalers\",verb=\"patch\"")
    };
    let before = hpa_patches();
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), n);
    let gitops = PatchParams {
        field_manager: Some("flux".into()),
        ..PatchParams::default()
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut resets = 0;
    while tokio::time::Instant::now() < until {
        if limits(&api.get("web").await.unwrap()).map(|l| l.1) != Some(10) {
            api.patch(
                "web",
                &gitops,
                &Patch::Merge(json!({"spec": {"maxReplicas": 10}})),
            )
            .await
            .unwrap();
            resets += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let reverts = hpa_patches() - before;
    eprintln!("{resets} resets by the other writer, {reverts} reverts by the operator in 20 s");
    assert!(
        resets >= 3,
        "the other writer never had to reset ({resets})"
    );
    assert!(
        reverts <= 5.0,
        "{reverts} reverts in 20 s: the operator followed the other writer at watch speed"
    );
    let message = degraded_for(&client, n, "sched", "ConflictingWriter").await;
    assert!(message.contains("maxReplicas"), "{message}");
    op.stop().await;
    ns.cleanup().await;
}

/// The same takeover by an older TDSet with no ceiling of its own: it gives the HPA's own 10
/// back. Once the HPA's owner sets another maxReplicas, the younger TDSet's old record says
/// nothing of it any more: neither the holder nor the younger TDSet, when it goes, writes its
/// 10 over the owner's 15 (a review found both did).
#[tokio::test]
async fn a_ceiling_the_owner_set_after_a_takeover_is_left_to_the_owner() {
    let (client, ns) = setup("ceil-owner").await;
    let n = &ns.name;
    for name in ["web", "other"] {
        let _: Deployment = create_object(&client, n, app_deployment(name, 2)).await;
        let _: HorizontalPodAutoscaler = create_object(&client, n, hpa(name, name, 2, 10)).await;
    }
    let op = Operator::start(&client, n, noon(), None, "test");
    create_tdset(
        &client,
        n,
        &tdset("older", ceilings("other", 9, 2, None, 2, json!({}))),
    )
    .await;
    create_tdset(
        &client,
        n,
        &tdset("younger", ceilings("web", 9, 2, Some(4), 2, json!({}))),
    )
    .await;
    hpa_at(&client, n, "web", 2, 4).await;
    patch_spec(
        &client,
        n,
        "older",
        json!({"scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"}}),
    )
    .await;
    // The holder has no ceiling: the HPA's own comes back.
    hpa_at(&client, n, "web", 2, 10).await;
    tdset_with_reason(&client, n, "younger", "Degraded", "ConflictingTDSet").await;

    // The owner raises the HPA's maxReplicas.
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), n);
    let owner = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let hpa_patches = || {
        op.counter("tdset_api_writes_total{resource=\"horizontalpodautoscalers\",verb=\"patch\"")
    };
    let before = hpa_patches();
    api.patch(
        "web",
        &owner,
        &Patch::Merge(json!({"spec": {"maxReplicas": 15}})),
    )
    .await
    .unwrap();
    // Both TDSets are reconciled on the HPA's change; give them time to (wrongly) write.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(limits(&api.get("web").await.unwrap()), Some((2, 15)));
    assert_eq!(
        hpa_patches() - before,
        0.0,
        "the owner's maxReplicas was written over"
    );

    delete_tdset_and_wait(&client, n, "younger").await;
    assert_eq!(
        limits(&api.get("web").await.unwrap()),
        Some((2, 15)),
        "the younger TDSet gave its old record back over the owner's"
    );
    op.stop().await;
    ns.cleanup().await;
}

/// A scale-up the HPA's own ceiling clamps (a floor of 10 asked, `maxReplicas` 5): what the
/// workload can reach is 5, so its history entry is ready once 5 replicas are, and a
/// Measured warm-up takes its time to Ready as a sample (the first version waited for 10
/// forever: "not yet" in `kubectl tdset history`, and no sample ever).
#[tokio::test]
async fn a_scale_up_clamped_by_the_hpas_ceiling_is_ready_at_the_ceiling_and_measured() {
    let (client, ns) = setup("ceil-clamped-ready").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, app_deployment("web", 2)).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("web", "web", 2, 5)).await;
    let t0 = utc("2026-05-01T12:00:00Z");
    let rise = t0 + chrono::Duration::seconds(5);
    let op = Operator::start(&client, n, SystemClock::starting_at(t0), None, "test");
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "web"},
        "schedulingConfig": [],
        "defaultReplica": 2,
        "overrides": [{"start": rise.to_rfc3339(), "end": (t0 + chrono::Duration::hours(1)).to_rfc3339(),
                       "replica": 10, "reason": "launch"}],
        "warmUp": {"mode": "Measured"},
        "intervalMint": 1
    });
    create_tdset(&client, n, &tdset("sched", spec)).await;
    hpa_at(&client, n, "web", 5, 5).await;
    let t = object_where(
        &client,
        n,
        "sched",
        "the clamped scale-up seen ready",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.history
                    .iter()
                    .any(|e| utc(&e.at) == rise && e.ready_at.is_some())
            })
        },
    )
    .await;
    let status = t.status.unwrap();
    let entry = status.history.iter().find(|e| utc(&e.at) == rise).unwrap();
    assert_eq!((entry.from, entry.to), (Some(2), Some(5)), "{entry:?}");
    let warm_up = object_where(&client, n, "sched", "a sample", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.warm_up.as_ref())
            .is_some_and(|w| !w.samples.is_empty())
    })
    .await
    .status
    .and_then(|s| s.warm_up)
    .unwrap();
    assert_eq!(warm_up.basis, tdset_operator::api::LeadBasis::Measured);
    op.stop().await;
    ns.cleanup().await;
}
