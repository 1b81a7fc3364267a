//! What a platform team can restrict: the forms that run pods under the operator's identity
//! (`container`, `template`), refused outside listed namespaces by the operator itself, and
//! the shipped ValidatingAdmissionPolicy that lets only some users create them.

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::{Value, json};
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;

fn noon() -> SystemClock {
    SystemClock::starting_at(utc("2026-05-01T12:00:00Z"))
}

fn spec(source: Value) -> Value {
    let mut spec = json!({
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 3}],
        "defaultReplica": 1,
    });
    for (k, v) in source.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

#[tokio::test]
async fn pod_forms_outside_the_allowed_namespaces_create_nothing_and_say_why() {
    let (client, ns) = setup("trust-forms").await;
    let _: Deployment = create_object(&client, &ns.name, app_deployment("theirs", 2)).await;
    let op = Operator::start_allowing(&client, &ns.name, noon(), "platform, tools");
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "web",
            spec(json!({"container": {"image": "nginx:1.27", "port": 8080}})),
        ),
    )
    .await;
    create_tdset(
        &client,
        &ns.name,
        &tdset(
            "sched",
            spec(json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "theirs"}})),
        ),
    )
    .await;
    let refused = tdset_with_reason(&client, &ns.name, "web", "Degraded", "FormNotAllowed").await;
    let message = condition(&refused, "Degraded").unwrap().message.clone();
    assert!(
        message.contains("spec.container") && message.contains("platform, tools"),
        "{message}"
    );
    wait_for_event(&client, &ns.name, "web", |(ty, r, _)| {
        ty == "Warning" && r == "FormNotAllowed"
    })
    .await;
    // Scaling what already runs is still allowed.
    deployment_at(&client, &ns.name, "theirs", 3).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        deployments.get_opt("web").await.unwrap().is_none(),
        "a refused TDSet created its Deployment"
    );
    op.stop().await;
    ns.cleanup().await;
}

/// A `container` TDSet that ran before `--pod-forms-in` left its namespace out: nothing is
/// changed, and status says its Deployment keeps running (not "nothing runs").
#[tokio::test]
async fn a_pod_form_refused_after_it_ran_says_its_deployment_keeps_running() {
    let (client, ns) = setup("trust-before").await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    let web = spec(json!({"container": {"image": "nginx:1.27", "port": 8080}}));
    create_tdset(&client, &ns.name, &tdset("web", web)).await;
    deployment_at(&client, &ns.name, "web", 3).await;
    op.stop().await;
    let op = Operator::start_allowing(&client, &ns.name, noon(), "platform");
    let refused = tdset_with_reason(&client, &ns.name, "web", "Degraded", "FormNotAllowed").await;
    let degraded = condition(&refused, "Degraded").unwrap();
    assert!(degraded.message.contains("keeps running"), "{degraded:?}");
    let available = condition(&refused, "Available").unwrap();
    assert!(
        !available.message.contains("nothing runs") && available.reason != "Blocked",
        "{available:?}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(replicas(&deployments.get("web").await.unwrap()), Some(3));
    op.stop().await;
    ns.cleanup().await;
}

/// A client for the shared control plane acting as `user` in `groups` (impersonation by the
/// admin), as a real user of the cluster would be authenticated.
async fn as_user(user: &str, groups: &[&str]) -> Client {
    let kc = Kubeconfig::read_from(&control_plane().kubeconfig).unwrap();
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_shipped_admission_policy_lets_only_template_authors_run_pods() {
    let (client, ns) = setup("trust-vap").await;
    // alice and bob may edit TDSets in the namespace; only alice is a template author.
    kubectl_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: tdset-editor, namespace: {ns}}}\n\
             rules: [{{apiGroups: [schedule.rs], resources: [tdsets], verbs: [get, list, create, update, patch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tdset-editors, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tdset-editor}}\n\
             subjects: [{{kind: User, name: alice}}, {{kind: User, name: bob}}]\n",
            ns = ns.name
        ),
    );
    // The policy as shipped; its binding limited to this namespace, so other tests running
    // on the shared control plane are not affected.
    let shipped =
        std::fs::read_to_string(repo_root().join("deploy/policies/tdset-pod-forms.yaml")).unwrap();
    let mut docs = shipped.split("\n---\n");
    let policy = docs.next().unwrap();
    let mut binding: Value = serde_saphyr::from_str(docs.next().unwrap()).unwrap();
    let binding_name = format!("tdset-pod-forms-{}", ns.name);
    binding["metadata"]["name"] = json!(binding_name);
    binding["spec"]["matchResources"] =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}}});
    let out = kubectl_stdin(&["apply", "-f", "-"], policy);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        &serde_json::to_string(&binding).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (alice, bob) = (
        as_user("alice", &["tdset-template-authors"]).await,
        as_user("bob", &["developers"]).await,
    );
    let template = spec(
        json!({"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}),
    );
    let create = |c: &Client, name: &str, spec: Value| {
        let api: Api<TDSet> = Api::namespaced(c.clone(), &ns.name);
        let t = tdset(name, spec);
        async move { api.create(&PostParams::default(), &t).await }
    };
    // The policy takes effect within moments of being applied.
    let denied = eventually(GUARD, "bob's template TDSet denied", || async {
        match create(&bob, "bobs", template.clone()).await {
            Err(kube::Error::Api(s)) => Some(s.message),
            Ok(_) => {
                let api: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
                let _ = api.delete("bobs", &Default::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await;
    assert!(denied.contains("tdset-template-authors"), "{denied}");
    create(&alice, "alices", template.clone())
        .await
        .expect("a template author creates a template TDSet");
    create(
        &bob,
        "bobs-target",
        spec(
            json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}),
        ),
    )
    .await
    .expect("anyone with edit rights schedules an existing workload");
    // bob may change alice's schedule, not what it runs.
    let bobs_api: Api<TDSet> = Api::namespaced(bob.clone(), &ns.name);
    bobs_api
        .patch(
            "alices",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"defaultReplica": 2}})),
        )
        .await
        .expect("bob edits the schedule of alice's TDSet");
    let changed = bobs_api
        .patch(
            "alices",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "evil:1"}]}}}})),
        )
        .await;
    assert!(changed.is_err(), "bob changed what alice's TDSet runs");

    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        )),
    );
    let _ = bindings.delete(&binding_name, &Default::default()).await;
    ns.cleanup().await;
}

/// `--group-form-in` leaves this namespace out: a group TDSet writes nothing to what it
/// selects and says why.
#[tokio::test]
async fn a_group_outside_the_allowed_namespaces_writes_nothing_and_says_why() {
    let (client, ns) = setup("trust-group").await;
    let mut web = app_deployment("web", 2);
    web["metadata"]["labels"]["env"] = json!("dev");
    let _: Deployment = create_object(&client, &ns.name, web).await;
    let op = Operator::start_configured(&client, &ns.name, noon(), |o| {
        o.group_form = "platform".parse().unwrap();
    });
    let night = json!({
        "scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}},
        "schedulingConfig": [], "defaultReplica": 0,
    });
    create_tdset(&client, &ns.name, &tdset("night", night)).await;
    let refused = tdset_with_reason(&client, &ns.name, "night", "Degraded", "FormNotAllowed").await;
    let message = &condition(&refused, "Degraded").unwrap().message;
    assert!(
        message.contains("scaleTargetSelector") && message.contains("--group-form-in"),
        "{message}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let web = deployments.get("web").await.unwrap();
    assert_eq!(replicas(&web), Some(2));
    assert!(
        web.annotations()
            .keys()
            .all(|k| !k.starts_with("schedule.rs/"))
    );
    op.stop().await;
    ns.cleanup().await;
}

/// A group that put `web` to sleep, then left out of `--group-form-in` (the platform's change
/// at night): it writes nothing, forgets nothing (status.group stays), and its deletion gives
/// `web` its own count back.
#[tokio::test]
async fn a_group_refused_after_it_held_workloads_keeps_them_and_gives_them_back_when_deleted() {
    let (client, ns) = setup("trust-group-after").await;
    let mut web = app_deployment("web", 2);
    web["metadata"]["labels"]["env"] = json!("dev");
    let _: Deployment = create_object(&client, &ns.name, web).await;
    let night = json!({
        "scaleTargetSelector": {"selector": {"matchLabels": {"env": "dev"}}},
        "schedulingConfig": [], "defaultReplica": 0,
    });
    create_tdset(&client, &ns.name, &tdset("night", night)).await;
    let op = Operator::start(&client, &ns.name, noon(), None, "test");
    deployment_at(&client, &ns.name, "web", 0).await;
    op.stop().await;
    let op = Operator::start_configured(&client, &ns.name, noon(), |o| {
        o.group_form = "none".parse().unwrap();
    });
    let refused = tdset_with_reason(&client, &ns.name, "night", "Degraded", "FormNotAllowed").await;
    let group = refused.status.as_ref().and_then(|s| s.group.as_ref());
    assert!(group.is_some_and(|g| g.at_schedule == 1), "{group:?}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(replicas(&deployments.get("web").await.unwrap()), Some(0));
    delete_tdset_and_wait(&client, &ns.name, "night").await;
    let web = deployment_at(&client, &ns.name, "web", 2).await;
    assert!(
        web.annotations()
            .keys()
            .all(|k| !k.starts_with("schedule.rs/"))
    );
    op.stop().await;
    ns.cleanup().await;
}
