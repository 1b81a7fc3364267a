//! The group form letting go: given another form, deleted, holding more than one reconcile
//! reads, refused a write or a list; nothing it holds is forgotten until it is given back.

use std::collections::BTreeMap;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::Clock;

use crate::group::*;

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
