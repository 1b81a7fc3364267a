//! Woken by a request, the data plane the reconcile keeps, on the real API server: the
//! operator's slice for a Service is in place before the count goes to 0 (make before
//! break), points at the wake proxy's ready pods on a proxy port of the range, and goes once
//! the workload's own endpoints are ready again; a Service that cannot be woken through is
//! refused with a reason, and the schedule goes on. The Service's own slice is written here
//! as the EndpointSlice controller would write it once the pods are ready (that controller
//! runs only on the real node's cluster: on kwok's it would follow every pod of every test
//! for this one test's sake, and the one clean-clone run with it on failed two timing tests).

use crate::support::*;
use crate::wake::{AUDIENCE, endpoint, token};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::WakeProxyRef;
use tdset_operator::workload::intercept::{HOLD_ANNOTATION, IGNORE_ANNOTATION, MANAGED_BY};

/// The operator's slices in `ns`.
async fn ours(client: &Client, ns: &str) -> Vec<EndpointSlice> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!(
        "endpointslice.kubernetes.io/managed-by={MANAGED_BY}"
    ));
    api.list(&params).await.unwrap().items
}

fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    // etcd's revision, global to the store: a real API server's resourceVersions order writes.
    meta.resource_version.as_deref().unwrap().parse().unwrap()
}

/// The wake proxy as the operator finds it: Service `proxy` in `ns`, its one ready pod at
/// 10.0.0.5 (and an unready one at 10.0.0.6) in a slice the test writes, the proxy ports
/// `range`.
async fn proxy_in(client: &Client, ns: &str, range: (u16, u16)) -> WakeProxyRef {
    let _: Service = create_object(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "proxy"},
               "spec": {"ports": [{"port": 20000}]}}),
    )
    .await;
    let _: EndpointSlice = create_object(
        client,
        ns,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "proxy-1", "labels": {"kubernetes.io/service-name": "proxy"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}},
                             {"addresses": ["10.0.0.6"], "conditions": {"ready": false}}],
               "ports": [{"port": 20000}]}),
    )
    .await;
    WakeProxyRef {
        namespace: ns.to_string(),
        service: "proxy".into(),
        ports: range,
        per_namespace: 64,
        trusted: vec!["endpointslice-controller.k8s.io".into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_is_in_the_path_before_the_count_goes_to_0_and_out_of_it_once_awake() {
    let (client, ns) = setup("wake-slices").await;
    let n = &ns.name;
    // The TDSet's own Service, selecting its pods, a headless one it cannot wake through, and
    // one selecting another app's pods (a request to it would wake a workload it never
    // reaches).
    for (name, cluster_ip) in [("web", None), ("db", Some("None")), ("other", None)] {
        let app = if name == "other" { "other" } else { "web" };
        let mut spec = json!({"selector": {"schedule.rs/tdset": app},
                              "ports": [{"name": "http", "port": 80}]});
        if let Some(ip) = cluster_ip {
            spec["clusterIP"] = json!(ip);
        }
        let _: Service = create_object(
            &client,
            n,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }
    let clock = SystemClock::starting_at(utc("2026-05-01T16:59:45Z"));
    let proxy = proxy_in(&client, n, (21000, 21009)).await;
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    let addr = endpoint(&client, n, clock).await;
    let spec = json!({
        "container": {"image": "nginx", "port": 80},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 2}],
        "wakeOnRequest": {"services": [{"name": "web"}, {"name": "db"}, {"name": "other"}], "wakeFor": "1m", "hold": "20s"}
    });
    create_tdset(&client, n, &tdset("web", spec)).await;
    // Awake by day: nothing of the operator's in the path; the headless Service refused.
    deployment_at(&client, n, "web", 2).await;
    assert!(ours(&client, n).await.is_empty());

    // 17:00: asleep, and the slice was there before the count went to 0.
    let asleep = deployment_at(&client, n, "web", 0).await;
    let slices = ours(&client, n).await;
    assert_eq!(slices.len(), 1, "{slices:?}");
    let slice = &slices[0];
    assert!(
        rv(&slice.metadata) < rv(&asleep.metadata),
        "made before break"
    );
    assert_eq!(slice.metadata.name.as_deref(), Some("web-tdset-wake-ipv4"));
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "web");
    let addresses: Vec<&String> = slice.endpoints.iter().flat_map(|e| &e.addresses).collect();
    assert_eq!(addresses, ["10.0.0.5"], "the proxy's ready pods only");
    let port = slice.ports.as_ref().unwrap()[0].clone();
    assert_eq!(port.name.as_deref(), Some("http"));
    assert!((21000..=21009).contains(&port.port.unwrap()), "{port:?}");
    assert_eq!(
        slice.metadata.annotations.as_ref().unwrap()[HOLD_ANNOTATION],
        "20"
    );
    let t = tdset_with_reason(&client, n, "web", "Degraded", "WakeOnRequestRefused").await;
    let degraded = condition(&t, "Degraded").unwrap();
    assert!(
        degraded.message.contains("Service db is headless"),
        "{}",
        degraded.message
    );
    assert!(
        (degraded.message)
            .contains("Service other selects none of the pods of the TDSet's workloads"),
        "{}",
        degraded.message
    );
    wait_for_event(&client, n, "web", |(kind, reason, _)| {
        kind == "Warning" && reason == "WakeOnRequestRefused"
    })
    .await;

    // `ignore` given to the proxy through the slice, and taken off it once the TDSet has none.
    let tdsets: Api<tdset_operator::api::TDSet> = Api::namespaced(client.clone(), n);
    let ignore = |rules: serde_json::Value| {
        let tdsets = tdsets.clone();
        async move {
            let patch = json!({"spec": {"wakeOnRequest": {"ignore": rules}}});
            (tdsets.patch("web", &Default::default(), &kube::api::Patch::Merge(&patch)))
                .await
                .expect("changing the TDSet's ignore rules");
        }
    };
    let c = &client;
    let ignored = |want: bool| async move {
        eventually(
            GUARD,
            &format!("ignore rules on the slice: {want}"),
            || async {
                let slices = ours(c, n).await;
                let on = slices
                    .first()?
                    .metadata
                    .annotations
                    .as_ref()?
                    .contains_key(IGNORE_ANNOTATION);
                (on == want).then_some(())
            },
        )
        .await
    };
    ignore(json!({"paths": ["/healthz"]})).await;
    ignored(true).await;
    ignore(serde_json::Value::Null).await;
    ignored(false).await;

    // A request wakes it; once its own endpoints are ready the proxy leaves the path.
    let proxy_token = token(n, "wake-proxy", Some(AUDIENCE));
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-m",
            "10",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-H", &format!("Authorization: Bearer {proxy_token}")])
        .args([
            "-d",
            &json!({"namespace": n, "tdset": "web", "service": "web", "requests": 1,
                             "request": {"service": "web"}})
            .to_string(),
        ])
        .arg(format!("http://{addr}/v1/wake"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"written\":true"));
    let _: Deployment = deployment_at(&client, n, "web", 2).await;
    // Slices of the Service with no ready endpoint, named before its ready one: the operator
    // reads them a page at a time (10) and must page on to find the ready one.
    for i in 0..25 {
        let _: EndpointSlice = create_object(
            &client,
            n,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("web-0{i:02}"),
                                "labels": {"kubernetes.io/service-name": "web"}},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [format!("10.0.2.{i}")], "conditions": {"ready": false}}],
                   "ports": [{"name": "http", "port": 80}]}),
        )
        .await;
    }
    // Still in the path: the workload's own endpoints are not ready yet.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(ours(&client, n).await.len(), 1, "kept while waking");
    own_endpoint_ready(&client, n, "web").await;
    eventually(
        GUARD,
        "the operator's slice out of the path once web's own endpoint is ready",
        || async { out_of_the_path(&ours(&client, n).await).then_some(()) },
    )
    .await;
    ns.cleanup().await;
}

/// A TDSet deleted while its workload sleeps behind the proxy, with `onDelete: Restore`: the
/// workload gets its own count back, and the TDSet (and the slice that goes with it) stays
/// until the Service's own endpoints are ready, so the Service is never left with no endpoint
/// (finding 8 of the wake proxy's review: the finalizer went at once, and the garbage
/// collector removed the slice while the woken pods were not ready); then nothing of the
/// operator's is left in the Service's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tdset_deleted_while_asleep_gives_the_count_back_and_its_slice_goes_once_the_service_answers()
 {
    let (client, ns) = setup("wake-slices-deleted").await;
    let n = &ns.name;
    let proxy = proxy_in(&client, n, (21010, 21019)).await;
    app_behind_its_service(&client, n, "web", 3).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "onDelete": "Restore",
        "defaultReplica": 0,
        "schedulingConfig": [],
        "wakeOnRequest": {"services": [{"name": "web"}]}
    });
    create_tdset(&client, n, &tdset("web", spec)).await;
    deployment_at(&client, n, "web", 0).await;
    assert_eq!(ours(&client, n).await.len(), 1, "the proxy in the path");

    let tdsets = Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), n);
    tdsets.delete("web", &Default::default()).await.unwrap();
    deployment_at(&client, n, "web", 3).await;
    // Its pods not ready yet: the TDSet waits, its slice still standing in for the Service.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        tdsets.get_opt("web").await.unwrap().is_some(),
        "the TDSet went while its Service had no endpoint of its own"
    );
    let slices = ours(&client, n).await;
    assert!(
        slices.len() == 1 && !slices[0].endpoints.is_empty(),
        "{slices:?}"
    );
    own_endpoint_ready(&client, n, "web").await;
    tdset_gone(&client, n, "web").await;
    eventually(
        GUARD,
        "the operator's slice gone with its TDSet",
        || async { ours(&client, n).await.is_empty().then_some(()) },
    )
    .await;
    ns.cleanup().await;
}

/// Finding 3 of the wake proxy's review: a woken Service gave its proxy port up at once,
/// while the proxy still routed the port to it for 90 s, so the next Service given the port
/// got the first one's late requests. Now its slice leaves the path emptied and the port stays
/// taken until the slice goes (90 s later): only then is it another Service's. With one port
/// in the range: `api` is refused while `web`'s retired slice holds it, then given it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_services_proxy_port_is_given_to_another_only_once_its_slice_has_gone() {
    let (client, ns) = setup("wake-slices-retire").await;
    let n = &ns.name;
    const PORT: i32 = 21090;
    let holds_the_port = |slices: &[EndpointSlice]| holds_port(slices, PORT);
    let _op = web_holding_the_one_port(&client, n, PORT as u16).await;

    // web awake all night from now on, its own endpoint ready: out of the path, the port
    // still its own.
    let tdsets = Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), n);
    let merge = |spec: serde_json::Value| {
        let tdsets = tdsets.clone();
        async move {
            tdsets
                .patch(
                    "web",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(spec),
                )
                .await
                .unwrap()
        }
    };
    merge(json!({"spec": {"defaultReplica": 2}})).await;
    deployment_at(&client, n, "web", 2).await;
    own_endpoint_ready(&client, n, "web").await;
    eventually(GUARD, "web's slice retired, its port kept", || async {
        let web = of(ours(&client, n).await, "web");
        (!web.is_empty() && out_of_the_path(&web) && holds_the_port(&web)).then_some(())
    })
    .await;

    // api reconciled again (its spec changed) while web's slice is there: still refused.
    tdsets
        .patch(
            "api",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"wakeOnRequest": {"hold": "20s"}}})),
        )
        .await
        .unwrap();
    let api: tdset_operator::api::TDSet = object_where(
        &client,
        n,
        "api",
        "api reconciled at generation 2",
        |t: &tdset_operator::api::TDSet| {
            t.status.as_ref().and_then(|s| s.observed_generation) == Some(2)
        },
    )
    .await;
    // Read after api's status: if web's slice is still there, it was there when api was
    // reconciled (a loaded machine may have taken the 90 s meanwhile).
    let now = ours(&client, n).await;
    if holds_the_port(&of(now.clone(), "web")) {
        assert!(
            of(now, "api").is_empty(),
            "api given a port web's retired slice holds"
        );
        let degraded = condition(&api, "Degraded").expect("api Degraded");
        assert!(
            degraded
                .message
                .contains("every port of the wake proxy's range is taken"),
            "{}",
            degraded.message
        );
    }

    // web's slice gone (90 s after it left the path): api is given the port, looked at again
    // without a change of its own.
    eventually(
        GUARD * 3,
        "api given the port once web's slice has gone",
        || async {
            let now = ours(&client, n).await;
            (of(now.clone(), "web").is_empty() && holds_the_port(&of(now, "api"))).then_some(())
        },
    )
    .await;
    ns.cleanup().await;
}

/// The rest of finding 3: a TDSet deleted while its Service sleeps behind the proxy has no
/// finalizer to wait on, so the garbage collector takes its slice at once, while the proxy
/// routes the port to that Service for 90 s more. The port is not handed to another Service
/// until then (before: at the other's next look, 30 s later at most, and kube-proxy's late
/// connections for the deleted Service's clients reached the other namespace's pods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tdsets_proxy_port_is_given_to_another_only_90_s_after_its_slice_went() {
    let (client, ns) = setup("wake-slices-deleted-port").await;
    let n = &ns.name;
    const PORT: i32 = 21091;
    let holds_the_port = |slices: &[EndpointSlice]| holds_port(slices, PORT);
    let _op = web_holding_the_one_port(&client, n, PORT as u16).await;

    // web deleted (no finalizer: its target is kept as it is): its slice goes at once.
    let deleted_at = chrono::Utc::now();
    let tdsets = Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), n);
    tdsets.delete("web", &Default::default()).await.unwrap();
    let api_slice = eventually(
        GUARD * 4,
        "api given the port once the proxy has let web's route go",
        || async {
            let now = ours(&client, n).await;
            let api = of(now.clone(), "api");
            (of(now, "web").is_empty() && holds_the_port(&api)).then(|| api[0].clone())
        },
    )
    .await;
    // Not before the proxy's 90 s were over: the slice's deletion came after the TDSet's (both
    // in whole seconds, as the API server keeps a creation time).
    let created = api_slice.metadata.creation_timestamp.unwrap().0.as_second();
    let deleted = deleted_at.timestamp();
    assert!(
        created >= deleted + 90,
        "api given web's port {} s after web's deletion",
        created - deleted
    );
    ns.cleanup().await;
}

/// Meshes that would black-hole a sleeping Service (the wake proxy's review), on the real API
/// server with Istio's CRDs from its published module (nothing of Istio runs; the operator
/// reads what a mesh marks): the namespace with Istio's sidecars and a STRICT
/// PeerAuthentication, so the pods would refuse the proxy's plain connection. The Service is
/// refused before it sleeps, Degraded naming the policy, and nothing is put in its path; the
/// policy made PERMISSIVE, the proxy goes in front of it at the next look; the namespace then
/// put in the ambient mesh, its slice leaves the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_a_mesh_would_black_hole_is_refused_before_it_sleeps() {
    let (client, ns) = setup("wake-slices-mesh").await;
    let n = &ns.name;
    install_istio_crds(&client).await;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let label_namespace = |labels: serde_json::Value| {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .patch(
                    n,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await
                .unwrap();
        }
    };
    label_namespace(json!({"istio-injection": "enabled"})).await;
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("security.istio.io", "v1", "PeerAuthentication"),
        "peerauthentications",
    );
    let policies: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), n, &resource);
    let policy = |mode: &str| -> kube::api::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
            "metadata": {"name": "default"},
            "spec": {"mtls": {"mode": mode}},
        }))
        .unwrap()
    };
    let apply_policy = |mode: &'static str| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    "default",
                    &kube::api::PatchParams::apply("tdset-tests").force(),
                    &kube::api::Patch::Apply(policy(mode)),
                )
                .await
                .unwrap();
        }
    };
    apply_policy("STRICT").await;

    let proxy = proxy_in(&client, n, (21092, 21093)).await;
    app_behind_its_service(&client, n, "web", 2).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    create_tdset(&client, n, &tdset("web", by_day_over("web"))).await;
    let message = degraded_for(&client, n, "web", "WakeOnRequestRefused").await;
    assert!(
        message.contains(&format!("STRICT mTLS (PeerAuthentication {n}/default)")),
        "{message}"
    );
    assert!(ours(&client, n).await.is_empty(), "a slice in the path");

    // A change of the TDSet's own: looked at again at once (a mesh's labels and policies are
    // watched by nobody; a refused TDSet looks again every 5 minutes).
    let touch = |interval: i32| {
        let tdsets = Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), n);
        async move {
            tdsets
                .patch(
                    "web",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"intervalMint": interval}})),
                )
                .await
                .unwrap();
        }
    };
    // PERMISSIVE: the proxy's connection is let in; in front of the Service at the next look.
    apply_policy("PERMISSIVE").await;
    touch(7).await;
    eventually(GUARD * 2, "web's slice in the path", || async {
        let slices = ours(&client, n).await;
        (!slices.is_empty() && !out_of_the_path(&slices)).then_some(())
    })
    .await;

    // Istio's ambient mode on the namespace: ztunnel would not read the slice. It leaves the
    // path, and Degraded says why.
    label_namespace(json!({"istio-injection": null, "istio.io/dataplane-mode": "ambient"})).await;
    touch(8).await;
    object_where(
        &client,
        n,
        "web",
        "Degraded for Istio's ambient mesh",
        |t: &tdset_operator::api::TDSet| {
            condition(t, "Degraded").is_some_and(|c| {
                c.reason == "WakeOnRequestRefused" && c.message.contains("Istio's ambient mesh")
            })
        },
    )
    .await;
    eventually(GUARD * 2, "web's slice out of the path", || async {
        out_of_the_path(&ours(&client, n).await).then_some(())
    })
    .await;
    ns.cleanup().await;
}

/// The Service's own slice with one ready endpoint, as the EndpointSlice controller writes it
/// once a pod is ready.
async fn own_endpoint_ready(client: &Client, n: &str, service: &str) {
    let _: EndpointSlice = create_object(
        client,
        n,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{service}-abcde"),
                            "labels": {"kubernetes.io/service-name": service,
                                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.1.7"], "conditions": {"ready": true},
                              "targetRef": {"kind": "Pod", "namespace": n, "name": format!("{service}-1")}}],
               "ports": [{"name": "http", "port": 80}]}),
    )
    .await;
}

/// A one-port range (`port`): TDSets `web` and `api` over Deployments behind Services of their
/// names, both asleep at night; `web` holds the port, `api` is refused for want of one. The
/// operator, to keep.
async fn web_holding_the_one_port(client: &Client, n: &str, port: u16) -> Operator {
    let proxy = proxy_in(client, n, (port, port)).await;
    app_behind_its_service(client, n, "web", 2).await;
    app_behind_its_service(client, n, "api", 2).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let op = Operator::start_configured(client, n, clock, |o| o.wake_proxy = Some(proxy));
    create_tdset(client, n, &tdset("web", by_day_over("web"))).await;
    deployment_at(client, n, "web", 0).await;
    assert!(holds_port(
        &of(ours(client, n).await, "web"),
        i32::from(port)
    ));
    // api, asleep too, finds the one port taken.
    create_tdset(client, n, &tdset("api", by_day_over("api"))).await;
    tdset_with_reason(client, n, "api", "Degraded", "WakeOnRequestRefused").await;
    op
}

/// Those of `slices` that are Service `svc`'s.
fn of(slices: Vec<EndpointSlice>, svc: &str) -> Vec<EndpointSlice> {
    (slices.into_iter())
        .filter(|s| {
            (s.metadata.labels.as_ref())
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .is_some_and(|name| name == svc)
        })
        .collect()
}

/// Whether one of `slices` names proxy port `port`.
fn holds_port(slices: &[EndpointSlice], port: i32) -> bool {
    (slices.iter())
        .flat_map(|s| s.ports.iter().flatten())
        .any(|p| p.port == Some(port))
}

/// Deployment `app` (at `replicas`) and its Service (port `http`, selecting its pods).
async fn app_behind_its_service(client: &Client, n: &str, app: &str, replicas: i32) {
    let _: Deployment = create_object(client, n, app_deployment(app, replicas)).await;
    let _: Service = create_object(
        client,
        n,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": app},
               "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
}

/// A TDSet over Deployment `app`, at 2 from 08:00 to 18:00 and asleep otherwise, woken by
/// requests to Service `app`.
fn by_day_over(app: &str) -> serde_json::Value {
    json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "08:00", "endTime": "18:00", "replica": 2}],
        "wakeOnRequest": {"services": [{"name": app}]}
    })
}

/// The wake proxy's pods moving (a rollout, a node drained) while Services sleep behind it:
/// every slice of every TDSet gains the new pod, then loses the one that stops, without a
/// reconcile of its own being due (asleep for the night, nothing else changes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_pods_that_move_join_every_slice_before_the_old_ones_leave() {
    let (client, ns) = setup("wake-slices-moved").await;
    let n = &ns.name;
    let proxy = proxy_in(&client, n, (21020, 21029)).await;
    for app in ["web", "api"] {
        app_behind_its_service(&client, n, app, 2).await;
    }
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    for app in ["web", "api"] {
        create_tdset(&client, n, &tdset(app, by_day_over(app))).await;
        deployment_at(&client, n, app, 0).await;
    }
    let named = |want: &'static [&'static str]| {
        let client = client.clone();
        async move {
            let slices = ours(&client, n).await;
            let all: Vec<Vec<String>> = (slices.iter())
                .map(|s| {
                    let mut a: Vec<String> = s
                        .endpoints
                        .iter()
                        .flat_map(|e| e.addresses.clone())
                        .collect();
                    a.sort();
                    a
                })
                .collect();
            (all.len() == 2 && all.iter().all(|a| a == want)).then_some(())
        }
    };
    eventually(GUARD, "both slices name the proxy's ready pod", || {
        named(&["10.0.0.5"])
    })
    .await;

    // A new proxy pod ready beside the old one (a rollout's surge): in every slice.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    let proxy_pods = |endpoints: serde_json::Value| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "proxy-1", "labels": {"kubernetes.io/service-name": "proxy"}},
               "addressType": "IPv4", "endpoints": endpoints, "ports": [{"port": 20000}]})
    };
    let apply = |body: serde_json::Value| {
        let slices = slices.clone();
        async move {
            slices
                .patch(
                    "proxy-1",
                    &kube::api::PatchParams::apply("test.example").force(),
                    &kube::api::Patch::Apply(body),
                )
                .await
                .unwrap();
        }
    };
    apply(proxy_pods(json!([
        {"addresses": ["10.0.0.5"], "conditions": {"ready": true}},
        {"addresses": ["10.0.0.7"], "conditions": {"ready": true}}])))
    .await;
    eventually(GUARD, "the new proxy pod in every slice", || {
        named(&["10.0.0.5", "10.0.0.7"])
    })
    .await;

    // The old one stopping (terminating, still serving what it holds): out of every slice.
    apply(proxy_pods(json!([
        {"addresses": ["10.0.0.5"], "conditions": {"ready": false, "serving": true, "terminating": true}},
        {"addresses": ["10.0.0.7"], "conditions": {"ready": true}}]))).await;
    eventually(GUARD, "the stopping proxy pod out of every slice", || {
        named(&["10.0.0.7"])
    })
    .await;
    ns.cleanup().await;
}

/// Two Services' slices naming one proxy port (what two operators whose port ranges overlap
/// leave when they give out a port at the same moment): the proxy sends its connections to the
/// older slice's Service, so the younger slice moves to a port of its own; the older keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_two_services_slices_name_stays_with_the_older_and_the_younger_moves() {
    let (client, ns) = setup("wake-slices-contest").await;
    let n = &ns.name;
    let proxy = proxy_in(&client, n, (21030, 21039)).await;
    for app in ["web", "api"] {
        app_behind_its_service(&client, n, app, 2).await;
    }
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    let port_of = |svc: &'static str| {
        let slices = slices.clone();
        async move {
            let s = slices
                .get_opt(&format!("{svc}-tdset-wake-ipv4"))
                .await
                .ok()??;
            s.ports?.first()?.port
        }
    };
    let mut older = 0;
    for app in ["web", "api"] {
        create_tdset(&client, n, &tdset(app, by_day_over(app))).await;
        let port = eventually(GUARD, "the operator's slice", || port_of(app)).await;
        if app == "web" {
            older = port;
            // A second apart at least: creation times are whole seconds.
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        } else {
            assert_ne!(port, older, "one operator gives a port once");
        }
    }
    // api's slice made to name web's port, as a racing second operator would have made it.
    slices
        .patch(
            "api-tdset-wake-ipv4",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"ports": [{"name": "http", "port": older, "protocol": "TCP"}]}),
            ),
        )
        .await
        .unwrap();
    let moved = eventually(GUARD, "the younger slice on a port of its own", || async {
        let port = port_of("api").await?;
        (port != older).then_some(port)
    })
    .await;
    assert!((21030..=21039).contains(&moved), "{moved}");
    assert_eq!(
        port_of("web").await,
        Some(older),
        "the older slice keeps its port"
    );
    ns.cleanup().await;
}

/// The slice follows what the workload is, not what the schedule says: a TDSet suspended at
/// night writes no count, so its workload runs and nothing of the operator's is put in front
/// of it (before, the intercept stage decided on the evaluated 0 and the proxy stood in every
/// request's path all night). Resumed, the slice is in place before the count goes to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_tdset_at_night_puts_nothing_in_front_of_its_running_workload() {
    let (client, ns) = setup("wake-slices-suspended").await;
    let n = &ns.name;
    let proxy = proxy_in(&client, n, (21020, 21029)).await;
    app_behind_its_service(&client, n, "web", 3).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "suspend": true,
        "defaultReplica": 0,
        "schedulingConfig": [],
        "wakeOnRequest": {"services": [{"name": "web"}]}
    });
    create_tdset(&client, n, &tdset("web", spec)).await;
    // Reconciled (its status written after the intercept stage ran): nothing in the path.
    let _: tdset_operator::api::TDSet = object_where(
        &client,
        n,
        "web",
        "the TDSet reconciled",
        |t: &tdset_operator::api::TDSet| {
            t.status.as_ref().and_then(|s| s.observed_generation) == Some(1)
        },
    )
    .await;
    assert!(
        ours(&client, n).await.is_empty(),
        "a slice in front of a running workload"
    );
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(web.spec.and_then(|s| s.replicas), Some(3));

    Api::<tdset_operator::api::TDSet>::namespaced(client.clone(), n)
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    let asleep = deployment_at(&client, n, "web", 0).await;
    let slices = ours(&client, n).await;
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert!(
        rv(&slices[0].metadata) < rv(&asleep.metadata),
        "made before break"
    );
    ns.cleanup().await;
}

/// With no wake proxy pod ready (an outage, the proxy not yet started), nothing could stand
/// in for a sleeping Service, so its workload is not put to sleep: it stays at its count,
/// `Degraded` with `WakeProxyNotReady` and a Warning. Once a proxy pod is ready the slice is
/// in place before the count goes to 0. (Before, the workload went to 0 behind a slice that
/// named nobody, and nothing said so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_proxy_ready_the_workload_is_kept_awake_and_says_why() {
    let (client, ns) = setup("wake-slices-no-proxy").await;
    let n = &ns.name;
    let proxy = proxy_in(&client, n, (21030, 21039)).await;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    let proxy_pods = |ready: bool| json!({"endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": ready}}]});
    slices
        .patch(
            "proxy-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(proxy_pods(false)),
        )
        .await
        .unwrap();
    app_behind_its_service(&client, n, "web", 3).await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start_configured(&client, n, clock, |o| o.wake_proxy = Some(proxy));
    let spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "defaultReplica": 0,
        "schedulingConfig": [],
        "wakeOnRequest": {"services": [{"name": "web"}]}
    });
    create_tdset(&client, n, &tdset("web", spec)).await;
    let message = degraded_for(&client, n, "web", "WakeProxyNotReady").await;
    assert!(
        message.contains("Service web") && message.contains("not put to sleep"),
        "{message}"
    );
    wait_for_event(&client, n, "web", |(kind, reason, _)| {
        kind == "Warning" && reason == "WakeProxyNotReady"
    })
    .await;
    let web: Deployment = Api::namespaced(client.clone(), n).get("web").await.unwrap();
    assert_eq!(web.spec.and_then(|s| s.replicas), Some(3), "kept awake");
    assert!(ours(&client, n).await.is_empty(), "no slice naming nobody");

    slices
        .patch(
            "proxy-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(proxy_pods(true)),
        )
        .await
        .unwrap();
    let asleep = deployment_at(&client, n, "web", 0).await;
    let ours = ours(&client, n).await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    let named: Vec<&String> = ours[0]
        .endpoints
        .iter()
        .flat_map(|e| &e.addresses)
        .collect();
    assert_eq!(named, ["10.0.0.5"]);
    assert!(
        rv(&ours[0].metadata) < rv(&asleep.metadata),
        "made before break"
    );
    ns.cleanup().await;
}
