//! Woken by a request, the operator's side, on the real API server: the wake endpoint records
//! a request wake-up in `status.requestWake` (only for the wake proxy's token), the reconcile
//! wakes the workload for `wakeFor` and puts it back to sleep, and the history says why.

use std::sync::Arc;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::Api;
use serde_json::json;
use tdset_operator::api::{RequestWakePhase, RequestWakeStatus, TDSet, TDSetStatus};
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::{WakeOptions, serve_wake_endpoint};
use tdset_operator::telemetry::Metrics;

pub(crate) const AUDIENCE: &str = "wake.tdset.schedule.rs";

/// A ServiceAccount `name` in `ns` and a token of it for `audience` (`None`: the API
/// server's own, as every pod has).
pub(crate) fn token(ns: &str, name: &str, audience: Option<&str>) -> String {
    let _ = kubectl(&["-n", ns, "create", "serviceaccount", name]);
    let mut args = vec!["-n", ns, "create", "token", name, "--duration", "10m"];
    if let Some(a) = audience {
        args.extend(["--audience", a]);
    }
    let out = kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// POSTs a report of a request to Service `service` of TDSet `tdset`; the status code and body.
fn report(addr: &str, token: Option<&str>, ns: &str, tdset: &str, service: &str) -> (u16, String) {
    let body = json!({
        "namespace": ns, "tdset": tdset, "service": service, "requests": 1,
        "request": {"service": format!("{service}:http"), "method": "GET", "host": "web.example",
                    "path": "/docs", "userAgent": "curl/8.5"}
    });
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-m", "10", "-X", "POST", "-w", "\n%{http_code}"])
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd.arg(format!("http://{addr}/v1/wake")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.parse().unwrap_or(0), body.to_string())
}

/// TDSet `web`'s status as stored.
pub(crate) async fn status(client: &Client, ns: &str) -> Option<TDSetStatus> {
    Api::<TDSet>::namespaced(client.clone(), ns)
        .get_status("web")
        .await
        .ok()
        .and_then(|t| t.status)
}

/// Asleep by default, 2 replicas from 09:00 to 17:00 UTC, woken for 1 m by a request to `web`.
pub(crate) fn asleep_at_night() -> TDSet {
    tdset(
        "web",
        json!({
            "container": {"image": "nginx", "port": 80},
            "defaultReplica": 0,
            "schedulingConfig": [{"startTime": "09:00", "endTime": "17:00", "replica": 2}],
            "wakeOnRequest": {"services": [{"name": "web"}], "wakeFor": "1m"}
        }),
    )
}

/// The endpoint in this process, with the operator's clock, trusting `ns/wake-proxy`.
pub(crate) async fn endpoint(client: &Client, ns: &str, clock: SystemClock) -> String {
    endpoint_counted(client, ns, clock).await.0
}

/// `endpoint`, and the metrics it counts reports in.
pub(crate) async fn endpoint_counted(
    client: &Client,
    ns: &str,
    clock: SystemClock,
) -> (String, Arc<Metrics>) {
    endpoint_counted_at(client, ns, clock, "127.0.0.1:0").await
}

/// `endpoint_counted`, listening on `addr`.
pub(crate) async fn endpoint_counted_at(
    client: &Client,
    ns: &str,
    clock: SystemClock,
    addr: &str,
) -> (String, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::for_shard(None).unwrap());
    let (addr, _task) = serve_wake_endpoint(
        client.clone(),
        Arc::new(clock),
        metrics.clone(),
        WakeOptions {
            addr: addr.parse().unwrap(),
            proxy_user: format!("system:serviceaccount:{ns}:wake-proxy"),
        },
    )
    .await
    .unwrap();
    // The task runs for the rest of the test (it is detached; the test's runtime ends it).
    std::mem::forget(_task);
    (addr.to_string(), metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_at_night_wakes_the_workload_for_wake_for_then_the_schedule_has_it_asleep_again()
{
    let (client, ns) = setup("wake-night").await;
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start(&client, &ns.name, clock, None, "test");
    let addr = endpoint(&client, &ns.name, clock).await;
    create_tdset(&client, &ns.name, &asleep_at_night()).await;
    deployment_at(&client, &ns.name, "web", 0).await;

    let proxy = token(&ns.name, "wake-proxy", Some(AUDIENCE));
    let (code, body) = report(&addr, Some(&proxy), &ns.name, "web", "web");
    assert_eq!(code, 202, "{body}");
    assert!(body.contains("\"written\":true"), "{body}");
    // Woken to the count its schedule next gives (2, from 09:00), kept in status, not spec.
    deployment_at(&client, &ns.name, "web", 2).await;
    let s = status(&client, &ns.name).await.unwrap();
    let wake = s.request_wake.clone().unwrap();
    let request = wake.request.clone().unwrap();
    assert_eq!(
        (
            request.method.as_deref(),
            request.path.as_deref(),
            request.user_agent.as_deref()
        ),
        (Some("GET"), Some("/docs"), Some("curl/8.5"))
    );
    assert_eq!(wake.requests, Some(1));
    let (since, until) = (
        utc(wake.since.as_deref().unwrap()),
        utc(wake.until.as_deref().unwrap()),
    );
    assert_eq!(until - since, chrono::Duration::minutes(1));
    let spec = Api::<TDSet>::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap()
        .spec;
    assert!(
        spec.overrides.is_empty(),
        "nothing of the wake-up in the spec"
    );
    let woke = eventually(GUARD, "the wake-up in the history", || async {
        let s = status(&client, &ns.name).await?;
        s.history.first().filter(|e| e.to == Some(2)).cloned()
    })
    .await;
    assert!(woke.reason.contains("woken by a request"), "{woke:?}");
    eventually(GUARD, "phase Waking or Awake", || async {
        let phase = status(&client, &ns.name).await?.request_wake?.phase?;
        matches!(phase, RequestWakePhase::Waking | RequestWakePhase::Awake).then_some(())
    })
    .await;

    // A second request at once changes nothing: the wake-up reaches far enough.
    let (code, body) = report(&addr, Some(&proxy), &ns.name, "web", "web");
    assert_eq!(code, 202, "{body}");
    assert!(body.contains("\"written\":false"), "{body}");

    // After wakeFor the schedule applies again.
    eventually(
        std::time::Duration::from_secs(120),
        "asleep again after wakeFor",
        || async {
            let d: Deployment = Api::namespaced(client.clone(), &ns.name)
                .get("web")
                .await
                .ok()?;
            let s = status(&client, &ns.name).await?;
            (replicas(&d) == Some(0)
                && s.request_wake.as_ref()?.phase == Some(RequestWakePhase::Ended))
            .then_some(())
        },
    )
    .await;
    let s = status(&client, &ns.name).await.unwrap();
    assert_eq!(
        s.history.first().and_then(|e| e.to),
        Some(0),
        "{:?}",
        s.history
    );
    ns.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_wake_proxys_token_for_its_audience_may_wake_and_only_what_names_the_service() {
    let (client, ns) = setup("wake-auth").await;
    // The binary, as the chart runs it: the endpoint comes from its flags.
    let addr = format!("127.0.0.1:{}", free_port());
    let account = format!("{}/wake-proxy", ns.name);
    let _op = OperatorProcess::start(
        &control_plane().kubeconfig,
        &ns.name,
        &[
            "--wake-addr",
            &addr,
            "--wake-proxy-service-account",
            &account,
        ],
        "wake-auth.log",
    );
    eventually(GUARD, "the wake endpoint listening", || async {
        std::net::TcpStream::connect(&addr).ok().map(|_| ())
    })
    .await;
    create_tdset(&client, &ns.name, &asleep_at_night()).await;
    let mut other = asleep_at_night();
    other.metadata.name = Some("plain".into());
    other.spec.wake_on_request = None;
    create_tdset(&client, &ns.name, &other).await;

    let proxy = token(&ns.name, "wake-proxy", Some(AUDIENCE));
    let api_audience = token(&ns.name, "wake-proxy", None);
    let stranger = token(&ns.name, "stranger", Some(AUDIENCE));
    let refused = [
        ("no token", None, "web", "web", 401),
        (
            "a token for the API server",
            Some(api_audience.as_str()),
            "web",
            "web",
            403,
        ),
        (
            "another ServiceAccount's token",
            Some(stranger.as_str()),
            "web",
            "web",
            403,
        ),
        ("a forged token", Some("not-a-token"), "web", "web", 403),
        (
            "a Service the TDSet does not name",
            Some(proxy.as_str()),
            "web",
            "api",
            404,
        ),
        (
            "a TDSet without wakeOnRequest",
            Some(proxy.as_str()),
            "plain",
            "web",
            404,
        ),
        ("no such TDSet", Some(proxy.as_str()), "nothing", "web", 404),
    ];
    for (what, token, tdset, service, want) in refused {
        let (code, body) = report(&addr, token, &ns.name, tdset, service);
        assert_eq!(code, want, "{what}: {body}");
    }
    for name in ["web", "plain"] {
        let t = Api::<TDSet>::namespaced(client.clone(), &ns.name)
            .get_status(name)
            .await
            .unwrap();
        assert_eq!(
            t.status.and_then(|s| s.request_wake),
            None::<RequestWakeStatus>,
            "{name}: a refused report wrote nothing"
        );
    }
    let (code, body) = report(&addr, Some(&proxy), &ns.name, "web", "web");
    assert_eq!(code, 202, "the proxy's own token is taken: {body}");
    ns.cleanup().await;
}

/// A group asleep by its schedule and woken by a request wakes as at a scheduled transition:
/// tier by tier (`order`), the data tier first and each once the one before it is ready (kwok's
/// pods go Ready 3 s after they are bound). The proxy waits for the Service's own endpoints, so
/// a Service of the first tier answers before the last tier is awake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_wakes_a_group_tier_by_tier() {
    let (client, ns) = setup("wake-tiers").await;
    let n = &ns.name;
    let recorder = Recorder::start(&client, n);
    for (name, tier) in [("db", "data"), ("api", "backend"), ("web", "front")] {
        let mut d = app_deployment(name, 1);
        d["metadata"]["labels"]["env"] = json!("dev");
        d["metadata"]["labels"]["tier"] = json!(tier);
        d["spec"]["template"]["metadata"]["annotations"] =
            json!({"pod-ready.stage.kwok.x-k8s.io/delay": "3s"});
        let _: Deployment = create_object(&client, n, d).await;
    }
    let clock = SystemClock::starting_at(utc("2026-05-01T22:00:00Z"));
    let _op = Operator::start(&client, n, clock, None, "test");
    let addr = endpoint(&client, n, clock).await;
    let spec = json!({
        "scaleTargetSelector": {
            "kinds": ["Deployment"],
            "selector": {"matchLabels": {"env": "dev"}},
            "order": [{"matchLabels": {"tier": "data"}}, {"matchLabels": {"tier": "backend"}}]},
        "schedulingConfig": [{"startTime": "20:00", "endTime": "07:00", "replica": 0}],
        "wakeOnRequest": {"services": [{"name": "db"}], "wakeFor": "30m"},
    });
    create_tdset(&client, n, &tdset("env", spec)).await;
    for name in ["web", "api", "db"] {
        recorder
            .until(0, name, "asleep", |spec, ready| spec == 0 && ready == 0)
            .await;
    }

    let mark = recorder.log().len();
    let proxy = token(n, "wake-proxy", Some(AUDIENCE));
    let (code, body) = report(&addr, Some(&proxy), n, "env", "db");
    assert_eq!(code, 202, "{body}");
    let db_up = recorder
        .until(mark, "db", "woken", |spec, _| spec == 1)
        .await;
    let db_ready = recorder
        .until(db_up, "db", "ready", |spec, ready| spec == 1 && ready == 1)
        .await;
    let api_up = recorder
        .until(mark, "api", "woken", |spec, _| spec == 1)
        .await;
    let api_ready = recorder
        .until(api_up, "api", "ready", |spec, ready| {
            spec == 1 && ready == 1
        })
        .await;
    let web_up = recorder
        .until(mark, "web", "woken", |spec, _| spec == 1)
        .await;
    let log = recorder.log();
    assert!(
        db_ready < api_up,
        "api was woken before db was ready: {log:?}"
    );
    assert!(
        api_ready < web_up,
        "web was woken before api was ready: {log:?}"
    );
    // One entry for the wake-up, its reason the request.
    let woke = eventually(GUARD, "the wake-up in the history", || async {
        let t = Api::<TDSet>::namespaced(client.clone(), n)
            .get_status("env")
            .await
            .ok()?;
        t.status?
            .history
            .first()
            .filter(|e| e.reason.contains("woken by a request"))
            .cloned()
    })
    .await;
    assert!(woke.reason.contains("woken by a request"), "{woke:?}");
    ns.cleanup().await;
}

/// The operator (the binary, its own wake endpoint, the proxy's slices) in `n` at 22:00.
fn operator_at_night(n: &str, wake_addr: &str, log: &str) -> OperatorProcess {
    let account = format!("{n}/wake-proxy");
    let proxy = format!("{n}/proxy");
    let op = OperatorProcess::launch(Launch {
        namespace: Some(n),
        fake_now: Some(utc("2026-05-01T22:00:00Z")),
        extra: &[
            "--wake-addr",
            wake_addr,
            "--wake-proxy-service-account",
            &account,
            "--wake-proxy-service",
            &proxy,
            "--wake-proxy-ports",
            "21040-21049",
        ],
        ..Launch::new(&control_plane().kubeconfig, log)
    });
    op.wait_ready(GUARD, std::path::Path::new(log));
    op
}

/// The operator killed (SIGKILL) the moment a request's wake-up is recorded, before or after
/// its write, while the proxy is in the Service's path (its own endpoints never get ready
/// here): the next one finishes the wake-up from status, and the history records it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_killed_as_a_wake_up_is_recorded_finishes_it_from_status() {
    let (client, ns) = setup("wake-killed").await;
    let n = &ns.name;
    for (name, spec) in [
        ("proxy", json!({"ports": [{"port": 20000}]})),
        (
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}),
        ),
    ] {
        let _: k8s_openapi::api::core::v1::Service = create_object(
            &client,
            n,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}),
        )
        .await;
    }
    let _: k8s_openapi::api::discovery::v1::EndpointSlice = create_object(
        &client,
        n,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "proxy-1", "labels": {"kubernetes.io/service-name": "proxy"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}],
               "ports": [{"port": 20000}]}),
    )
    .await;
    let addr = format!("127.0.0.1:{}", free_port());
    let op = operator_at_night(n, &addr, "wake-killed-1.log");
    let _: Deployment = create_object(&client, n, app_deployment("web", 3)).await;
    let mut t = asleep_at_night();
    t.spec.container = None;
    t.spec.scale_target_ref = Some(
        serde_json::from_value(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}),
        )
        .unwrap(),
    );
    create_tdset(&client, n, &t).await;
    deployment_at(&client, n, "web", 0).await;

    let proxy = token(n, "wake-proxy", Some(AUDIENCE));
    let (code, body) = report(&addr, Some(&proxy), n, "web", "web");
    assert_eq!(code, 202, "{body}");
    op.sigkill();
    let _op = operator_at_night(n, &addr, "wake-killed-2.log");
    deployment_at(&client, n, "web", 2).await;
    let history = eventually(GUARD, "the wake-up in the history", || async {
        let s = status(&client, n).await?;
        (s.history.iter())
            .any(|e| e.reason.contains("woken by a request"))
            .then_some(s.history)
    })
    .await;
    let wake_ups = (history.iter())
        .filter(|e| e.reason.contains("woken by a request"))
        .count();
    assert_eq!(wake_ups, 1, "{history:#?}");
    ns.cleanup().await;
}

/// `spec.idle` with no source of traffic signals: every signal is Unknown, said by the
/// `IdleSignal` condition and `status.idle`, and idleness puts nothing to sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idleness_with_no_signal_to_read_is_unknown_and_sleeps_nothing() {
    let (client, ns) = setup("idle-unknown").await;
    let clock = SystemClock::starting_at(utc("2026-05-01T10:00:00Z"));
    let _op = Operator::start(&client, &ns.name, clock, None, "test");
    let mut t = asleep_at_night();
    t.spec.idle = Some(
        serde_json::from_value(json!({
            "after": "1m",
            "during": "Always",
            "signals": [{"prometheus": {"template": "traefik"}}]
        }))
        .unwrap(),
    );
    create_tdset(&client, &ns.name, &t).await;
    deployment_at(&client, &ns.name, "web", 2).await;
    let s = eventually(GUARD, "status.idle Unknown", || async {
        let s = status(&client, &ns.name).await?;
        (s.idle.as_ref()?.phase == tdset_operator::api::IdlePhase::Unknown).then_some(s)
    })
    .await;
    let idle = s.idle.clone().unwrap();
    assert_eq!(idle.reason.as_deref(), Some("NoSignalSource"));
    assert_eq!((idle.quiet_since, idle.sleeps_at), (None, None));
    assert_eq!(idle.signals.len(), 1);
    assert_eq!(idle.signals[0].signal, "prometheus/traefik");
    let condition = (s.conditions.iter())
        .find(|c| c.type_ == "IdleSignal")
        .cloned()
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("Unknown", "NoSignalSource")
    );
    assert!(
        condition.message.contains("idleness puts nothing to sleep"),
        "{condition:?}"
    );
    // The window's count stands.
    deployment_at(&client, &ns.name, "web", 2).await;
    ns.cleanup().await;
}
