//! `status.history` on the real API server: the changes of a workload's count, newest first,
//! each with its scheduled instant, when it landed (or why it did not), and `kubectl tdset
//! history` printing them with their lateness.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;
use tdset_operator::api::{HistoryEntry, TDSet};
use tdset_operator::clock::SystemClock;

async fn history(client: &kube::Client, ns: &str) -> Vec<HistoryEntry> {
    history_of(client, ns, "web").await
}

async fn history_of(client: &kube::Client, ns: &str, name: &str) -> Vec<HistoryEntry> {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .get_status(name)
        .await
        .ok()
        .and_then(|t| t.status)
        .map(|s| s.history)
        .unwrap_or_default()
}

#[tokio::test]
async fn history_keeps_each_change_its_instant_its_landing_and_its_failures() {
    let (client, ns) = setup("history").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("app", 2)).await;
    // Refused before the operator starts: the override's 5 will fail until it is lifted.
    let refuse = RefuseScale::new(&client, &ns.name, 5).await;
    // 09:59:50: the default now (1), the window from 10:00 (3), an override to 5 from 10:00:20
    // to 10:00:40, then the window again.
    let clock = SystemClock::starting_at(utc("2026-05-04T09:59:50Z"));
    let _op = Operator::start(&client, &ns.name, clock, None, "test");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "web",
            json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app"},
                "schedulingConfig": [{"startTime": "10:00", "endTime": "11:00", "replica": 3}],
                "defaultReplica": 1,
                "overrides": [{"start": "2026-05-04T10:00:20Z", "end": "2026-05-04T10:00:40Z",
                               "replica": 5, "reason": "launch"}],
            }),
        ),
    )
    .await;
    deployment_at(&client, &ns.name, "app", 1).await;
    deployment_at(&client, &ns.name, "app", 3).await;

    // The override's write is refused: recorded as failed, with the API server's reason.
    let failed = eventually(GUARD, "a failed change in status.history", || async {
        let h = history(&client, &ns.name).await;
        h.first().filter(|e| e.applied_at.is_none()).cloned()
    })
    .await;
    assert_eq!(failed.at, "2026-05-04T10:00:20Z");
    assert_eq!((failed.from, failed.to), (Some(3), Some(5)));
    let message = failed.message.clone().unwrap_or_default();
    assert!(
        message.contains("the test refuses 5 replicas"),
        "{failed:?}"
    );

    // Lifted: the retry lands, in the same entry, which keeps the failure it overcame.
    refuse.lift().await;
    deployment_at(&client, &ns.name, "app", 5).await;
    deployment_at(&client, &ns.name, "app", 3).await;
    let h = eventually(GUARD, "the override's end in status.history", || async {
        let h = history(&client, &ns.name).await;
        (h.len() >= 4 && h[0].at == "2026-05-04T10:00:40Z").then_some(h)
    })
    .await;
    eprintln!("{h:#?}");
    let at: Vec<&str> = h.iter().map(|e| e.at.as_str()).collect();
    assert_eq!(
        at[..3],
        [
            "2026-05-04T10:00:40Z",
            "2026-05-04T10:00:20Z",
            "2026-05-04T10:00:00Z"
        ],
        "newest first"
    );
    let counts: Vec<(Option<i32>, Option<i32>)> = h[..4].iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(
        counts,
        [
            (Some(5), Some(3)),
            (Some(3), Some(5)),
            (Some(1), Some(3)),
            (Some(2), Some(1))
        ]
    );
    assert!(h[0].reason.contains("window"), "{:?}", h[0]);
    assert!(h[1].reason.contains("launch"), "{:?}", h[1]);
    assert!(
        h[1].message
            .as_deref()
            .unwrap_or_default()
            .contains("refuses"),
        "{:?}",
        h[1]
    );
    assert!(h[..4].iter().all(|e| e.applied_at.is_some()), "{h:?}");
    // Landed after its instant, never before.
    for e in &h[..3] {
        let (at, applied) = (utc(&e.at), utc(e.applied_at.as_deref().unwrap()));
        assert!(applied >= at, "{e:?}");
    }
    assert!(h.len() <= tdset_operator::api::MAX_HISTORY);

    // `kubectl tdset history` prints them, with the lateness of each.
    let dir = plugin_dir();
    let (ok, out, err) = kubectl_tdset(&dir, &["history", "web", "-n", &ns.name]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("AT") && lines[0].contains("LATE"),
        "{out}"
    );
    assert!(lines[1].starts_with("2026-05-04T10:00:40Z"), "{out}");
    assert!(out.contains("launch"), "{out}");
    ns.cleanup().await;
}

#[tokio::test]
async fn history_records_ramp_steps_and_keeps_only_the_last_ten_changes() {
    let (client, ns) = setup("history-ten").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("ramped", 1)).await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("busy", 1)).await;
    // 09:58:55: a window from 10:00 at 4, reached by a ramp of one replica a minute; and a
    // TDSet whose overrides change its count every 2 s, twelve times.
    let start = utc("2026-05-04T09:58:55Z");
    let _op = Operator::start(
        &client,
        &ns.name,
        SystemClock::starting_at(start),
        None,
        "test",
    );
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "ramped",
            json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ramped"},
                "schedulingConfig": [{"startTime": "10:00", "endTime": "11:00", "replica": 4}],
                "defaultReplica": 1,
                "ramp": {"step": 1, "every": "1m", "direction": "Up"},
            }),
        ),
    )
    .await;
    let overrides: Vec<_> = (0..12)
        .map(|i| {
            let from = start + chrono::Duration::seconds(10 + 2 * i);
            json!({"start": from.to_rfc3339(), "end": (from + chrono::Duration::seconds(2)).to_rfc3339(),
                   "replica": 2 + i % 2, "reason": format!("burst {i}")})
        })
        .collect();
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "busy",
            json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "busy"},
                "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 7}],
                "defaultReplica": 1,
                "overrides": overrides,
            }),
        ),
    )
    .await;

    // A ramp up reaches the window's count at its start, one step a minute: the operator,
    // started mid-ramp, sets the step due (1 -> 2), the step at 09:59 follows (2 -> 3), then the
    // window's start (3 -> 4); each is a change of its own, at its own instant.
    let h = eventually(
        2 * GUARD,
        "the window's start in status.history",
        || async {
            let h = history_of(&client, &ns.name, "ramped").await;
            h.first()
                .filter(|e| e.at == "2026-05-04T10:00:00Z")
                .map(|_| h.clone())
        },
    )
    .await;
    assert_eq!((h[0].from, h[0].to), (Some(3), Some(4)), "{h:#?}");
    assert_eq!(h[1].at, "2026-05-04T09:59:00Z", "{h:#?}");
    assert_eq!((h[1].from, h[1].to), (Some(2), Some(3)), "{h:#?}");
    assert!(h[1].reason.contains("ramping up toward 4"), "{h:#?}");
    assert_eq!((h[2].from, h[2].to), (Some(1), Some(2)), "{h:#?}");

    // Twelve overrides and their end: 13 changes, of which the last ten are kept, newest first.
    let h = eventually(
        GUARD,
        "the last override's end in status.history",
        || async {
            let h = history_of(&client, &ns.name, "busy").await;
            h.first()
                .filter(|e| e.reason.contains("defaultReplica") && e.at == "2026-05-04T09:59:29Z")
                .map(|_| h.clone())
        },
    )
    .await;
    assert_eq!(h.len(), tdset_operator::api::MAX_HISTORY, "{h:#?}");
    let at: Vec<&str> = h.iter().map(|e| e.at.as_str()).collect();
    let mut newest_first = at.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(at, newest_first, "{h:#?}");
    assert!(h[1].reason.contains("burst 11"), "{h:#?}");
    assert!(
        !h.iter().any(|e| e.reason.contains("burst 0")),
        "the oldest were dropped: {h:#?}"
    );
    ns.cleanup().await;
}
