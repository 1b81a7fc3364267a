//! Woken by a request, the wake proxy's side, on the real API server: the proxy (the built
//! binary, `tdset-operator wake-proxy`) reads only EndpointSlices. A connection on a proxy
//! port is held while the operator wakes the workload, then relayed to the Service's own
//! ready endpoint; a flood makes one wake-up; `hold` ends in a 503 with Retry-After; an
//! ignored request wakes nothing.
//!
//! The operator (in this process) keeps its slices for the Service; the Service's "own" slice,
//! which the EndpointSlice controller would write, is the test's, pointing at an HTTP server
//! in this process (kwok's pods have addresses nothing listens on), written by a manager the
//! proxy is told to trust.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use crate::wake::{AUDIENCE, asleep_at_night, endpoint_counted, endpoint_counted_at, token};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::Api;
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::WakeProxyRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// This machine's address that the API server takes in an EndpointSlice (not loopback).
fn host_ip() -> IpAddr {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace()
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .find(IpAddr::is_ipv4)
        .expect("an IPv4 address of this machine")
}

/// An HTTP server answering every request `hello from web`; the request heads it saw.
async fn upstream() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let heads = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                heads
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).to_string());
                let body = "hello from web\n";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

/// The world a proxy test runs in: the wake proxy's Service (one ready pod: this machine,
/// where the proxy binary listens), the TDSet `web` asleep at night with `wake_on_request`,
/// its Service `web` (port `http`, selecting the TDSet's pods; no EndpointSlice controller runs
/// here, so the test's slice is its only endpoint), the operator with the wake endpoint, and the proxy. Returns the proxy port the
/// operator gave `web`, and the proxy.
async fn proxied_world(
    client: &Client,
    n: &str,
    wake_on_request: serde_json::Value,
    log: &str,
    more: &[&str],
) -> (
    u16,
    std::sync::Arc<tdset_operator::telemetry::Metrics>,
    Operator,
    OperatorProcess,
) {
    let _: Service = create_object(
        client,
        n,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "proxy"},
               "spec": {"ports": [{"port": 20000}]}}),
    )
    .await;
    let _: EndpointSlice = create_object(
        client,
        n,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "proxy-1", "labels": {"kubernetes.io/service-name": "proxy"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [host_ip().to_string()], "conditions": {"ready": true}}],
               "ports": [{"port": 20000}]}),
    )
    .await;
    let _: Service = create_object(
        client,
        n,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"schedule.rs/tdset": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let port = free_port();
    let proxy = WakeProxyRef {
        namespace: n.to_string(),
        service: "proxy".into(),
        ports: (port, port),
        per_namespace: 64,
        // As the proxy is told (`own_slice`'s manager).
        trusted: vec!["test.example".into()],
    };
    let op = Operator::start_configured(client, n, clock, |o| o.wake_proxy = Some(proxy));
    let (addr, metrics) = endpoint_counted(client, n, clock).await;
    let mut t = asleep_at_night();
    t.spec.wake_on_request = Some(serde_json::from_value(wake_on_request).unwrap());
    create_tdset(client, n, &t).await;
    deployment_at(client, n, "web", 0).await;
    // The operator put the proxy in the path before the count went to 0.
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    let given = eventually(GUARD, "the operator's slice for web", || async {
        let s = api.get_opt("web-tdset-wake-ipv4").await.ok()??;
        u16::try_from(s.ports?.first()?.port?).ok()
    })
    .await;
    assert_eq!(given, port, "the one port of the range");
    let proxy = wake_proxy(n, port, &addr, log, more);
    (port, metrics, op, proxy)
}

/// The Service's own ready endpoint, as the EndpointSlice controller would write it once
/// the workload's pods are ready (by a manager the proxy is told to trust, as it trusts the
/// EndpointSlice controller).
async fn own_slice(client: &Client, ns: &str, svc: &str, port: u16) {
    let _: EndpointSlice = create_object(
        client,
        ns,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{svc}-own"),
                         "labels": {"kubernetes.io/service-name": svc,
                                    "endpointslice.kubernetes.io/managed-by": "test.example"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_ip().to_string()], "conditions": {"ready": true},
                           "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{svc}-0")}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }),
    )
    .await;
}

/// The wake proxy (the built binary) on 127.0.0.1, listening on `port` alone, reporting to
/// the endpoint at `addr` with a token of `ns/wake-proxy`, with `more` flags; ready once it
/// has read the slices.
fn wake_proxy(ns: &str, port: u16, addr: &str, log: &str, more: &[&str]) -> OperatorProcess {
    let proxy = wake_proxy_started(ns, port, addr, log, more);
    proxy.wait_ready(GUARD, &proxy.log);
    proxy
}

/// `wake_proxy`, not waited on.
fn wake_proxy_started(
    ns: &str,
    port: u16,
    addr: &str,
    log: &str,
    more: &[&str],
) -> OperatorProcess {
    let token_file = std::env::temp_dir().join(format!("{ns}-wake-token"));
    std::fs::write(&token_file, token(ns, "wake-proxy", Some(AUDIENCE))).unwrap();
    let ports = format!("{port}-{port}");
    let url = format!("http://{addr}");
    let mut extra = vec![
        "--ip",
        "127.0.0.1",
        "--ports",
        &ports,
        "--operator-url",
        &url,
        "--token-file",
        token_file.to_str().unwrap(),
        "--trust-endpoints-managed-by",
        "test.example",
    ];
    extra.extend_from_slice(more);
    OperatorProcess::launch(Launch {
        command: "wake-proxy",
        extra: &extra,
        ..Launch::new(&control_plane().kubeconfig, log)
    })
}

/// Sends `request` on a new connection to the proxy port and reads until it closes.
async fn call(port: u16, request: String) -> String {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(120), conn.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}

fn get(path: &str, agent: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: web.example\r\nUser-Agent: {agent}\r\nConnection: close\r\n\r\n"
    )
}

async fn tdset_status(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<tdset_operator::api::TDSetStatus> {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .get_status(name)
        .await
        .ok()
        .and_then(|t| t.status)
}

/// A proxy with nothing to intercept (no TDSet asks for it yet: the chart installs it before
/// any) says ready once its list is read and the operator's endpoint answers, so `helm install
/// --wait` and its PodDisruptionBudget see it ready. Scoped to an empty namespace, its list
/// holds no slice at all.
// Multi-threaded: the endpoint answers while `wait_ready` blocks its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_with_nothing_to_intercept_is_ready() {
    let (client, ns) = setup("wake-proxy-empty").await;
    let n = &ns.name;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let (addr, _metrics) = endpoint_counted(&client, n, clock).await;
    let log = format!("{n}-proxy.log");
    let _proxy = wake_proxy(n, free_port(), &addr, &log, &["--namespace", n]);
    ns.cleanup().await;
}

/// A proxy that cannot reach the operator's wake endpoint could wake nothing, so it says so
/// where a person looks: not ready (the operator leaves it out of new slices),
/// `tdset_wake_proxy_operator_reachable` 0, a warning in its log. Once the endpoint
/// answers, the proxy is ready. (The chart's proxy on a cluster without DNS, given a `.svc`
/// name, was ready and timed out at every report.)
// Multi-threaded: the endpoint answers while `wait_ready` blocks its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_cannot_reach_the_operator_is_not_ready_until_it_can() {
    let (client, ns) = setup("wake-proxy-unreached").await;
    let n = &ns.name;
    // Nothing listens there yet.
    let at = format!("127.0.0.1:{}", free_port());
    let log = format!("{n}-proxy.log");
    let proxy = wake_proxy_started(n, free_port(), &at, &log, &["--namespace", n]);
    eventually(
        GUARD,
        "the proxy's word that the operator is not reached",
        || async {
            let said = std::fs::read_to_string(&proxy.log).ok()?;
            said.contains("the operator's wake endpoint cannot be reached")
                .then_some(())
        },
    )
    .await;
    let (code, body) = proxy.get("/readyz").expect("the proxy's /readyz");
    assert_eq!(code, 503, "{body}");
    assert_eq!(proxy.metric("tdset_wake_proxy_operator_reachable"), 0.0);

    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _endpoint = endpoint_counted_at(&client, n, clock, &at).await;
    proxy.wait_ready(GUARD, &proxy.log);
    assert_eq!(proxy.metric("tdset_wake_proxy_operator_reachable"), 1.0);
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_requests_to_a_sleeping_service_is_held_wakes_it_once_and_each_is_relayed() {
    let (client, ns) = setup("wake-proxy").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "60s"});
    let (port, metrics, _op, proxy) = proxied_world(&client, n, wake, "wake-proxy.log", &[]).await;
    let (upstream_port, heads) = upstream().await;

    // 40 requests at once, while the workload sleeps: each is held.
    let calls: Vec<_> = (0..40)
        .map(|i| tokio::spawn(call(port, get(&format!("/page/{i}"), "curl/8.5"))))
        .collect();
    // One wake-up: the Deployment woken to its next count, from one report written; the
    // proxy sent a few reports at most (one per TDSet every 2 s), not one per request.
    deployment_at(&client, n, "web", 2).await;
    let wake = tdset_status(&client, n, "web")
        .await
        .unwrap()
        .request_wake
        .unwrap();
    let reports = |outcome: &str| metrics.wake_reports.with_label_values(&[outcome]).get();
    assert_eq!(reports("written"), 1);
    assert!(
        reports("extended-already") <= 4,
        "{}",
        reports("extended-already")
    );
    let request = wake.request.unwrap();
    assert_eq!(request.service, "web");
    assert_eq!(request.method.as_deref(), Some("GET"));
    assert!(request.path.unwrap().starts_with("/page/"));
    assert!(
        heads.lock().unwrap().is_empty(),
        "nothing relayed before an endpoint is ready"
    );

    // The Service's own endpoint ready: the operator takes the proxy out of the path, and
    // every request held meanwhile still reaches the workload, as sent, with the client's
    // address added and the connection closed after it.
    own_slice(&client, n, "web", upstream_port).await;
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    eventually(GUARD, "the proxy out of the path", || async {
        let ours = api.get_opt("web-tdset-wake-ipv4").await.ok()?;
        out_of_the_path(ours.as_slice()).then_some(())
    })
    .await;
    for c in calls {
        let answer = c.await.unwrap();
        assert!(answer.contains("hello from web"), "{answer}");
    }
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 40);
    assert!(
        heads
            .iter()
            .all(|h| h.contains("X-Forwarded-For: 127.0.0.1\r\n")),
        "{heads:?}"
    );
    assert!(
        heads.iter().all(|h| h.contains("Connection: close\r\n")),
        "{heads:?}"
    );
    assert!(
        heads.iter().all(|h| h.starts_with("GET /page/")),
        "{heads:?}"
    );
    // And one arriving late (kube-proxy elsewhere not yet caught up) is relayed too.
    let late = call(port, get("/late", "curl/8.5")).await;
    assert!(late.contains("hello from web"), "{late}");
    // What the proxy counted: 40 held and woken, one relayed at once, none held now. (A
    // connection is counted once both of its directions are done, a moment after its client
    // has read the answer: waited for, not read at once.)
    let connections = |o: &str| {
        proxy.metric(&format!(
            "tdset_wake_proxy_connections_total{{outcome=\"{o}\"}}"
        ))
    };
    eventually(GUARD, "every connection counted", || async {
        (connections("woken") + connections("relayed") >= 41.0).then_some(())
    })
    .await;
    assert_eq!(connections("woken"), 40.0);
    assert_eq!(connections("relayed"), 1.0);
    assert_eq!(proxy.metric("tdset_wake_proxy_held "), 0.0);
    assert_eq!(proxy.metric("tdset_wake_proxy_held_seconds_count"), 40.0);
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_ends_in_a_503_with_retry_after_and_an_ignored_request_wakes_nothing() {
    let (client, ns) = setup("wake-hold").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "2s",
                      "ignore": {"userAgents": ["(?i)bot"], "paths": ["/healthz"]}});
    let (port, _metrics, _op, proxy) = proxied_world(&client, n, wake, "wake-hold.log", &[]).await;

    // Probes and bots are answered, and wake nothing.
    for (path, agent) in [("/healthz", "kube-probe/1.34"), ("/", "Googlebot/2.1")] {
        let answer = call(port, get(path, agent)).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("does not wake it"), "{answer}");
    }
    // A bare connect that sends nothing (a port scanner's, a probe's) to a port whose clients
    // speak first (`http`): waited on as a head is, then closed, and it wakes nothing (before,
    // after 1 s of silence it was taken for a protocol where the server speaks first).
    let mut bare = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    assert!(
        closed_within(&mut bare, GUARD).await,
        "a silent connection is closed"
    );
    // Nor does a probe whose bytes are no HTTP request (a TLS hello sent to `http`).
    let mut probe = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    probe.write_all(b"\x16\x03\x01\x00\x05hello").await.unwrap();
    assert!(
        closed_within(&mut probe, GUARD).await,
        "a probe that is no HTTP request is closed"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let wake = tdset_status(&client, n, "web")
        .await
        .and_then(|s| s.request_wake);
    assert_eq!(
        wake, None,
        "an ignored request, a silent connection or a probe reported nothing"
    );

    // A request held past `hold` (its Service has no endpoint of its own): 503, and a
    // Retry-After of what is left of the expected time to Ready (no samples yet: the hold
    // again, less the 2 s held, at least 1 s).
    let answer = call(port, get("/", "curl/8.5")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("Retry-After: 1\r\n"), "{answer}");
    // It woke the workload all the same.
    deployment_at(&client, n, "web", 2).await;
    let connections = |o: &str| {
        proxy.metric(&format!(
            "tdset_wake_proxy_connections_total{{outcome=\"{o}\"}}"
        ))
    };
    assert_eq!(
        (connections("ignored"), connections("timed-out")),
        (4.0, 1.0)
    );
    ns.cleanup().await;
}

/// A proxy pod stopping (a rollout, a drain: SIGTERM) while it holds a request says it is not
/// ready, keeps its ports open (kube-proxy elsewhere may still send it a connection), relays
/// what it holds once the workload is ready, and only then exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_proxy_still_relays_what_it_holds_then_exits() {
    let (client, ns) = setup("wake-drain").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "60s"});
    let (port, _metrics, _op, mut proxy) =
        proxied_world(&client, n, wake, "wake-drain.log", &[]).await;
    let (upstream_port, heads) = upstream().await;
    let held = tokio::spawn(call(port, get("/held", "curl/8.5")));
    // Reported, so held: the workload is woken.
    deployment_at(&client, n, "web", 2).await;

    proxy.terminate();
    let not_ready = || async {
        let (code, _) = tokio::task::block_in_place(|| proxy.get("/readyz"))?;
        (code == 503).then_some(())
    };
    eventually(GUARD, "the stopping proxy not ready", not_ready).await;
    // Past the quiet spell a drain waits at least: what it holds keeps it serving.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(proxy.alive(), "the proxy exited holding a request");
    let late = tokio::spawn(call(port, get("/late", "curl/8.5")));

    own_slice(&client, n, "web", upstream_port).await;
    for (what, c) in [("held", held), ("late", late)] {
        let answer = c.await.unwrap();
        assert!(answer.contains("hello from web"), "{what}: {answer:?}");
    }
    assert_eq!(heads.lock().unwrap().len(), 2);
    // Drained: it exits by itself (a quiet spell after the last connection).
    let deadline = std::time::Instant::now() + GUARD;
    while proxy.alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the drained proxy did not exit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ns.cleanup().await;
}

/// A proxy pod stopping while a Service sleeps behind it, holding nothing: it keeps serving
/// while the operator's slice still names it (with thousands of slices to rewrite, the
/// operator takes a while, and kube-proxy sends connections there until it has), and exits
/// once its address has left the slice, which the operator rewrites when the proxy's own
/// Service marks the pod as terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_proxy_serves_until_no_slice_names_it() {
    let (client, ns) = setup("wake-drain-named").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "3s"});
    let ip = host_ip().to_string();
    let (port, _metrics, _op, mut proxy) =
        proxied_world(&client, n, wake, "wake-drain-named.log", &["--pod-ip", &ip]).await;
    proxy.terminate();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(proxy.alive(), "exited while the operator's slice names it");
    // Still served meanwhile: a request is held (it wakes the workload), then answered 503
    // after its hold (the workload's own endpoints never get ready here).
    let held = call(port, get("/", "curl/8.5")).await;
    assert!(held.starts_with("HTTP/1.1 503"), "{held}");
    deployment_at(&client, n, "web", 2).await;

    // The pod terminating and another proxy pod ready, as their Service's slice says it: the
    // operator moves the slice to the other pod, and this proxy, no longer named, exits.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), n);
    slices
        .patch(
            "proxy-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"endpoints": [
                {"addresses": [ip], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["10.0.0.9"], "conditions": {"ready": true}}]})),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + GUARD;
    while proxy.alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy no slice names did not exit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ours = slices.get_opt("web-tdset-wake-ipv4").await.unwrap();
    let named: Vec<&String> = (ours.iter())
        .flat_map(|s| &s.endpoints)
        .flat_map(|e| &e.addresses)
        .collect();
    assert_eq!(named, ["10.0.0.9"], "exited while named: {ours:?}");
    ns.cleanup().await;
}

/// EndpointSlices of a made-up manager piled on a sleeping Service by a tenant who may write
/// slices in its namespace (here 12 of about 1 MB each) never reach the proxy: it asks the
/// API server for the trusted managers' slices alone, and keeps of those only where the
/// Service answers, at most `MAX_OWN_SLICES` (32) per Service. (Before, the proxy followed
/// every slice labelled with the Service's name and kept each whole: 98 such slices took it
/// from 17 to 1136 MiB, past the chart's limit.) The Service still wakes and its held request
/// is relayed to its own endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_piled_on_a_sleeping_service_are_never_read_and_its_own_are_capped() {
    let (client, ns) = setup("wake-slice-pile").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "60s"});
    let (port, _metrics, _op, proxy) =
        proxied_world(&client, n, wake, "wake-slice-pile.log", &["--namespace", n]).await;
    let (upstream_port, heads) = upstream().await;
    let pile = |name: String, manager: &str, endpoints: usize, addresses: usize| {
        let endpoints: Vec<serde_json::Value> = (0..endpoints)
            .map(|e| {
                let addresses: Vec<String> = (0..addresses)
                    .map(|a| format!("10.{}.{}.{}", e / 250, e % 250, a % 250 + 1))
                    .collect();
                json!({"addresses": addresses, "conditions": {"ready": true},
                       "targetRef": {"kind": "Pod", "namespace": n, "name": format!("p{e}")}})
            })
            .collect();
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web",
                                                     "endpointslice.kubernetes.io/managed-by": manager}},
               "addressType": "IPv4", "endpoints": endpoints,
               "ports": [{"name": "http", "port": 9, "protocol": "TCP"}]})
    };
    for i in 0..12 {
        let s: EndpointSlice = create_object(
            &client,
            n,
            pile(format!("web-pile-{i}"), "made-up.example", 1000, 80),
        )
        .await;
        let size = serde_json::to_vec(&s).unwrap().len();
        assert!(size > 900_000, "a pile slice of {size} bytes");
    }
    let held = tokio::spawn(call(port, get("/", "curl/8.5")));
    deployment_at(&client, n, "web", 2).await;
    // The Service's own slice, then more of the trusted manager's than a Service keeps (an
    // admin's, or a cluster without the chart's admission policy): 32 kept, the rest counted.
    own_slice(&client, n, "web", upstream_port).await;
    let answer = held.await.unwrap();
    assert!(answer.contains("hello from web"), "{answer}");
    for i in 0..40 {
        let _: EndpointSlice = create_object(
            &client,
            n,
            pile(format!("web-more-{i:02}"), "test.example", 1, 1),
        )
        .await;
    }
    eventually(GUARD, "the proxy's kept slices at its cap", || async {
        let kept = proxy.metric("tdset_wake_proxy_own_slices ");
        (kept == 32.0).then_some(())
    })
    .await;
    assert_eq!(
        proxy.metric("tdset_wake_proxy_own_slices_left_out_total"),
        9.0
    );
    assert_eq!(heads.lock().unwrap().len(), 1);
    ns.cleanup().await;
}

/// Opens a connection to the proxy port from `source` (an address of the loopback: each is a
/// client of its own to the proxy).
async fn connect_from(source: &str, port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// Whether the proxy closed `conn` (read gives its end) within `within`.
async fn closed_within(conn: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, conn.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// One tenant's long-lived connections cannot fill the proxy for everyone (before, a relayed
/// connection held one of the 4096 global permits for its whole life, with no idle timeout
/// and no cap per Service or per client): a client past its share of a Service is closed, the
/// Service past its share is closed, and a relayed connection that moves nothing for
/// `--relay-idle-seconds` is closed while one that talks stays open. Caps small so the test
/// reaches them: 16 in all, 8 a namespace, 4 a Service, 2 a client to a Service, idle 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_or_one_services_connections_cannot_fill_the_proxy_and_idle_relays_close() {
    let (client, ns) = setup("wake-caps").await;
    let n = &ns.name;
    let wake = json!({"services": [{"name": "web"}], "wakeFor": "1m", "hold": "60s"});
    let caps = [
        "--namespace",
        n,
        "--max-connections",
        "16",
        "--max-per-namespace",
        "8",
        "--max-per-service",
        "4",
        "--max-per-source",
        "2",
        "--max-held-per-service",
        "4",
        "--relay-idle-seconds",
        "3",
    ];
    let (port, _metrics, _op, proxy) =
        proxied_world(&client, n, wake, "wake-caps.log", &caps).await;
    // Awake: a connection that sends nothing is relayed once its head's wait is over (it
    // wakes nothing: `http`'s clients speak first); the upstream waits for a head that never
    // comes, so each stays open as long as the proxy lets it.
    let (upstream_port, _heads) = upstream().await;
    own_slice(&client, n, "web", upstream_port).await;
    eventually(GUARD, "the proxy keeping web's own slice", || async {
        (proxy.metric("tdset_wake_proxy_own_slices ") == 1.0).then_some(())
    })
    .await;
    let count = |o: &str| {
        proxy.metric(&format!(
            "tdset_wake_proxy_connections_total{{outcome=\"{o}\"}}"
        ))
    };
    let _warm = call(port, get("/", "curl/8.5")).await;
    assert_eq!(
        count("relayed"),
        1.0,
        "the Service is awake behind the proxy"
    );

    // Each connection is counted in before the next is opened (`tdset_wake_proxy_open`: those
    // within the caps), so which one is past a cap is known.
    let opened = |from: &'static str, n: f64| {
        let proxy = &proxy;
        async move {
            let conn = connect_from(from, port).await;
            eventually(GUARD, "the connection counted in", || async {
                (proxy.metric("tdset_wake_proxy_open") == n).then_some(())
            })
            .await;
            conn
        }
    };
    let mut open = vec![
        opened("127.0.0.2", 1.0).await,
        opened("127.0.0.2", 2.0).await,
    ];
    let mut third = connect_from("127.0.0.2", port).await;
    assert!(
        closed_within(&mut third, GUARD).await,
        "a client past its share of the Service is closed"
    );
    open.push(opened("127.0.0.3", 3.0).await);
    open.push(opened("127.0.0.3", 4.0).await);
    let mut over = connect_from("127.0.0.4", port).await;
    assert!(
        closed_within(&mut over, GUARD).await,
        "a Service past its share is closed"
    );
    assert_eq!((count("over-cap"), count("refused")), (2.0, 0.0));

    // The four within their shares were relayed; one keeps talking (a byte a second), the
    // others are silent: those are closed after the idle time, the talker is not.
    let mut talker = open.pop().unwrap();
    let talking = tokio::spawn(async move {
        for _ in 0..8 {
            if talker.write_all(b"x").await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        true
    });
    for conn in open.iter_mut() {
        assert!(
            closed_within(conn, GUARD).await,
            "a silent relayed connection is closed after the idle time"
        );
    }
    assert!(
        talking.await.unwrap(),
        "a relayed connection that talks stays open"
    );
    ns.cleanup().await;
}
