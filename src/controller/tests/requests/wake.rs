//! Wake on request: the wake-up's writes, and the slices that put the proxy in the path.

use super::*;

/// A TDSet asleep at night woken by a request: the owned Deployment is scaled to the count it
/// wakes to, and the status write carries only the reconcile's part of `requestWake` (its
/// phase): what the wake endpoint wrote is never written back, stale or not. Once the cache
/// holds that status, nothing is sent.
#[tokio::test(start_paused = true)]
async fn a_request_wake_up_scales_and_writes_only_its_phase_back() {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}],
        "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"},
    }));
    t.status = Some(
        serde_json::from_value(json!({
            "requestWake": {"since": "2026-11-26T09:55:00Z", "until": "2026-11-26T10:25:00Z",
                            "requests": 4,
                            "request": {"service": "web:http", "method": "GET", "path": "/"}},
        }))
        .unwrap(),
    );
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    assert_eq!(
        sent[0].body["spec"]["replicas"], 3,
        "woken to the next window's count"
    );
    let status = &sent[1].body["status"];
    assert_eq!(
        status["requestWake"],
        json!({"phase": "Waking"}),
        "{status:#}"
    );
    assert_eq!(status["nextTransitionTime"], "2026-11-26T10:25:00Z");
    assert_eq!(status["nextReplicas"], 0);
    // The Deployment made at the wake-up's count: the wake-up is in the history at once.
    assert_eq!(status["history"][0]["to"], 3, "{status:#}");
    assert_eq!(status["history"][0]["from"], 0, "{status:#}");
    assert!(
        (status["history"][0]["reason"].as_str())
            .is_some_and(|r| r.starts_with("woken by a request")),
        "{status:#}"
    );

    // The watch brings back the status as stored: both managers' fields; nothing is sent.
    operator.deployments(vec![created(&sent[0].body)]);
    let mut stored = status.clone();
    stored["requestWake"] = json!({"phase": "Waking", "since": "2026-11-26T09:55:00Z",
        "until": "2026-11-26T10:25:00Z", "requests": 4,
        "request": {"service": "web:http", "method": "GET", "path": "/"}});
    t.status = serde_json::from_value(stored).unwrap();
    t.metadata.resource_version = Some("3".into());
    server.clear();
    operator.reconcile(&t).await.unwrap();
    assert_eq!(server.all().len(), 0, "{:#?}", server.all());
}

/// The leader that woke the workload for a request stopped before its status was written (its
/// write landed, its status did not): the next leader finds the Deployment at the wake-up's
/// count with 0 on record, writes nothing to it, and records the wake-up in the history, once,
/// saying it was found applied.
#[tokio::test(start_paused = true)]
async fn a_wake_up_whose_status_was_lost_is_recorded_as_found() {
    let server = ApiServer::start();
    let mut t = tdset(json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "defaultReplica": 0,
        "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}],
        "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "30m"},
    }));
    t.status = Some(
        serde_json::from_value(json!({
            "desiredReplicas": 0,
            "history": [{"at": "2026-11-25T13:00:00Z", "to": 0, "reason": "no window is active"}],
            "requestWake": {"since": "2026-11-26T09:55:00Z", "until": "2026-11-26T10:25:00Z",
                            "requests": 1, "request": {"service": "web:http"}},
        }))
        .unwrap(),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "3"));
    let mut operator = Operator::at(&server, NOW);
    // The previous leader's write, as the watch shows it.
    let woken = crate::workload::owned::desired_deployment(&t, 3)
        .unwrap()
        .unwrap();
    operator.deployments(vec![created(&serde_json::to_value(&woken).unwrap())]);

    operator.reconcile(&t).await.unwrap();

    let sent = server.sent();
    assert_eq!(sent.len(), 1, "the status alone: {:#?}", server.requests());
    let entry = &sent[0].body["status"]["history"][0];
    assert_eq!(
        (entry["from"].clone(), entry["to"].clone()),
        (json!(0), json!(3)),
        "{entry:#}"
    );
    assert!(
        entry["reason"]
            .as_str()
            .unwrap()
            .contains("woken by a request"),
        "{entry:#}"
    );
    assert!(
        entry["message"].as_str().unwrap().contains("found applied"),
        "{entry:#}"
    );
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices";
const PROXY_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/tdset-system/endpointslices";

/// The wake proxy the operator points its slices at: Service `tdset-system/wake-proxy`.
fn wake_proxy() -> Option<crate::controller::state::WakeProxyRef> {
    Some(crate::controller::state::WakeProxyRef {
        namespace: "tdset-system".into(),
        service: "wake-proxy".into(),
        ports: (20000, 20255),
        per_namespace: 64,
        trusted: vec!["endpointslice-controller.k8s.io".into()],
    })
}

/// Service `web` (port `http` 80 to the pods' 8080), one IPv4 ClusterIP.
fn web_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-svc", "resourceVersion": "30"},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"},
                 "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"], "ipFamilies": ["IPv4"],
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    })
}

/// A list of EndpointSlices of Service `service` in `ns`, each `(address, ready)` one endpoint.
fn slice_list(ns: &str, service: &str, endpoints: &[(&str, bool)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "40"},
        "items": [{
            "metadata": {"name": format!("{service}-abcde"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": endpoints.iter().map(|(ip, ready)| json!({
                "addresses": [ip], "conditions": {"ready": ready}})).collect::<Vec<_>>(),
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }],
    })
}

/// TDSet `t` over Deployment `web` (at 3) with `schedule` and `wakeOnRequest` for Service
/// `web`, and the API server answering the form's reads, Service `web`, the proxy's pods
/// (`proxies`: address, ready) and the TDSet's status.
fn intercepted(schedule: Value, proxies: &[(&str, bool)]) -> (ApiServer, TDSet) {
    intercepted_service(schedule, proxies, web_service())
}

/// Namespace `ns` with no mesh marked on it (read before a Service sleeps behind the proxy).
fn namespace_without_mesh(server: &ApiServer) {
    server.returns(
        "GET",
        "/api/v1/namespaces/ns",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "ns", "labels": {"kubernetes.io/metadata.name": "ns"}}}),
    );
}

/// `intercepted`, Service `web` being `service`.
fn intercepted_service(
    schedule: Value,
    proxies: &[(&str, bool)],
    service: Value,
) -> (ApiServer, TDSet) {
    let server = ApiServer::start();
    server.returns("GET", "/apis/apps/v1", apps_v1());
    server.returns("GET", &format!("{DEPLOYMENTS}/web"), web(3));
    let mut spec = schedule;
    spec["scaleTargetRef"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    spec["wakeOnRequest"] = json!({"services": [{"name": "web"}]});
    let t = tdset(spec);
    server.returns(
        "GET",
        &format!("{TDSETS}/t"),
        serde_json::to_value(&t).unwrap(),
    );
    server.returns("GET", "/api/v1/namespaces/ns/services/web", service);
    namespace_without_mesh(&server);
    server.lists(
        PROXY_SLICES,
        "kubernetes.io/service-name=wake-proxy",
        slice_list("tdset-system", "wake-proxy", proxies),
    );
    server.on("PATCH", &format!("{TDSETS}/t/status"), patched(&t, "11"));
    (server, t)
}

/// `intercepted_service`'s TDSet at night (awake 12:00-13:00 only, the count still 3): the
/// slice's apply and the write to 0 answered; an operator pointing slices at the wake proxy.
fn going_to_sleep(proxies: &[(&str, bool)], service: Value) -> (ApiServer, TDSet, Operator) {
    let (server, t) = intercepted_service(
        json!({"defaultReplica": 0,
               "schedulingConfig": [{"startTime": "12:00", "endTime": "13:00", "replica": 3}]}),
        proxies,
        service,
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/web-tdset-wake-ipv4"),
        echo("41"),
    );
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(0, "12"))
    });
    let operator = Operator::with_wake_proxy(&server, NOW, wake_proxy());
    (server, t, operator)
}

/// The watch brings the slice back (`stored`, at revision 41) and the count is 0: the next
/// reconcile reads the proxy's pods again but writes no slice.
async fn not_written_again(
    server: &ApiServer,
    operator: &mut Operator,
    t: &TDSet,
    mut stored: Value,
) {
    stored["metadata"]["namespace"] = json!("ns");
    stored["metadata"]["resourceVersion"] = json!("41");
    operator.wake_slices(vec![stored]);
    operator.deployments(vec![web(0)]);
    server.clear();
    operator.reconcile(t).await.unwrap();
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.contains("endpointslices/web-tdset-wake")),
        "written again: {:#?}",
        server.requests()
    );
}

/// Going to sleep, the operator's slice for the Service (the proxy's ready pod on a proxy
/// port) is applied before the write that takes the count to 0: the Service never has no
/// endpoint. A reconcile that finds it in place does not write it again.
#[tokio::test(start_paused = true)]
async fn going_to_sleep_the_proxy_is_put_in_the_path_before_the_count_goes_to_0() {
    let (server, t, mut operator) =
        going_to_sleep(&[("10.0.9.1", true), ("10.0.9.2", false)], web_service());

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    let at = |line: &str| {
        requests
            .iter()
            .position(|r| r == line)
            .unwrap_or_else(|| panic!("{line} not sent: {requests:#?}"))
    };
    let slice =
        at("PATCH /apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-tdset-wake-ipv4");
    let to_zero = at("PATCH /apis/apps/v1/namespaces/ns/deployments/web/scale");
    assert!(
        slice < to_zero,
        "the slice after the count went to 0: {requests:#?}"
    );
    let sent = server.sent();
    let applied = &sent[slice].body;
    assert!(
        sent[slice].query.contains("fieldManager="),
        "a server-side apply"
    );
    assert_eq!(
        applied["metadata"]["labels"]["kubernetes.io/service-name"],
        "web"
    );
    assert_eq!(
        applied["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "tdset.schedule.rs"
    );
    assert_eq!(applied["metadata"]["ownerReferences"][0]["uid"], "uid-t");
    // The proxy's ready pod only, marked ready explicitly; the Service's port name on a
    // proxy port of the range.
    assert_eq!(
        applied["endpoints"],
        json!([{"addresses": ["10.0.9.1"],
                 "conditions": {"ready": true, "serving": true, "terminating": false}}])
    );
    assert_eq!(applied["ports"][0]["name"], "http");
    let port = applied["ports"][0]["port"].as_i64().unwrap();
    assert!((20000..=20255).contains(&port), "{port}");

    // The watch brings the slice back: the next reconcile (the count already 0) reads the
    // proxy's pods again but writes no slice.
    not_written_again(&server, &mut operator, &t, applied.clone()).await;
}

/// A Service whose one port has no name: the API server stores the slice's port name as ""
/// (its defaulting, seen on kube-apiserver v1.36), so the slice the operator applies names it
/// "" too, and a reconcile that finds it stored does not write it again.
#[tokio::test(start_paused = true)]
async fn a_slice_for_an_unnamed_port_is_not_written_again_once_stored() {
    let mut svc = web_service();
    svc["spec"]["ports"] = json!([{"port": 80, "targetPort": 8080, "protocol": "TCP"}]);
    let (server, t, mut operator) = going_to_sleep(&[("10.0.9.1", true)], svc);
    operator.reconcile(&t).await.unwrap();
    let sent = server.sent();
    let apply = sent
        .iter()
        .find(|r| r.path.ends_with("/endpointslices/web-tdset-wake-ipv4"))
        .expect("the slice applied");
    let applied_name = apply.body["ports"][0]["name"].clone();

    // Stored as the API server stores it (the port's name "", the protocol TCP).
    let mut stored = apply.body.clone();
    stored["ports"][0]["name"] = json!("");
    not_written_again(&server, &mut operator, &t, stored).await;
    assert_eq!(applied_name, "");
}

/// Awake again (a window), the operator's slice stays while the Service's own endpoints are
/// not ready; once one is it leaves the path (applied with no endpoint, retired now), and is
/// deleted 90 s later: only then are its proxy ports free.
#[tokio::test(start_paused = true)]
async fn woken_the_slice_is_retired_once_the_services_own_endpoint_is_ready_and_goes_90_s_later() {
    let (server, t) = intercepted(json!({"defaultReplica": 3}), &[("10.0.9.1", true)]);
    server.on("PATCH", &format!("{DEPLOYMENTS}/web/scale"), |_| {
        (200, scale(3, "12"))
    });
    server.on("DELETE", &format!("{SLICES}/web-tdset-wake-ipv4"), |_| {
        status(200, "", "deleted")
    });
    // (The slice as cached here lacks what the operator puts on it: kept, it is refreshed.)
    server.on(
        "PATCH",
        &format!("{SLICES}/web-tdset-wake-ipv4"),
        echo("42"),
    );
    let ours = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-tdset-wake-ipv4", "namespace": "ns", "resourceVersion": "41",
                     "labels": {"kubernetes.io/service-name": "web",
                                "endpointslice.kubernetes.io/managed-by": "tdset.schedule.rs",
                                "schedule.rs/tdset": "t"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.9.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 20000, "protocol": "TCP"}],
    });
    let mut operator = Operator::with_wake_proxy(&server, NOW, wake_proxy());
    operator.wake_slices(vec![ours.clone()]);
    operator.deployments(vec![web(3)]);

    // Its own endpoint not ready yet: kept.
    server.lists(
        SLICES,
        "kubernetes.io/service-name=web",
        slice_list("ns", "web", &[("10.1.0.5", false)]),
    );
    operator.reconcile(&t).await.unwrap();
    assert!(
        !server.requests().iter().any(|r| r.starts_with("DELETE")),
        "{:#?}",
        server.requests()
    );
    // Only the slices of the managers the proxy trusts are asked for: a slice anyone else
    // writes for the Service (ready or not) never takes the proxy out of its path while the
    // proxy could relay nowhere (finding 9 of the wake proxy's review).
    let own: Vec<String> = (server.sent().into_iter())
        .filter(|s| s.method == "GET" && s.path == SLICES)
        .map(|s| s.query)
        .collect();
    assert!(
        !own.is_empty()
            && own.iter().all(|q| q.contains(
                "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by in (endpointslice-controller.k8s.io)"
            )),
        "{own:#?}"
    );

    // Ready: out of the path, retired now, not deleted.
    server.first(
        "GET",
        SLICES,
        slice_list("ns", "web", &[("10.1.0.5", true)]),
    );
    server.clear();
    operator.reconcile(&t).await.unwrap();
    let retire = (server.sent().into_iter())
        .rfind(|s| s.method == "PATCH" && s.path.ends_with("/endpointslices/web-tdset-wake-ipv4"))
        .expect("the slice applied retired");
    assert_eq!(retire.body["endpoints"], json!([]), "{:#}", retire.body);
    assert_eq!(
        retire.body["metadata"]["annotations"]["schedule.rs/wake-retired-at"],
        json!("2026-11-26T10:00:00+00:00")
    );
    assert_eq!(
        retire.body["ports"][0]["port"],
        json!(20000),
        "its port still taken"
    );
    assert!(
        !server.requests().iter().any(|r| r.starts_with("DELETE")),
        "{:#?}",
        server.requests()
    );

    // Retired 90 s ago (as the cache shows it): deleted, nothing else written for it.
    let mut retired = retire.body.clone();
    retired["metadata"]["resourceVersion"] = json!("43");
    retired["metadata"]["annotations"]["schedule.rs/wake-retired-at"] =
        json!("2026-11-26T09:58:30+00:00");
    operator.wake_slices(vec![retired]);
    server.clear();
    operator.reconcile(&t).await.unwrap();
    let slice_writes: Vec<String> = (server.requests().into_iter())
        .filter(|r| r.contains("/endpointslices/web-tdset-wake"))
        .collect();
    assert_eq!(
        slice_writes,
        ["DELETE /apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-tdset-wake-ipv4"],
        "{:#?}",
        server.requests()
    );
}

/// Two TDSets going to sleep at once, each with its own Service, the first one's slice not yet
/// in the watch cache when the second is planned: the second is not given the port the first
/// was (with one port in the range it is refused, never given the same one: the proxy would
/// send its requests to the other Service's pods).
#[tokio::test(start_paused = true)]
async fn a_port_handed_out_is_not_given_again_before_the_cache_has_it() {
    let server = ApiServer::start();
    for name in ["solo-a", "solo-b"] {
        // Each selects its TDSet's pods (the Deployment it owns).
        let mut svc = web_service();
        svc["metadata"]["name"] = json!(name);
        svc["spec"]["selector"] = json!({"schedule.rs/tdset": name});
        server.returns(
            "GET",
            &format!("/api/v1/namespaces/ns/services/{name}"),
            svc,
        );
    }
    namespace_without_mesh(&server);
    server.lists(
        PROXY_SLICES,
        "kubernetes.io/service-name=wake-proxy",
        slice_list("tdset-system", "wake-proxy", &[("10.0.9.1", true)]),
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/solo-a-tdset-wake-ipv4"),
        echo("41"),
    );
    server.on(
        "PATCH",
        &format!("{SLICES}/solo-b-tdset-wake-ipv4"),
        echo("42"),
    );
    server.on("POST", DEPLOYMENTS, |body| (201, created(body)));
    let mut operator = Operator::with_wake_proxy(
        &server,
        NOW,
        Some(crate::controller::state::WakeProxyRef {
            namespace: "tdset-system".into(),
            service: "wake-proxy".into(),
            ports: (20999, 20999),
            per_namespace: 64,
            trusted: vec!["endpointslice-controller.k8s.io".into()],
        }),
    );
    let mut given = Vec::new();
    for service in ["solo-a", "solo-b"] {
        let mut t = tdset(json!({
            "container": {"image": "nginx:1.27", "port": 8080},
            "defaultReplica": 0,
            "wakeOnRequest": {"services": [{"name": service}]},
        }));
        t.metadata.name = Some(service.into());
        t.metadata.uid = Some(format!("uid-{service}"));
        server.on(
            "PATCH",
            &format!("{TDSETS}/{service}/status"),
            patched(&t, "11"),
        );
        server.clear();
        operator.reconcile(&t).await.unwrap();
        given.extend(
            server
                .sent()
                .iter()
                .filter(|s| s.path.contains("/endpointslices/"))
                .map(|s| (service, s.body["ports"][0]["port"].clone())),
        );
    }
    assert_eq!(given, vec![("solo-a", json!(20999))], "{given:?}");
}

/// A Service in Istio's mesh under STRICT mTLS (the wake proxy's review: a mesh that would
/// black-hole a sleeping Service): the namespace has Istio's sidecars injected and a
/// mesh-wide PeerAuthentication is STRICT, so the pods would refuse the proxy's plain
/// connection. Read before the Service sleeps: no slice is put in the path, and Degraded says
/// why, naming the policy. Without a sidecar, no PeerAuthentication is read.
#[tokio::test(start_paused = true)]
async fn a_service_under_istios_strict_mtls_is_refused_before_it_sleeps() {
    let (server, t, mut operator) = going_to_sleep(&[("10.0.9.1", true)], web_service());
    server.first(
        "GET",
        "/api/v1/namespaces/ns",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "ns", "labels": {"istio-injection": "enabled"}}}),
    );
    let list = |ns: &str, items: Value| {
        json!({"apiVersion": "security.istio.io/v1", "kind": "PeerAuthenticationList",
               "metadata": {"resourceVersion": "1"}, "items": items, "namespace": ns})
    };
    server.returns(
        "GET",
        "/apis/security.istio.io/v1/namespaces/ns/peerauthentications",
        list("ns", json!([])),
    );
    server.returns(
        "GET",
        "/apis/security.istio.io/v1/namespaces/istio-system/peerauthentications",
        list(
            "istio-system",
            json!([{"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
                    "metadata": {"name": "default", "namespace": "istio-system"},
                    "spec": {"mtls": {"mode": "STRICT"}}}]),
        ),
    );

    operator.reconcile(&t).await.unwrap();

    let requests = server.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("endpointslices/web-tdset-wake")),
        "a slice put in the path: {requests:#?}"
    );
    let sent = server.sent();
    let status = &(sent.iter())
        .rfind(|r| r.path.ends_with("/tdsets/t/status"))
        .expect("a status written")
        .body["status"];
    let degraded = (status["conditions"].as_array().unwrap().iter())
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(degraded["reason"], "WakeOnRequestRefused", "{degraded:#}");
    let message = degraded["message"].as_str().unwrap();
    assert!(
        message.contains("STRICT mTLS (PeerAuthentication istio-system/default)"),
        "{message}"
    );

    // The same namespace without Istio's sidecar: its policies are not read at all.
    let (server, t, mut operator) = going_to_sleep(&[("10.0.9.1", true)], web_service());
    operator.reconcile(&t).await.unwrap();
    let requests = server.requests();
    assert!(
        !requests.iter().any(|r| r.contains("peerauthentications")),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.contains("endpointslices/web-tdset-wake")),
        "{requests:#?}"
    );
}
