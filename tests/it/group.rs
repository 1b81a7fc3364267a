//! The group form (`scaleTargetSelector`) on the real API server, with kube-controller-manager
//! running the Deployment, StatefulSet, CronJob and HPA controllers: a whole namespace put to
//! sleep and woken with one TDSet, each workload's own count recorded on it and given back.
//! The operator runs in-process; its clock starts at `T0` and runs at real speed, so the
//! overrides below start and end a few seconds into each test.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::CronJob;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::{Clock, SystemClock};

const T0: &str = "2026-05-01T12:00:00Z";

fn clock() -> SystemClock {
    SystemClock::starting_at(utc(T0))
}

/// `T0` plus `secs`, as RFC 3339.
fn at(secs: i64) -> String {
    (utc(T0) + chrono::Duration::seconds(secs)).to_rfc3339()
}

/// A group TDSet over `env: dev`: asleep (0) from `T0+from` to `T0+to`, each workload's own
/// count otherwise (no defaultReplica: the level `own`).
fn sleep_group(kinds: Value, exclude: Value, from: i64, to: i64) -> Value {
    json!({
        "scaleTargetSelector": {"kinds": kinds, "selector": {"matchLabels": {"env": "dev"}}, "exclude": exclude},
        "schedulingConfig": [],
        "overrides": [{"start": at(from), "end": at(to), "replica": 0, "reason": "night"}],
        "intervalMint": 60
    })
}

/// Moves the night of `sleep_group` TDSet `name` (its one override) to start and/or end
/// `secs` from the operator's `now`, so that a test sees the state before a boundary whatever
/// the machine's speed, and the boundary is still crossed by the operator's own wakeup. (A
/// night fixed from the clock's start closes in real time: on a machine slow enough, the
/// operator's first reconcile, or the test's look, comes after it.)
async fn move_night(
    client: &Client,
    ns: &str,
    name: &str,
    now: chrono::DateTime<chrono::Utc>,
    start_in: Option<i64>,
    end_in: Option<i64>,
) {
    let api: Api<TDSet> = Api::namespaced(client.clone(), ns);
    let t = api.get(name).await.expect("the TDSet");
    let mut overrides = serde_json::to_value(&t.spec.overrides).expect("overrides");
    let instant = |secs: i64| json!((now + chrono::Duration::seconds(secs)).to_rfc3339());
    if let Some(secs) = start_in {
        overrides[0]["start"] = instant(secs);
    }
    if let Some(secs) = end_in {
        overrides[0]["end"] = instant(secs);
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"overrides": overrides}})),
    )
    .await
    .expect("moving the night");
}

/// Creates `sleep_group` TDSet `name` over the namespace's `env: dev` Deployments.
pub(crate) async fn create_deployment_group(
    client: &Client,
    ns: &str,
    name: &str,
    from: i64,
    to: i64,
) {
    let spec = sleep_group(json!(["Deployment"]), json!([]), from, to);
    create_tdset(client, ns, &tdset(name, spec)).await;
}

pub(crate) fn labelled(mut object: Value, env: &str) -> Value {
    object["metadata"]["labels"]["env"] = json!(env);
    object
}

fn statefulset(name: &str, replicas: i32) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "redis:7"}]}}}
    })
}

fn cronjob(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"schedule": "0 3 * * *",
                 "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "job", "image": "busybox", "command": ["true"]}]}}}}}
    })
}

fn hpa(name: &str, target: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}
    })
}

/// What the operator must never change on a workload it may not write: everything but what
/// the API server and controllers keep changing (status, and who wrote it), after checking
/// that the operator's field manager wrote nothing.
fn untouchable(mut v: Value) -> Value {
    let managers: Vec<&str> = v["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        !managers.contains(&"tdset-operator"),
        "written by the operator: {managers:?}"
    );
    for path in [
        "/metadata/resourceVersion",
        "/metadata/managedFields",
        "/status",
    ] {
        if let Some((parent, key)) = path.rsplit_once('/')
            && let Some(Value::Object(m)) = v.pointer_mut(parent)
        {
            m.remove(key);
        }
    }
    if let Some(Value::Object(a)) = v.pointer_mut("/metadata/annotations") {
        a.remove("deployment.kubernetes.io/revision");
    }
    v
}

/// A workload as JSON, as read now.
async fn json_of<K>(client: &Client, ns: &str, name: &str) -> Value
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + serde::Serialize
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let o: K = Api::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("reading a workload");
    serde_json::to_value(o).expect("a workload as JSON")
}

fn annotations(o: &impl ResourceExt) -> BTreeMap<String, String> {
    o.annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("schedule.rs/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn record(holder: &str, own: i32, scheduled: i32) -> BTreeMap<String, String> {
    [
        ("schedule.rs/held-by", holder.to_string()),
        ("schedule.rs/own-replicas", own.to_string()),
        ("schedule.rs/scheduled-replicas", scheduled.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

async fn cronjob_suspended(client: &Client, ns: &str, name: &str, suspended: bool) -> CronJob {
    object_where(
        client,
        ns,
        name,
        &format!("CronJob {name} suspend={suspended}"),
        |c: &CronJob| c.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false) == suspended,
    )
    .await
}

async fn statefulset_at(client: &Client, ns: &str, name: &str, want: i32) -> StatefulSet {
    object_where(
        client,
        ns,
        name,
        &format!("StatefulSet {name} at {want}"),
        |s: &StatefulSet| s.spec.as_ref().and_then(|s| s.replicas) == Some(want),
    )
    .await
}

/// Sets `spec.replicas` the way `helm upgrade` does: a patch under another field manager.
async fn helm_sets(client: &Client, ns: &str, name: &str, replicas: i32) {
    let pp = PatchParams {
        field_manager: Some("helm".into()),
        ..PatchParams::default()
    };
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &pp,
            &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("helm's patch");
}

#[tokio::test]
async fn a_namespace_sleeps_at_the_boundary_and_every_workload_wakes_at_its_own_count() {
    let (client, ns) = setup("group-sleep").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 5), "dev")).await;
    let _: Deployment = create_object(
        &client,
        n,
        labelled(app_deployment("db-migrator", 1), "dev"),
    )
    .await;
    let _: Deployment =
        create_object(&client, n, labelled(app_deployment("prod-api", 2), "prod")).await;
    let _: Deployment =
        create_object(&client, n, labelled(app_deployment("scaled", 2), "dev")).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("scaled", "scaled")).await;
    let _: StatefulSet = create_object(&client, n, labelled(statefulset("cache", 2), "dev")).await;
    let _: CronJob = create_object(&client, n, labelled(cronjob("report"), "dev")).await;
    let excluded = json_of::<Deployment>(&client, n, "db-migrator").await;
    let unselected = json_of::<Deployment>(&client, n, "prod-api").await;

    let kinds = json!(["Deployment", "StatefulSet", "CronJob"]);
    // The night an hour ahead until the test has seen the day (moved below).
    create_tdset(
        &client,
        n,
        &tdset(
            "night",
            sleep_group(kinds, json!(["db-migrator"]), 3600, 7200),
        ),
    )
    .await;
    let clock = clock();
    let op = Operator::start(&client, n, clock, None, "test");

    // Before the boundary: the level is own, and nothing is written.
    let t: TDSet = object_where(
        &client,
        n,
        "night",
        "the group's first status",
        |t: &TDSet| t.status.as_ref().and_then(|s| s.group.as_ref()).is_some(),
    )
    .await;
    let g = t.status.unwrap().group.unwrap();
    assert_eq!(
        (g.matched, g.excluded, g.conflicting, g.targets.as_str()),
        (6, 1, 0, "5/5")
    );
    assert!(annotations(&deployment_at(&client, n, "api", 3).await).is_empty());

    // The boundary, 3 s from now: every selected workload sleeps, its own count recorded on it.
    move_night(&client, n, "night", clock.now(), Some(3), None).await;
    let api = deployment_at(&client, n, "api", 0).await;
    assert_eq!(annotations(&api), record("night", 3, 0));
    assert_eq!(
        annotations(&deployment_at(&client, n, "web", 0).await),
        record("night", 5, 0)
    );
    deployment_at(&client, n, "scaled", 0).await;
    let cache = statefulset_at(&client, n, "cache", 0).await;
    assert_eq!(annotations(&cache), record("night", 2, 0));
    let report = cronjob_suspended(&client, n, "report", true).await;
    assert_eq!(
        annotations(&report)
            .get("schedule.rs/own-suspend")
            .map(String::as_str),
        Some("false")
    );

    // The end, 3 s from now: each gets exactly its own count back, and nothing of the TDSet's
    // stays on it.
    move_night(&client, n, "night", clock.now(), None, Some(3)).await;
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    deployment_at(&client, n, "web", 5).await;
    deployment_at(&client, n, "scaled", 2).await;
    assert!(annotations(&statefulset_at(&client, n, "cache", 2).await).is_empty());
    let report = cronjob_suspended(&client, n, "report", false).await;
    assert!(annotations(&report).is_empty());

    // Never written: the excluded one and the one the selector does not match.
    assert_eq!(
        untouchable(json_of::<Deployment>(&client, n, "db-migrator").await),
        untouchable(excluded)
    );
    assert_eq!(
        untouchable(json_of::<Deployment>(&client, n, "prod-api").await),
        untouchable(unselected)
    );
    for reason in ["ScaledDown", "Restored"] {
        wait_for_event(&client, n, "night", |(_, r, _)| r == reason).await;
    }
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn joining_leaving_and_someone_elses_change_during_the_night_then_deletion_restores_all() {
    let (client, ns) = setup("group-join").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 2), "dev")).await;
    create_deployment_group(&client, n, "night", 3, 3600).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "api", 0).await;
    deployment_at(&client, n, "web", 0).await;

    // Created during the night with the group's labels: it sleeps at once, not at a boundary.
    let _: Deployment = create_object(&client, n, labelled(app_deployment("late", 4), "dev")).await;
    let late = deployment_at(&client, n, "late", 0).await;
    assert_eq!(annotations(&late), record("night", 4, 0));
    wait_for_event(&client, n, "night", |(_, reason, note)| {
        reason == "Joined" && note.contains("late")
    })
    .await;

    // Its label removed: it is no longer the group's, and gets its own count back.
    Api::<Deployment>::namespaced(client.clone(), n)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"env": "qa"}}})),
        )
        .await
        .expect("relabelling api");
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty());
    wait_for_event(&client, n, "night", |(_, reason, note)| {
        reason == "Left" && note.contains("api") && note.contains("no longer matches")
    })
    .await;

    // A Helm upgrade sets 7 during the night: back to sleep, and 7 is its own count now.
    helm_sets(&client, n, "web", 7).await;
    let web = object_where(
        &client,
        n,
        "web",
        "web asleep again, owning 7",
        |d: &Deployment| replicas(d) == Some(0) && annotations(d) == record("night", 7, 0),
    )
    .await;
    assert_eq!(replicas(&web), Some(0));
    wait_for_event(&client, n, "night", |(_, reason, _)| {
        reason == "ChangedElsewhere"
    })
    .await;

    // Deleted during the night: every workload it holds gets its true own count back.
    delete_tdset_and_wait(&client, n, "night").await;
    for (name, own) in [("web", 7), ("late", 4), ("api", 3)] {
        let d = deployment_at(&client, n, name, own).await;
        assert!(annotations(&d).is_empty(), "{name}: {:?}", annotations(&d));
    }
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn an_operator_killed_mid_boundary_loses_no_own_count() {
    let (client, ns) = setup("group-crash").await;
    let n = &ns.name;
    let own: Vec<(String, i32)> = (0..24).map(|i| (format!("w{i:02}"), 1 + i % 7)).collect();
    for (name, count) in &own {
        let _: Deployment =
            create_object(&client, n, labelled(app_deployment(name, *count), "dev")).await;
    }
    create_deployment_group(&client, n, "night", 4, 3600).await;
    let op = Operator::start(&client, n, clock(), None, "first");
    // Killed as soon as the first workload is asleep, with the others still being written.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), n);
    eventually(GUARD, "a first workload asleep", || async {
        let list = deployments.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|d| replicas(d) == Some(0))
            .then_some(())
    })
    .await;
    op.kill();
    let asleep = deployments
        .list(&Default::default())
        .await
        .expect("listing")
        .items
        .iter()
        .filter(|d| replicas(d) == Some(0))
        .count();
    eprintln!("killed with {asleep} of {} asleep", own.len());

    // A new operator finishes the night; its clock is a little earlier, still inside it.
    let op = Operator::start(&client, n, clock(), None, "second");
    for (name, _) in &own {
        deployment_at(&client, n, name, 0).await;
    }
    delete_tdset_and_wait(&client, n, "night").await;
    for (name, count) in &own {
        let d = deployment_at(&client, n, name, *count).await;
        assert!(annotations(&d).is_empty(), "{name}");
    }
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn overlapping_groups_have_one_holder_and_deleting_it_hands_the_workload_over() {
    let (client, ns) = setup("group-overlap").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    let mut older = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    older["overrides"][0]["replica"] = json!(0);
    create_tdset(&client, n, &tdset("a-older", older)).await;
    // Created a second later, so its claim is younger whatever the names.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut younger = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    younger["overrides"][0]["replica"] = json!(1);
    create_tdset(&client, n, &tdset("b-younger", younger)).await;
    let op = Operator::start(&client, n, clock(), None, "test");

    let api = deployment_at(&client, n, "api", 0).await;
    assert_eq!(annotations(&api), record("a-older", 3, 0));
    let b = tdset_with_reason(&client, n, "b-younger", "Degraded", "ConflictingTDSet").await;
    let message = &condition(&b, "Degraded").unwrap().message;
    assert!(
        message.contains("api") && message.contains("a-older"),
        "{message}"
    );
    assert_eq!(
        b.status
            .as_ref()
            .unwrap()
            .group
            .as_ref()
            .unwrap()
            .conflicting,
        1
    );

    // The holder goes: the other takes the workload over, keeping its true own count.
    Api::<TDSet>::namespaced(client.clone(), n)
        .delete("a-older", &DeleteParams::default())
        .await
        .expect("deleting the holder");
    let api = object_where(
        &client,
        n,
        "api",
        "api held by b-younger at 1",
        |d: &Deployment| replicas(d) == Some(1) && annotations(d) == record("b-younger", 3, 1),
    )
    .await;
    assert_eq!(replicas(&api), Some(1));
    delete_tdset_and_wait(&client, n, "b-younger").await;
    deployment_at(&client, n, "api", 3).await;
    op.stop().await;
    ns.cleanup().await;
}

/// A Deployment of `env: dev` whose pods request 100m CPU and 64Mi each.
fn priced(name: &str, replicas: i32) -> Value {
    let mut d = labelled(app_deployment(name, replicas), "dev");
    d["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
    d
}

#[tokio::test]
async fn preview_lists_the_workloads_wake_gives_them_back_and_savings_count_what_sleeps() {
    let (client, ns) = setup("group-plugin").await;
    let n = &ns.name;
    let dir = plugin_dir();
    let _: Deployment = create_object(&client, n, priced("api", 3)).await;
    let _: Deployment = create_object(&client, n, priced("web", 5)).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("db", 1), "dev")).await;
    // Ahead of real time (the plugin refuses overrides that end in the past): tomorrow noon,
    // asleep for an hour.
    let date = (chrono::Utc::now() + chrono::Duration::days(1)).date_naive();
    let t1 = utc(&format!("{}T12:00:00Z", date.format("%Y-%m-%d")));
    let spec = json!({
        "scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}, "exclude": ["db"]},
        "schedulingConfig": [{"name": "lunch", "startTime": "12:00", "endTime": "13:00", "replica": 0}],
        "intervalMint": 60
    });
    create_tdset(&client, n, &tdset("night", spec)).await;
    let op = Operator::start(
        &client,
        n,
        SystemClock::starting_at(t1 + chrono::Duration::seconds(5)),
        None,
        "test",
    );
    deployment_at(&client, n, "api", 0).await;
    deployment_at(&client, n, "web", 0).await;

    // What sleeping saves: 8 replicas, their pods' requests (db, excluded, saves nothing).
    let t: TDSet = object_where(&client, n, "night", "savings of 8 replicas", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.savings.as_ref())
            .is_some_and(|s| s.replicas == 8)
    })
    .await;
    let s = t.status.unwrap().savings.unwrap();
    assert_eq!((s.cpu.as_str(), s.memory.as_str()), ("0.8", "512Mi"));
    eventually(GUARD, "the savings metrics", || async {
        (op.counter("tdset_saved_replicas") == 8.0
            && (op.counter("tdset_saved_cpu_cores") - 0.8).abs() < 1e-9
            && op.counter("tdset_saved_memory_bytes") == 536_870_912.0)
            .then_some(())
    })
    .await;
    let (ok, out, err) = kubectl_tdset(&dir, &["savings", "-n", n]);
    assert!(ok, "{err}");
    let night = out
        .lines()
        .find(|l| l.contains("night"))
        .unwrap_or_default();
    assert!(
        night.contains("group") && night.contains("0.8") && night.contains("512Mi"),
        "{out}"
    );
    let total = out
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_default();
    assert!(total.contains(" 8 ") && total.contains("512.0Mi"), "{out}");

    // The preview of the live group: the level, and each workload's next count.
    let at = (t1 + chrono::Duration::minutes(10)).to_rfc3339();
    let (ok, out, err) = kubectl_tdset(
        &dir,
        &["preview", "night", "-n", n, "--at", &at, "-o", "json"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["desiredReplicas"], 0);
    assert_eq!(
        (v["nextReplicas"].clone(), v["nextOwn"].clone()),
        (Value::Null, json!(true))
    );
    let workloads: Vec<(String, String, String, Option<String>)> = v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                w["now"].as_str().unwrap().to_string(),
                w["own"].as_str().unwrap().to_string(),
                w["next"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        workloads,
        [
            ("api".into(), "0".into(), "3".into(), Some("3".into())),
            ("db".into(), "1".into(), "1".into(), None),
            ("web".into(), "0".into(), "5".into(), Some("5".into())),
        ]
    );
    let later = (t1 + chrono::Duration::hours(2)).to_rfc3339();
    let (ok, out, err) = kubectl_tdset(&dir, &["preview", "night", "-n", n, "--at", &later]);
    assert!(ok, "{err}");
    assert!(out.contains("replicas:  own"), "{out}");
    assert!(out.contains("workloads matched: 3"), "{out}");

    // Woken by hand (an override to own): each gets its own count back, and saves nothing.
    let from = (t1 + chrono::Duration::seconds(15)).to_rfc3339();
    let (ok, out, err) = kubectl_tdset(
        &dir,
        &["wake", "night", "-n", n, "--from", &from, "--for", "30m"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("awake"), "{out}");
    deployment_at(&client, n, "api", 3).await;
    deployment_at(&client, n, "web", 5).await;
    object_where(&client, n, "night", "savings back to 0", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.savings.as_ref())
            .is_some_and(|s| s.replicas == 0)
    })
    .await;
    // wake is for groups only.
    create_tdset(
        &client,
        n,
        &tdset(
            "single",
            json!({
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "db"},
                "schedulingConfig": [], "defaultReplica": 1
            }),
        ),
    )
    .await;
    let (ok, _, err) = kubectl_tdset(&dir, &["wake", "single", "-n", n, "--for", "1h"]);
    assert!(!ok && err.contains("override single --replicas"), "{err}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_scale_target_ref_yields_to_an_older_group_and_takes_over_when_it_goes() {
    let (client, ns) = setup("group-ref").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    create_deployment_group(&client, n, "group", 2, 3600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
        "schedulingConfig": [], "defaultReplica": 2, "intervalMint": 60
    });
    create_tdset(&client, n, &tdset("single", single)).await;
    let op = Operator::start(&client, n, clock(), None, "test");

    deployment_at(&client, n, "api", 0).await;
    let t = tdset_with_reason(&client, n, "single", "Degraded", "ConflictingTDSet").await;
    let message = &condition(&t, "Degraded").unwrap().message;
    assert!(message.contains("group"), "{message}");
    // Held by the group all along: never written by the other.
    assert_eq!(
        annotations(&deployment_at(&client, n, "api", 0).await),
        record("group", 3, 0)
    );

    delete_tdset_and_wait(&client, n, "group").await;
    let api = deployment_at(&client, n, "api", 2).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

/// api (own 3) asleep in a group, then taken over by an older `scaleTargetRef` TDSet
/// "single" (at `level`) that pointed elsewhere until now; returns once "single" recorded
/// api's own count and the group yields.
async fn older_ref_takes_a_sleeping_workload(client: &Client, n: &str, level: i32) -> Operator {
    let _: Deployment = create_object(client, n, labelled(app_deployment("api", 3), "dev")).await;
    let _: Deployment = create_object(client, n, app_deployment("other", 1)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
        "schedulingConfig": [], "defaultReplica": level, "intervalMint": 60, "onDelete": "Restore"
    });
    // The older claim, pointing elsewhere at first.
    create_tdset(client, n, &tdset("single", single)).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    create_deployment_group(client, n, "group", 2, 3600).await;
    let op = Operator::start(client, n, clock(), None, "test");
    let api = deployment_at(client, n, "api", 0).await;
    assert_eq!(annotations(&api), record("group", 3, 0));

    // The older TDSet now points at the sleeping workload: it holds it, and what it will give
    // back is the workload's own 3, not the 0 the group put it to sleep at.
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "single",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetRef": {"name": "api"}}})),
        )
        .await
        .expect("pointing the older TDSet at the sleeping workload");
    deployment_at(client, n, "api", level).await;
    assert_eq!(original_recorded(client, n, "single", "api").await, 3);
    tdset_with_reason(client, n, "group", "Degraded", "ConflictingTDSet").await;
    op
}

#[tokio::test]
async fn an_older_scale_target_ref_taking_a_sleeping_workload_over_records_its_own_count() {
    let (client, ns) = setup("group-takeover").await;
    let n = &ns.name;
    let op = older_ref_takes_a_sleeping_workload(&client, n, 2).await;
    // Both go, the group first: the workload ends at its own count, not asleep.
    for name in ["group", "single"] {
        delete_tdset_and_wait(&client, n, name).await;
    }
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_group_letting_go_of_a_workload_another_tdset_holds_only_takes_its_record_off() {
    let (client, ns) = setup("group-handed").await;
    let n = &ns.name;
    // The older claim sleeps api too (0).
    let op = older_ref_takes_a_sleeping_workload(&client, n, 0).await;
    // The group goes while the other TDSet holds api at 0, the value the group's record says
    // it set: the group takes its record off and never gives api its 3 over the holder.
    let counts = replicas_over(&client, n, "api", std::time::Duration::from_secs(10));
    delete_tdset_and_wait(&client, n, "group").await;
    let counts = counts.await.expect("watching api");
    assert!(counts.iter().all(|c| *c == 0), "api asked for {counts:?}");
    let api = deployment_at(&client, n, "api", 0).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    // Its holder gives it its own count back.
    delete_tdset_and_wait(&client, n, "single").await;
    deployment_at(&client, n, "api", 3).await;
    op.stop().await;
    ns.cleanup().await;
}

/// api (own 3) held at `level` by a younger `scaleTargetRef` TDSet "single", then labelled
/// into an older group "group" (asleep): the group holds it, and the own count it records is
/// api's 3 (what "single" recorded), not the count "single" set.
async fn older_group_takes_from_younger_ref(client: &Client, n: &str, level: i32) -> Operator {
    let _: Deployment = create_object(client, n, app_deployment("api", 3)).await;
    // The older claim, a group that does not select api yet.
    create_deployment_group(client, n, "group", 2, 3600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let single = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
        "schedulingConfig": [], "defaultReplica": level, "intervalMint": 60, "onDelete": "Restore"
    });
    create_tdset(client, n, &tdset("single", single)).await;
    let op = Operator::start(client, n, clock(), None, "test");
    deployment_at(client, n, "api", level).await;
    assert_eq!(original_recorded(client, n, "single", "api").await, 3);
    Api::<Deployment>::namespaced(client.clone(), n)
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
        )
        .await
        .expect("labelling api into the group");
    let held = |d: &Deployment| annotations(d).contains_key("schedule.rs/held-by");
    let api: Deployment = object_where(client, n, "api", "api held by the group", held).await;
    assert_eq!(annotations(&api), record("group", 3, 0));
    assert_eq!(replicas(&api), Some(0));
    tdset_with_reason(client, n, "single", "Degraded", "ConflictingTDSet").await;
    op
}

#[tokio::test]
async fn an_older_group_taking_a_workload_from_a_younger_scale_target_ref_records_its_own_count() {
    let (client, ns) = setup("group-takes").await;
    let n = &ns.name;
    let op = older_group_takes_from_younger_ref(&client, n, 2).await;
    // The group goes: the younger TDSet takes api over again.
    delete_tdset_and_wait(&client, n, "group").await;
    let api = deployment_at(&client, n, "api", 2).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_group_and_the_tdset_it_took_a_workload_from_deleted_together_give_its_own_count_back() {
    let (client, ns) = setup("group-both-go").await;
    let n = &ns.name;
    // Both sleep api (0): neither may leave it to the other as they both go.
    let op = older_group_takes_from_younger_ref(&client, n, 0).await;
    let tdsets = Api::<TDSet>::namespaced(client.clone(), n);
    for name in ["single", "group"] {
        tdsets
            .delete(name, &DeleteParams::default())
            .await
            .expect("deleting a TDSet");
    }
    for name in ["single", "group"] {
        tdset_gone(&client, n, name).await;
    }
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn an_autoscaled_workloads_count_is_its_hpas_floor_and_the_floor_is_given_back() {
    let (client, ns) = setup("group-hpa").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("auto", 2), "dev")).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("auto", "auto")).await;
    // An HPA another controller makes and keeps (as KEDA's ScaledObject does): its floor is
    // that controller's, never the group's.
    let owner: k8s_openapi::api::core::v1::ConfigMap =
        create_object(&client, n, json!({"metadata": {"name": "scaledobject"}})).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("keda", 2), "dev")).await;
    let mut owned = hpa("keda", "keda");
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "scaledobject",
        "uid": owner.metadata.uid, "controller": true
    }]);
    let _: HorizontalPodAutoscaler = create_object(&client, n, owned).await;
    let keda_hpa = json_of::<HorizontalPodAutoscaler>(&client, n, "keda").await;
    // (Until the test moves its end.)
    let mut spec = sleep_group(json!(["Deployment"]), json!([]), 3, 3600);
    spec["overrides"][0]["replica"] = json!(4);
    create_tdset(&client, n, &tdset("busy", spec)).await;
    let clock = clock();
    let op = Operator::start(&client, n, clock, None, "test");

    let floor = |want: i32| {
        move |h: &HorizontalPodAutoscaler| {
            h.spec.as_ref().and_then(|s| s.min_replicas) == Some(want)
        }
    };
    let h = object_where(&client, n, "auto", "the HPA's floor at 4", floor(4)).await;
    let recorded = annotations(&h);
    assert_eq!(
        recorded
            .get("schedule.rs/own-min-replicas")
            .map(String::as_str),
        Some("2")
    );
    // The workload of a controller-owned HPA is that controller's: never written, and the
    // status names who holds it.
    let t: TDSet = object_where(
        &client,
        n,
        "busy",
        "keda counted as held elsewhere",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.conflicting == 1)
        },
    )
    .await;
    let status = t.status.unwrap();
    let g = status.group.unwrap();
    assert_eq!((g.matched, g.targets.as_str()), (2, "1/1"), "{g:?}");
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        degraded
            .contains("ConfigMap scaledobject, the controller of its HorizontalPodAutoscaler keda"),
        "{degraded}"
    );
    // The HPA, not the operator, scales the workload up to its new floor.
    let d = deployment_at(&client, n, "auto", 4).await;
    let managers: Vec<String> = d
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.contains(&"tdset-operator".to_string()),
        "{managers:?}"
    );

    // own again, 3 s from now: the floor given back, nothing of the TDSet's left on the HPA.
    move_night(&client, n, "busy", clock.now(), None, Some(3)).await;
    let h = object_where(&client, n, "auto", "the HPA's floor back at 2", floor(2)).await;
    assert!(annotations(&h).is_empty(), "{:?}", annotations(&h));
    assert_eq!(
        untouchable(json_of::<HorizontalPodAutoscaler>(&client, n, "keda").await),
        untouchable(keda_hpa)
    );
    let managers = |d: Deployment| -> Vec<String> {
        d.metadata
            .managed_fields
            .into_iter()
            .flatten()
            .filter_map(|m| m.manager)
            .collect()
    };
    let keda = managers(deployment_at(&client, n, "keda", 2).await);
    assert!(!keda.contains(&"tdset-operator".to_string()), "{keda:?}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_scale_target_ref_on_an_hpa_a_group_holds_records_its_own_floor() {
    let (client, ns) = setup("group-hpa-ref").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("auto", 2), "dev")).await;
    let _: HorizontalPodAutoscaler = create_object(&client, n, hpa("auto", "auto")).await;
    let mut spec = sleep_group(json!(["Deployment"]), json!([]), 2, 3600);
    spec["overrides"][0]["replica"] = json!(4);
    create_tdset(&client, n, &tdset("busy", spec)).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    let floor = |want: i32| {
        move |h: &HorizontalPodAutoscaler| {
            h.spec.as_ref().and_then(|s| s.min_replicas) == Some(want)
        }
    };
    object_where(&client, n, "auto", "the group's floor of 4", floor(4)).await;

    // A TDSet that schedules the HPA itself holds it; the floor it records as the HPA's own is
    // 2, from the group's record, not the group's 4.
    let single = json!({
        "scaleTargetRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "auto"},
        "schedulingConfig": [], "defaultReplica": 3, "intervalMint": 60, "onDelete": "Restore"
    });
    create_tdset(&client, n, &tdset("single", single)).await;
    object_where(&client, n, "auto", "the TDSet's floor of 3", floor(3)).await;
    assert_eq!(original_recorded(&client, n, "single", "auto").await, 2);
    op.stop().await;
    ns.cleanup().await;
}

/// The counts Deployment `name` asks for over `window`, from a watch started now.
fn replicas_over(
    client: &Client,
    ns: &str,
    name: &str,
    window: std::time::Duration,
) -> tokio::task::JoinHandle<Vec<i32>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut changes = watcher(api, config).applied_objects().boxed();
        let _ = tokio::time::timeout(window, async {
            while let Some(Ok(d)) = changes.next().await {
                seen.extend(d.spec.and_then(|s| s.replicas));
            }
        })
        .await;
        seen
    })
}

/// The original count TDSet `name` records for its target `target`, once it records one.
async fn original_recorded(client: &Client, ns: &str, name: &str, target: &str) -> i32 {
    let recorded = |t: &TDSet| {
        let recorded = t.status.as_ref()?.target.as_ref()?;
        (recorded.name == target).then_some(recorded.original_replicas)?
    };
    let t = object_where(client, ns, name, "its original recorded", |t: &TDSet| {
        recorded(t).is_some()
    })
    .await;
    recorded(&t).unwrap_or_default()
}

/// TDSet `name` leaves the group form: it now scales Deployment `other` (to 2 by default).
async fn to_another_form(client: &Client, ns: &str, name: &str) {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "scaleTargetSelector": null,
                "defaultReplica": 2,
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"}
            }})),
        )
        .await
        .expect("changing the TDSet's form");
}

/// Widget `w` of the test CRD, labelled `env: dev`, at 3.
async fn dev_widget(client: &Client, ns: &str) -> Api<kube::api::DynamicObject> {
    let widgets = install_widget_crd(client).await;
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &widgets);
    let widget: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.schedule.rs/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"env": "dev"}}, "spec": {"replicas": 3}
    }))
    .unwrap();
    api.create(&Default::default(), &widget).await.unwrap();
    api
}

#[tokio::test]
async fn a_custom_kind_with_scale_sleeps_through_its_scale_subresource_and_keeps_its_record() {
    let (client, ns) = setup("group-custom").await;
    let n = &ns.name;
    let api = dev_widget(&client, n).await;
    let kinds = json!(["Widget.test.schedule.rs"]);
    create_tdset(
        &client,
        n,
        // (No morning: w is given back by the change of kinds.)
        &tdset("night", sleep_group(kinds, json!([]), 3, 3600)),
    )
    .await;
    let op = Operator::start(&client, n, clock(), None, "test");
    let replicas_and_record = |want: i64| {
        let api = api.clone();
        async move {
            let w = api.get("w").await.ok()?;
            (w.data.pointer("/spec/replicas") == Some(&json!(want))).then_some(annotations(&w))
        }
    };
    // The record first, the count through /scale next (the record says, until the count is
    // there, what a crash between the two would leave); then the record as for any workload.
    eventually(GUARD, "Widget w asleep, its own 3 recorded", || async {
        replicas_and_record(0)
            .await
            .filter(|r| *r == record("night", 3, 0))
    })
    .await;
    // The kind leaves `kinds` during the night: the TDSet remembered that it holds Widgets
    // (status.group.heldKinds) and gives w its own count back, without waiting for morning.
    let t: TDSet = Api::namespaced(client.clone(), n)
        .get("night")
        .await
        .unwrap();
    let held = t.status.and_then(|s| s.group).map(|g| g.held_kinds);
    assert_eq!(held, Some(vec!["Widget.test.schedule.rs".to_string()]));
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scaleTargetSelector": {"kinds": ["Deployment"]}}})),
        )
        .await
        .unwrap();
    // Given back in two requests (the count, then the record's removal): both land.
    eventually(GUARD, "Widget w back at 3, no record on it", || async {
        replicas_and_record(3).await.filter(|r| r.is_empty())
    })
    .await;
    let t: TDSet = object_where(
        &client,
        n,
        "night",
        "Widgets no longer remembered",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.held_kinds.is_empty())
        },
    )
    .await;
    assert_eq!(t.status.and_then(|s| s.group).map(|g| g.matched), Some(0));
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_group_left_for_another_form_keeps_what_it_could_not_give_back_until_it_can() {
    let (client, ns) = setup("group-form-change").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 3), "dev")).await;
    let _: Deployment = create_object(&client, n, app_deployment("other", 2)).await;
    create_deployment_group(&client, n, "night", 3, 600).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "api", 0).await;

    // An admission policy refuses api its own count back; meanwhile the TDSet takes another
    // form. The group stays in its status, and the TDSet says what it could not give back.
    let refuse = RefuseScale::new(&client, n, 3).await;
    to_another_form(&client, n, "night").await;
    let t: TDSet = object_where(
        &client,
        n,
        "night",
        "the refused release reported",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.group.is_some()
                    && s.conditions.iter().any(|c| {
                        c.type_ == "Degraded" && c.message.contains("the test refuses 3 replicas")
                    })
            })
        },
    )
    .await;
    // Its finalizer stays while it holds the group (its new form alone would not keep one):
    // a deletion now would still give api back.
    assert!(
        t.finalizers()
            .iter()
            .any(|f| f == "schedule.rs/restore-target"),
        "{:?}",
        t.finalizers()
    );
    assert!(t.status.unwrap().group.is_some());
    let api = deployment_at(&client, n, "api", 0).await;
    assert_eq!(annotations(&api)["schedule.rs/own-replicas"], "3");
    // The new form runs meanwhile.
    deployment_at(&client, n, "other", 0).await;

    // The policy lifted: api gets its own count back, and the group leaves the status.
    refuse.lift().await;
    let api = deployment_at(&client, n, "api", 3).await;
    assert!(annotations(&api).is_empty(), "{:?}", annotations(&api));
    object_where(
        &client,
        n,
        "night",
        "the group gone from the status",
        |t: &TDSet| t.status.as_ref().is_some_and(|s| s.group.is_none()),
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn a_workload_whose_writes_fail_does_not_hold_the_group_back_and_is_retried_with_backoff() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let (client, ns) = setup("group-webhook-down").await;
    let n = &ns.name;
    // A webhook nobody serves, failing closed, for one Deployment: its writes fail with 500.
    let webhook = format!("down-{n}");
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": webhook},
        "webhooks": [{
            "name": "down.test.schedule.rs",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                       "resources": ["deployments", "deployments/scale"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}},
            "objectSelector": {"matchLabels": {"webhook": "down"}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2
        }]
    }))
    .unwrap();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configs.create(&Default::default(), &config).await.unwrap();
    let _: Deployment = create_object(&client, n, labelled(app_deployment("ok", 3), "dev")).await;
    let mut broken = labelled(app_deployment("broken", 2), "dev");
    broken["metadata"]["labels"]["webhook"] = json!("down");
    let _: Deployment = create_object(&client, n, broken).await;
    create_deployment_group(&client, n, "night", 3, 600).await;
    let op = Operator::start(&client, n, clock(), None, "test");

    deployment_at(&client, n, "ok", 0).await;
    let t: TDSet = object_where(
        &client,
        n,
        "night",
        "the failed write reported",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.message.contains("failed calling webhook"))
            })
        },
    )
    .await;
    let g = t.status.unwrap().group.unwrap();
    assert_eq!(g.targets, "1/2", "{g:?}");
    assert!(
        g.not_at_schedule.iter().any(|m| m.name == "broken"),
        "{g:?}"
    );
    // Retried, backing off (5, 10, 20, 40 s apart, +-25 %), not at a fixed pace (every 5 s: 9
    // writes in 45 s), nor at the pace of events: the other Deployment, changed every 3 s,
    // wakes the group 15 times meanwhile, and `broken` is not written at those. At most 4
    // writes in 45 s, possibly none (the wait may already be long here).
    let writes = || op.counter("tdset_api_writes_total{resource=\"deployments\",verb=\"apply\"}");
    let before = writes();
    let deployments = Api::<Deployment>::namespaced(client.clone(), n);
    for tick in 0..15 {
        let touch = json!({"metadata": {"labels": {"tick": tick.to_string()}}});
        deployments
            .patch("ok", &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    let retries = writes() - before;
    assert!(
        retries <= 4.0,
        "{retries} writes in 45 s while the webhook is down"
    );
    // The webhook back, the next look puts it to sleep (a label change wakes the group now,
    // rather than waiting out the backoff).
    configs
        .delete(&webhook, &DeleteParams::default())
        .await
        .unwrap();
    // (The API server may still call the deleted webhook for a moment.)
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    eventually(GUARD, "broken relabelled", || async {
        deployments
            .patch("broken", &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .ok()
    })
    .await;
    deployment_at(&client, n, "broken", 0).await;
    op.stop().await;
    ns.cleanup().await;
}

/// The operator's aggregated ClusterRole (deploy/, as shipped) holds a rule for `resource`,
/// or none (kube-controller-manager aggregates the grants).
async fn operator_role_grants(client: &Client, resource: &str, granted: bool) {
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    eventually(GUARD, &format!("{resource} granted: {granted}"), || async {
        let rules = roles.get("tdset-operator").await.ok()?.rules?;
        let has = rules
            .iter()
            .any(|r| r.resources.iter().flatten().any(|x| x == resource));
        (!rules.is_empty() && has == granted).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_group_left_for_another_form_is_kept_while_a_kind_it_holds_cannot_be_listed() {
    let (client, ns) = setup("group-unlisted").await;
    let n = &ns.name;
    let out = kubectl(&["apply", "-k", repo_root().join("deploy").to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What a group needs of a custom kind: list it, write its record, and its /scale.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let grant_name = "tdset-operator-group-widgets";
    let grant: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": grant_name, "labels": {"schedule.rs/aggregate-to-tdset-operator": "true"}},
        "rules": [
            {"apiGroups": ["test.schedule.rs"], "resources": ["widgets"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": ["test.schedule.rs"], "resources": ["widgets/scale"], "verbs": ["get", "patch"]}
        ]
    }))
    .unwrap();
    // Never left behind, even by a failing run: it would grant Widgets to later tests'
    // operators (tests/workloads.rs expects them not granted).
    struct Withdrawn(&'static str);
    impl Drop for Withdrawn {
        fn drop(&mut self) {
            let _ = kubectl(&["delete", "clusterrole", self.0, "--ignore-not-found"]);
        }
    }
    let _withdrawn = Withdrawn(grant_name);
    let give = || async {
        roles
            .patch(
                grant_name,
                &PatchParams::apply("tdset-tests").force(),
                &Patch::Apply(&grant),
            )
            .await
            .unwrap();
        operator_role_grants(&client, "widgets", true).await;
    };
    let take = || async {
        let _ = roles.delete(grant_name, &DeleteParams::default()).await;
        operator_role_grants(&client, "widgets", false).await;
    };
    give().await;
    let api = dev_widget(&client, n).await;
    let _: Deployment = create_object(&client, n, app_deployment("other", 2)).await;
    let kinds = json!(["Widget.test.schedule.rs"]);
    create_tdset(
        &client,
        n,
        &tdset("night", sleep_group(kinds, json!([]), 3, 600)),
    )
    .await;
    let (sa_client, _) = service_account_client("tdset-system", "tdset-operator").await;
    let op = Operator::start(&sa_client, n, clock(), None, "test");
    // The count and the record (settled: a custom kind's record briefly also carries the
    // value before the change).
    let widget_at = |want: i64, record: BTreeMap<String, String>| {
        let api = api.clone();
        async move {
            eventually(
                GUARD,
                &format!("Widget w at {want}, {record:?}"),
                || async {
                    let w = api.get("w").await.ok()?;
                    (w.data.pointer("/spec/replicas") == Some(&json!(want))
                        && annotations(&w) == record)
                        .then_some(())
                },
            )
            .await
        }
    };
    widget_at(0, record("night", 3, 0)).await;

    // The grant is withdrawn, then the TDSet takes another form: its Widgets cannot be listed,
    // so it cannot know whether any still sleeps. It keeps the group and says why.
    take().await;
    to_another_form(&client, n, "night").await;
    object_where(
        &client,
        n,
        "night",
        "the unlisted kind reported, the group kept",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.group.is_some()
                    && s.conditions.iter().any(|c| {
                        c.type_ == "Degraded" && c.status == "True" && c.message.contains("widgets")
                    })
            })
        },
    )
    .await;
    // The new form runs meanwhile; the Widget still sleeps, its record on it.
    deployment_at(&client, n, "other", 0).await;
    widget_at(0, record("night", 3, 0)).await;

    // Granted again: the Widget gets its own count back, and the group leaves the status.
    give().await;
    widget_at(3, BTreeMap::new()).await;
    object_where(
        &client,
        n,
        "night",
        "the group gone from the status",
        |t: &TDSet| t.status.as_ref().is_some_and(|s| s.group.is_none()),
    )
    .await;
    op.stop().await;
    ns.cleanup().await;
}

/// Woken by hand four times in ten minutes (an override to `own`, as `kubectl tdset wake
/// --for` writes): each sleep after a wake-up is the schedule coming back, not a revert of
/// someone else's change, so no `ConflictingWriter` is said and no sleep is held back.
#[tokio::test]
async fn repeated_wake_ups_are_not_taken_for_another_writer() {
    let (client, ns) = setup("group-wakes").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let started = std::time::Instant::now();
    let _op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "web", 0).await;
    let api: Api<TDSet> = Api::namespaced(client.clone(), n);
    for wake in 0..4 {
        // Awake for 30 s from now, by the operator's clock: long enough to be seen on a
        // loaded machine (a wake-up that starts after its end is never written; 10 s was
        // missed once, in a clean-clone run beside the memory tests).
        let now = started.elapsed().as_secs() as i64 + 1;
        // The first active override wins: the wake-up goes before the night.
        let overrides = json!([
            {"start": at(now), "end": at(now + 30), "reason": format!("wake {wake}")},
            {"start": at(-60), "end": at(3600), "replica": 0, "reason": "night"},
        ]);
        api.patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": overrides}})),
        )
        .await
        .unwrap();
        deployment_at(&client, n, "web", 3).await;
        deployment_at(&client, n, "web", 0).await;
    }
    let t = tdset_with_reason(&client, n, "night", "Degraded", "AsExpected").await;
    let group = t.status.and_then(|s| s.group).unwrap();
    assert!(group.not_at_schedule.is_empty(), "{group:?}");
    let events = events_for(&client, n, "night").await;
    assert!(
        events
            .iter()
            .all(|(_, reason, _)| reason != "ConflictingWriter"),
        "{events:?}"
    );
    ns.cleanup().await;
}

/// `web` (its own count 5) put to sleep by `scaleTargetRef` TDSet `night` (onDelete: Keep),
/// whose night ends at `T0+40`; its original recorded in status.
async fn web_asleep_under_a_scale_target_ref(client: &Client, n: &str) -> Operator {
    let _: Deployment = create_object(client, n, labelled(app_deployment("web", 5), "dev")).await;
    let night = json!([{"start": at(-60), "end": at(40), "replica": 0, "reason": "night"}]);
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "schedulingConfig": [],
        "defaultReplica": 5,
        "overrides": night,
        "intervalMint": 60
    });
    create_tdset(client, n, &tdset("night", spec)).await;
    let op = Operator::start(client, n, clock(), None, "test");
    deployment_at(client, n, "web", 0).await;
    assert_eq!(original_recorded(client, n, "night", "web").await, 5);
    op
}

/// `night` switched to the group form over `env: dev`, still at night (scaleTargetRef and
/// defaultReplica gone: own by day), until the group's record is on `web`, carrying the own
/// count 5.
async fn switched_to_the_group_form(client: &Client, n: &str) {
    Api::<TDSet>::namespaced(client.clone(), n)
        .patch(
            "night",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "scaleTargetRef": null,
                "defaultReplica": null,
                "scaleTargetSelector": {"kinds": ["Deployment"], "selector": {"matchLabels": {"env": "dev"}}},
            }})),
        )
        .await
        .unwrap();
    let web: Deployment = object_where(client, n, "web", "the group's record on web", |d| {
        annotations(d).contains_key("schedule.rs/own-replicas")
    })
    .await;
    let own = annotations(&web).get("schedule.rs/own-replicas").cloned();
    assert_eq!(own.as_deref(), Some("5"), "{:?}", annotations(&web));
}

/// A `scaleTargetRef` TDSet (onDelete: Keep) has put `web` (its own count 5) to sleep; at
/// night it is switched to the group form, selecting `web`. The own count goes with it: the
/// group records 5 on `web`, and when the night ends `web` runs 5 again.
#[tokio::test]
async fn a_switch_from_scale_target_ref_to_the_group_form_at_night_keeps_the_own_count() {
    let (client, ns) = setup("group-switch").await;
    let n = &ns.name;
    let _op = web_asleep_under_a_scale_target_ref(&client, n).await;
    switched_to_the_group_form(&client, n).await;
    // The night ends: its own count again.
    deployment_at(&client, n, "web", 5).await;
    ns.cleanup().await;
}

/// A selected workload that its own controller holds (an operator's Deployment) is left alone
/// and counted as conflicting; the rest of the group is written, so the TDSet says it is
/// progressing (not "on hold"), and a real failure beside it is what Degraded names.
#[tokio::test]
async fn a_workload_held_by_its_own_controller_does_not_put_the_group_on_hold() {
    let (client, ns) = setup("group-partly").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    let owner: k8s_openapi::api::core::v1::ConfigMap =
        create_object(&client, n, json!({"metadata": {"name": "some-operator"}})).await;
    let mut db = labelled(app_deployment("db", 1), "dev");
    db["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "some-operator",
        "uid": owner.metadata.uid, "controller": true,
    }]);
    let _: Deployment = create_object(&client, n, db).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let _op = Operator::start(&client, n, clock(), None, "test");

    deployment_at(&client, n, "web", 0).await;
    let t = object_where(&client, n, "night", "the group's status", |t: &TDSet| {
        t.status
            .as_ref()
            .and_then(|s| s.group.as_ref())
            .is_some_and(|g| g.conflicting == 1 && g.at_schedule == 1)
    })
    .await;
    let progressing = condition(&t, "Progressing").unwrap();
    assert_ne!(progressing.reason, "Blocked", "{progressing:?}");
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.reason == "ConflictingTDSet" && degraded.message.contains("db"),
        "{degraded:?}"
    );
    let db: Deployment = Api::namespaced(client.clone(), n).get("db").await.unwrap();
    assert_eq!(replicas(&db), Some(1));
    assert!(annotations(&db).is_empty(), "{:?}", annotations(&db));
    ns.cleanup().await;
}

/// A group over `env: dev` whose night is an hour away: it holds what it selects and writes
/// nothing, and is looked at again only when something wakes it.
fn idle_group() -> Value {
    let mut spec = sleep_group(json!(["Deployment"]), json!([]), 3600, 7200);
    spec["intervalMint"] = json!(1440);
    spec
}

/// Eight groups select `web`; the oldest holds it. A change of `web` (a rollout restart)
/// wakes that one, not the seven that hold nothing of it: 300 groups over a namespace must
/// not list it 300 times.
#[tokio::test]
async fn a_workloads_change_wakes_only_the_group_that_holds_it() {
    let (client, ns) = setup("group-fanout").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 1), "dev")).await;
    let groups: Vec<String> = (0..8).map(|i| format!("g{i}")).collect();
    for g in &groups {
        create_tdset(&client, n, &tdset(g, idle_group())).await;
    }
    let op = Operator::start(&client, n, clock(), None, "test");
    for g in &groups {
        object_where(&client, n, g, "the group's status", |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| s.group.is_some())
        })
        .await;
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    // Its first change may be the first the operator sees of it (its list at the start can
    // come before the groups'): then every group is woken once, a moment later, to count it.
    // That is not what is measured here.
    let first = json!({"metadata": {"annotations": {"seen": "yes"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(first))
        .await
        .unwrap();
    let before = op.reconciles_when_quiet().await;
    for restart in 0..3 {
        let template = json!({"spec": {"template": {"metadata": {"annotations": {"restartedAt": restart.to_string()}}}}});
        let d = api
            .patch("web", &PatchParams::default(), &Patch::Merge(template))
            .await
            .unwrap();
        object_where(
            &client,
            n,
            "web",
            "the restart seen by its controller",
            |x: &Deployment| {
                x.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
            },
        )
        .await;
    }
    let woken = op.reconciles_when_quiet().await - before;
    assert!(
        woken <= 6.0,
        "3 changes of one workload under 8 groups woke {woken} reconciles"
    );
    ns.cleanup().await;
}

/// A younger group counts what an older one holds (`conflicting`) without being woken by its
/// changes: it is woken a moment later when what it counts may have changed (a workload
/// appears or is relabelled), so its status follows without waiting for its interval.
#[tokio::test]
async fn a_younger_groups_counts_follow_workloads_it_does_not_hold() {
    let (client, ns) = setup("group-counts").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 1), "dev")).await;
    create_tdset(&client, n, &tdset("older", idle_group())).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create_tdset(&client, n, &tdset("younger", idle_group())).await;
    let _op = Operator::start(&client, n, clock(), None, "test");
    let counts = |matched, conflicting| {
        move |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.matched == matched && g.conflicting == conflicting)
        }
    };
    object_where(&client, n, "younger", "web counted", counts(1, 1)).await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    let env = |env: &str| Patch::Merge(json!({"metadata": {"labels": {"env": env}}}));
    api.patch("web", &PatchParams::default(), &env("qa"))
        .await
        .unwrap();
    object_where(&client, n, "younger", "web labelled out", counts(0, 0)).await;
    object_where(&client, n, "older", "web labelled out", counts(0, 0)).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 1), "dev")).await;
    object_where(&client, n, "younger", "api counted", counts(1, 1)).await;
    ns.cleanup().await;
}

/// `night` put `web` to sleep, and the Deployment controller copied its record to web's
/// ReplicaSet. Labelled out of the group, `web` gets its count back and its record off; the
/// ReplicaSet keeps the copy for good. Its changes wake no one.
#[tokio::test]
async fn a_replica_sets_copy_of_a_record_wakes_no_former_holder() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let (client, ns) = setup("group-rs-copy").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "web", 0).await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), n);
    let copied = || async {
        let list = sets
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        list.items
            .iter()
            .any(|rs| annotations(rs).contains_key("schedule.rs/held-by"))
    };
    eventually(GUARD, "the record copied to the ReplicaSet", || async {
        copied().await.then_some(())
    })
    .await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    let qa = json!({"metadata": {"labels": {"env": "qa"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(qa))
        .await
        .unwrap();
    let web = object_where(
        &client,
        n,
        "web",
        "web given back, its record off",
        |d: &Deployment| {
            replicas(d) == Some(3) && !annotations(d).contains_key("schedule.rs/held-by")
        },
    )
    .await;
    drop(web);
    assert!(copied().await, "the ReplicaSet keeps the copy");
    let before = op.reconciles_when_quiet().await;
    let counts = [4, 5, 2, 6];
    for count in counts {
        let scale = json!({"spec": {"replicas": count}});
        api.patch("web", &PatchParams::default(), &Patch::Merge(scale))
            .await
            .unwrap();
        eventually(
            Duration::from_secs(600),
            "the ReplicaSet scaled",
            || async {
                let list = sets
                    .list(&ListParams::default().labels("app=web"))
                    .await
                    .unwrap();
                list.items
                    .iter()
                    .any(|rs| rs.spec.as_ref().and_then(|s| s.replicas) == Some(count))
                    .then_some(())
            },
        )
        .await;
    }
    // Woken by the ReplicaSet, `night` reconciles about once per scaling (with the copy mapped
    // to it: 3 for 3 scalings and 3 for 4, the queue merging some). One reconcile of its own may
    // fall in the window: a requeue it had scheduled, which a loaded machine (3 suites at once)
    // once put there.
    let woken = op.reconciles_when_quiet().await - before;
    assert!(
        woken <= 1.0,
        "the ReplicaSet's {} scalings woke {woken} reconciles",
        counts.len()
    );
    ns.cleanup().await;
}

/// Suspended at night, `night` still gives back what it lets go of: letting go is not
/// scheduling. `api`, excluded, gets its own count back; `web`, still held, stays asleep.
#[tokio::test]
async fn a_suspended_group_still_gives_back_what_it_lets_go_of() {
    let (client, ns) = setup("group-suspended").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 2), "dev")).await;
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let _op = Operator::start(&client, n, clock(), None, "test");
    deployment_at(&client, n, "web", 0).await;
    deployment_at(&client, n, "api", 0).await;
    let api: Api<TDSet> = Api::namespaced(client.clone(), n);
    let suspend = json!({"spec": {"suspend": true}});
    api.patch("night", &PatchParams::default(), &Patch::Merge(suspend))
        .await
        .unwrap();
    tdset_with_reason(&client, n, "night", "Progressing", "Suspended").await;
    let exclude = json!({"spec": {"scaleTargetSelector": {"exclude": ["api"]}}});
    api.patch("night", &PatchParams::default(), &Patch::Merge(exclude))
        .await
        .unwrap();
    let given_back = deployment_at(&client, n, "api", 2).await;
    assert!(
        annotations(&given_back).is_empty(),
        "{:?}",
        annotations(&given_back)
    );
    let t = object_where(
        &client,
        n,
        "night",
        "api counted as excluded",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.excluded == 1)
        },
    )
    .await;
    assert_eq!(condition(&t, "Progressing").unwrap().reason, "Suspended");
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(replicas(&web), Some(0));
    ns.cleanup().await;
}

/// A group's history counts its workloads in one unit: the held workloads' total before and
/// after (5 -> 0 at night, 0 -> 5 in the morning, whether the level is a count or `own`). A
/// wake-up that could not be written is recorded too, with why, and not as applied.
#[tokio::test]
async fn a_groups_history_is_in_one_unit_and_records_a_wake_up_that_failed() {
    let (client, ns) = setup("group-history").await;
    let n = &ns.name;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("web", 3), "dev")).await;
    let _: Deployment = create_object(&client, n, labelled(app_deployment("api", 2), "dev")).await;
    // Every own count refused: the morning's writes all fail.
    let refuse = [
        RefuseScale::new(&client, n, 3).await,
        RefuseScale::new(&client, n, 2).await,
    ];
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let clock = clock();
    let _op = Operator::start(&client, n, clock, None, "test");
    deployment_at(&client, n, "web", 0).await;
    // The morning, 3 s from now.
    move_night(&client, n, "night", clock.now(), None, Some(3)).await;
    let failed = object_where(
        &client,
        n,
        "night",
        "the failed wake-up in history",
        |t: &TDSet| {
            (t.status.as_ref()).is_some_and(|s| s.history.iter().any(|h| h.applied_at.is_none()))
        },
    )
    .await;
    let history = failed.status.unwrap().history;
    // (A write refused as stale at night is retried: the night may take two entries.)
    let (wake, sleep) = (&history[0], history.last().unwrap());
    assert_eq!((sleep.from, sleep.to), (Some(5), Some(0)), "{history:?}");
    assert_eq!((wake.from, wake.to), (Some(0), Some(5)), "{history:?}");
    assert!(wake.applied_at.is_none(), "{history:?}");
    assert!(
        wake.message
            .as_deref()
            .is_some_and(|m| m.contains("2 of 2 workloads") && m.contains("the test refuses")),
        "{history:?}"
    );
    for r in &refuse {
        r.lift().await;
    }
    // A label change wakes the group now, rather than after the error policy's backoff (the
    // API server may apply the policies for a moment after their deletion).
    let deployments = Api::<Deployment>::namespaced(client.clone(), n);
    let mut touches = 0;
    eventually(GUARD, "web woken", || {
        touches += 1;
        let touch = json!({"metadata": {"labels": {"touched": touches.to_string()}}});
        let deployments = &deployments;
        async move {
            let web = deployments
                .patch("web", &PatchParams::default(), &Patch::Merge(&touch))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            (replicas(&web) == Some(3)).then_some(())
        }
    })
    .await;
    deployment_at(&client, n, "api", 2).await;
    let woken = object_where(
        &client,
        n,
        "night",
        "the wake-up in history",
        |t: &TDSet| {
            t.status.as_ref().is_some_and(|s| {
                s.history
                    .first()
                    .is_some_and(|h| h.applied_at.is_some() && h.to == Some(5))
            })
        },
    )
    .await;
    // In totals throughout: the wake-up from 0 (the sleep's 0). If the API server still
    // applied the policy for a moment, `api` landed in a later reconcile than `web`: then the
    // wake-up is two entries, 0 -> 5 (with why api was refused) and 3 -> 5.
    let history = woken.status.unwrap().history;
    let sleep = history.iter().position(|h| h.to == Some(0)).unwrap();
    let wake = &history[..sleep];
    assert_eq!(wake.last().and_then(|h| h.from), Some(0), "{history:?}");
    assert!(wake.windows(2).all(|w| w[0].from <= w[1].to), "{history:?}");
    ns.cleanup().await;
}

/// A group that selects more workloads than one reconcile reads (`--group-max-workloads`, 3
/// here) schedules the first three by name and leaves the rest as they are, and says so
/// (`Degraded=TooManyWorkloads`). It never takes more than it reads: a workload created later
/// that sorts first is left as it is (issue 48: it was taken, the group then held four and
/// read three, and the one not read stayed asleep once the TDSet was deleted), and every
/// workload it holds wakes at its own count.
#[tokio::test]
async fn a_group_selecting_more_than_one_reconcile_reads_schedules_the_first_and_says_so() {
    let (client, ns) = setup("group-cap").await;
    let n = &ns.name;
    for name in ["a", "b", "c", "d", "e"] {
        let _: Deployment =
            create_object(&client, n, labelled(app_deployment(name, 2), "dev")).await;
    }
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let clock = clock();
    let _op = Operator::start_configured(&client, n, clock, |o| o.group_max_workloads = 3);
    for name in ["a", "b", "c"] {
        deployment_at(&client, n, name, 0).await;
    }
    let t = tdset_with_reason(&client, n, "night", "Degraded", "TooManyWorkloads").await;
    let group = t.status.as_ref().and_then(|s| s.group.as_ref()).unwrap();
    assert_eq!(group.matched, 3, "{group:?}");
    assert_ne!(condition(&t, "Progressing").unwrap().reason, "Blocked");
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    for name in ["d", "e"] {
        let d = api.get(name).await.unwrap();
        assert_eq!(replicas(&d), Some(2), "{name}");
        assert!(annotations(&d).is_empty(), "{name}: {:?}", annotations(&d));
    }
    // Sorts before "a": the selected list's first three are now 0, a, b, and c is still held.
    // Taken, it would be a fourth held workload: it is left as it is, and said.
    let _: Deployment = create_object(&client, n, labelled(app_deployment("0", 4), "dev")).await;
    let t = object_where(&client, n, "night", "0 said not taken", |t: &TDSet| {
        let group = t.status.as_ref().and_then(|s| s.group.as_ref());
        group.is_some_and(|g| g.not_at_schedule.iter().any(|m| m.name == "0"))
    })
    .await;
    let group = t.status.as_ref().and_then(|s| s.group.as_ref()).unwrap();
    let left = group
        .not_at_schedule
        .iter()
        .find(|m| m.name == "0")
        .unwrap();
    assert!(left.message.contains("--group-max-workloads 3"), "{left:?}");
    let zero = api.get("0").await.unwrap();
    assert_eq!(replicas(&zero), Some(4));
    assert!(annotations(&zero).is_empty(), "{:?}", annotations(&zero));
    // The night ends, 3 s from now: every workload it put to sleep gets its own count back.
    move_night(&client, n, "night", clock.now(), None, Some(3)).await;
    for (name, own) in [("0", 4), ("a", 2), ("b", 2), ("c", 2)] {
        let d = deployment_at(&client, n, name, own).await;
        assert!(annotations(&d).is_empty(), "{name}: {:?}", annotations(&d));
    }
    ns.cleanup().await;
}

/// A group that holds more than one reconcile reads (its operator restarted with a lower
/// `--group-max-workloads`) is deleted: it gives back what it read, lists what it holds again
/// and gives that back too, until nothing carries its record, before its finalizer goes.
#[tokio::test]
async fn a_group_deleted_holding_more_than_one_reconcile_reads_gives_every_workload_back() {
    let (client, ns) = setup("group-cap-delete").await;
    let n = &ns.name;
    let names = ["a", "b", "c", "d", "e"];
    for name in names {
        let _: Deployment =
            create_object(&client, n, labelled(app_deployment(name, 2), "dev")).await;
    }
    create_deployment_group(&client, n, "night", -60, 3600).await;
    let op = Operator::start_configured(&client, n, clock(), |o| o.group_max_workloads = 5);
    for name in names {
        deployment_at(&client, n, name, 0).await;
    }
    op.stop().await;
    let _op = Operator::start_configured(&client, n, clock(), |o| o.group_max_workloads = 2);
    Api::<TDSet>::namespaced(client.clone(), n)
        .delete("night", &DeleteParams::default())
        .await
        .unwrap();
    tdset_gone(&client, n, "night").await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), n);
    for name in names {
        let d = api.get(name).await.unwrap();
        assert_eq!(replicas(&d), Some(2), "{name}");
        assert!(annotations(&d).is_empty(), "{name}: {:?}", annotations(&d));
    }
    ns.cleanup().await;
}

/// An older group past its cap comes to select a workload a younger group holds asleep: it
/// takes it over (what other groups hold is read before the rest of what it selects), so the
/// workload is not left at the younger group's count with nobody to wake it.
#[tokio::test]
async fn an_older_group_past_its_cap_takes_over_what_a_younger_group_yields_to_it() {
    let (client, ns) = setup("group-cap-handover").await;
    let n = &ns.name;
    for name in ["a", "b", "c"] {
        let _: Deployment =
            create_object(&client, n, labelled(app_deployment(name, 2), "dev")).await;
    }
    // Sorts after a, b and c: past the older group's first two.
    let _: Deployment = create_object(&client, n, app_deployment("z", 5)).await;
    create_deployment_group(&client, n, "older", -60, 3600).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut younger = sleep_group(json!(["Deployment"]), json!([]), -60, 3600);
    younger["scaleTargetSelector"]["selector"] = json!({"matchLabels": {"app": "z"}});
    younger["overrides"][0]["replica"] = json!(1);
    create_tdset(&client, n, &tdset("younger", younger)).await;
    let _op = Operator::start_configured(&client, n, clock(), |o| o.group_max_workloads = 2);
    deployment_at(&client, n, "a", 0).await;
    deployment_at(&client, n, "b", 0).await;
    tdset_with_reason(&client, n, "older", "Degraded", "TooManyWorkloads").await;
    let z = deployment_at(&client, n, "z", 1).await;
    assert_eq!(annotations(&z), record("younger", 5, 1));

    // Now the older group selects it too: it holds it, its own count carried over.
    Api::<Deployment>::namespaced(client.clone(), n)
        .patch(
            "z",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": "dev"}}})),
        )
        .await
        .expect("labelling z");
    object_where(
        &client,
        n,
        "z",
        "z held by the older group at 0",
        |d: &Deployment| replicas(d) == Some(0) && annotations(d) == record("older", 5, 0),
    )
    .await;
    ns.cleanup().await;
}

/// A custom kind whose `spec.replicas` is not set reads as 0 through `/scale`, while its
/// controller runs its own default. The group leaves it alone and says why, rather than
/// counting it asleep (and "waking" it to 0).
#[tokio::test]
async fn a_custom_workload_without_a_count_is_left_alone_and_said_so() {
    let (client, ns) = setup("group-unset").await;
    let n = &ns.name;
    let api = dev_widget(&client, n).await;
    let unset: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.schedule.rs/v1", "kind": "Widget",
        "metadata": {"name": "defaulted", "labels": {"env": "dev"}}, "spec": {}
    }))
    .unwrap();
    api.create(&Default::default(), &unset).await.unwrap();
    let kinds = json!(["Widget.test.schedule.rs"]);
    create_tdset(
        &client,
        n,
        &tdset("night", sleep_group(kinds, json!([]), -60, 3600)),
    )
    .await;
    let _op = Operator::start(&client, n, clock(), None, "test");
    let t = object_where(
        &client,
        n,
        "night",
        "w asleep, the other left alone",
        |t: &TDSet| {
            t.status
                .as_ref()
                .and_then(|s| s.group.as_ref())
                .is_some_and(|g| g.at_schedule == 1 && g.conflicting == 1)
        },
    )
    .await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.message.contains("defaulted")
            && degraded.message.contains("spec.replicas is not set"),
        "{degraded:?}"
    );
    let left = api.get("defaulted").await.unwrap();
    assert!(annotations(&left).is_empty(), "{:?}", annotations(&left));
    assert_eq!(left.data.pointer("/spec/replicas"), None);
    ns.cleanup().await;
}

/// The switch above with the operator killed at the worst instant: the group's record (own
/// count 5) is on `web`, and the status that would drop `status.target` (the original 5) was
/// never written (a policy refuses every status write that drops it, until the kill). The operator
/// that comes next finds both, keeps the count, and wakes `web` at 5.
#[tokio::test]
async fn a_switch_to_the_group_form_killed_before_its_status_keeps_the_own_count() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let (client, ns) = setup("group-switch-kill").await;
    let n = &ns.name;
    let op = web_asleep_under_a_scale_target_ref(&client, n).await;

    // From here the TDSet's status cannot drop its target.
    let name = format!("refuse-status-{n}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["schedule.rs"], "apiVersions": ["*"],
                     "operations": ["UPDATE"], "resources": ["tdsets/status"]}]},
                 "validations": [{
                     "expression": "!(has(oldObject.status) && has(oldObject.status.target)) || (has(object.status) && has(object.status.target))",
                     "message": "the test refuses to drop status.target"}]}
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}}}
    }))
    .unwrap();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies.create(&Default::default(), &policy).await.unwrap();
    bindings
        .create(&Default::default(), &binding)
        .await
        .unwrap();
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), n);
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let touch = json!({"status": {"target": null}});
    eventually(GUARD, "the status policy in force", || async {
        (tdsets
            .patch_status("night", &dry_run, &Patch::Merge(&touch))
            .await)
            .is_err()
            .then_some(())
    })
    .await;

    switched_to_the_group_form(&client, n).await;
    op.kill();
    // The crash left both: the record on web, and status.target with the original.
    assert_eq!(original_recorded(&client, n, "night", "web").await, 5);
    bindings.delete(&name, &Default::default()).await.unwrap();
    policies.delete(&name, &Default::default()).await.unwrap();
    eventually(GUARD, "the status policy lifted", || async {
        (tdsets
            .patch_status("night", &dry_run, &Patch::Merge(&touch))
            .await)
            .is_ok()
            .then_some(())
    })
    .await;

    // The next operator: asleep until the night ends, then its own count again.
    let _op = Operator::start(&client, n, clock(), None, "test");
    let t = object_where(&client, n, "night", "status.target dropped", |t: &TDSet| {
        t.status
            .as_ref()
            .is_some_and(|s| s.group.is_some() && s.target.is_none())
    })
    .await;
    drop(t);
    assert_eq!(
        replicas(
            &Api::<Deployment>::namespaced(client.clone(), n)
                .get("web")
                .await
                .unwrap()
        ),
        Some(0)
    );
    let web = deployment_at(&client, n, "web", 5).await;
    assert!(annotations(&web).is_empty(), "{:?}", annotations(&web));
    ns.cleanup().await;
}
