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
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::{Clock, SystemClock};

pub(crate) const T0: &str = "2026-05-01T12:00:00Z";

pub(crate) fn clock() -> SystemClock {
    SystemClock::starting_at(utc(T0))
}

/// `T0` plus `secs`, as RFC 3339.
pub(crate) fn at(secs: i64) -> String {
    (utc(T0) + chrono::Duration::seconds(secs)).to_rfc3339()
}

/// A group TDSet over `env: dev`: asleep (0) from `T0+from` to `T0+to`, each workload's own
/// count otherwise (no defaultReplica: the level `own`).
pub(crate) fn sleep_group(kinds: Value, exclude: Value, from: i64, to: i64) -> Value {
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
pub(crate) async fn move_night(
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

pub(crate) fn hpa(name: &str, target: &str) -> Value {
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
pub(crate) fn untouchable(mut v: Value) -> Value {
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
pub(crate) async fn json_of<K>(client: &Client, ns: &str, name: &str) -> Value
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

pub(crate) fn annotations(o: &impl ResourceExt) -> BTreeMap<String, String> {
    o.annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("schedule.rs/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(crate) fn record(holder: &str, own: i32, scheduled: i32) -> BTreeMap<String, String> {
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

/// The original count TDSet `name` records for its target `target`, once it records one.
pub(crate) async fn original_recorded(client: &Client, ns: &str, name: &str, target: &str) -> i32 {
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

/// Widget `w` of the test CRD, labelled `env: dev`, at 3.
pub(crate) async fn dev_widget(client: &Client, ns: &str) -> Api<kube::api::DynamicObject> {
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

/// A group over `env: dev` whose night is an hour away: it holds what it selects and writes
/// nothing, and is looked at again only when something wakes it.
pub(crate) fn idle_group() -> Value {
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
