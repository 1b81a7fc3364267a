//! `kubectl tdset`, through kubectl itself: the binary on the PATH as `kubectl-tdset` (a
//! symlink, as a user would install it), against the real API server, with an operator
//! (injected clock) acting on what the plugin writes.

use crate::support::*;
use kube::api::Api;
use serde_json::json;
use tdset_operator::api::TDSet;
use tdset_operator::clock::{Clock, SystemClock};

#[tokio::test]
async fn kubectl_tdset_previews_overrides_suspends_and_resumes() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "plugin").await;
    let dir = plugin_dir();

    // A manifest, no cluster needed.
    let ramp = repo_root().join("examples/ramp.yaml");
    let (ok, out, err) = kubectl_tdset(
        &dir,
        &[
            "preview",
            "-f",
            ramp.to_str().unwrap(),
            "--at",
            "2026-05-01T08:50:00Z",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["desiredReplicas"].as_i64(), v["level"].as_i64()),
        (Some(8), Some(2))
    );

    // The operator's clock runs from noon tomorrow: ahead of real time, which the plugin checks
    // overrides against ("ends in the past"), on whatever day the suite runs.
    let day = |d: i64, hm: &str| {
        let date = (chrono::Utc::now() + chrono::Duration::days(d)).date_naive();
        format!("{}T{hm}:00Z", date.format("%Y-%m-%d"))
    };
    let t0 = utc(&day(1, "12:00"));
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 3}],
        "defaultReplica": 1,
        "intervalMint": 60,
        // Another writer's override, which the plugin must leave in place.
        "overrides": [{"start": day(5, "00:00"), "end": day(6, "00:00"), "replica": 5, "reason": "theirs"}]
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    let clock = SystemClock::starting_at(t0);
    let op = Operator::start(&client, &ns.name, clock, None, "test");
    deployment_at(&client, &ns.name, "web", 3).await;

    // A live TDSet, with kubectl's usual flags.
    let (ok, out, err) = kubectl_tdset(
        &dir,
        &[
            "preview",
            "web",
            "-n",
            &ns.name,
            "--context",
            "tdset-local",
            "--at",
            &day(5, "12:00"),
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["desiredReplicas"], 5);
    assert_eq!(v["activeOverride"], "theirs");

    // An override a few seconds ahead of the operator's clock: taken at its start, given back
    // at its end.
    let start = (clock.now() + chrono::Duration::seconds(4)).to_rfc3339();
    let until = (clock.now() + chrono::Duration::seconds(8)).to_rfc3339();
    let (ok, out, err) = kubectl_tdset(
        &dir,
        &[
            "override",
            "web",
            "-n",
            &ns.name,
            "--replicas",
            "7",
            "--from",
            &start,
            "--until",
            &until,
            "--reason",
            "launch",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("override 7 replicas"), "{out}");
    deployment_at(&client, &ns.name, "web", 7).await;
    deployment_at(&client, &ns.name, "web", 3).await;

    // A second one (--for) keeps the first and the other writer's.
    let (ok, _, err) = kubectl_tdset(
        &dir,
        &[
            "override",
            "web",
            "-n",
            &ns.name,
            "--replicas",
            "2",
            "--from",
            &day(28, "00:00"),
            "--for",
            "2h",
        ],
    );
    assert!(ok, "{err}");
    let tdsets: Api<TDSet> = Api::namespaced(client.clone(), &ns.name);
    let overrides = tdsets.get("web").await.unwrap().spec.overrides;
    let reasons: Vec<_> = overrides
        .iter()
        .map(|o| o.reason.clone().unwrap_or_default())
        .collect();
    assert_eq!(overrides.len(), 3, "{overrides:?}");
    assert!(
        reasons.contains(&"theirs".into()) && reasons.contains(&"launch".into()),
        "{reasons:?}"
    );
    assert!(overrides.iter().any(|o| o.end == day(28, "02:00")));

    // Suspend, then resume: a manual scale stays while suspended and is reverted after.
    let (ok, out, err) = kubectl_tdset(&dir, &["suspend", "web", "-n", &ns.name]);
    assert!(ok && out.contains("suspended"), "{out}{err}");
    tdset_with_reason(&client, &ns.name, "web", "Progressing", "Suspended").await;
    let out = kubectl(&["-n", &ns.name, "scale", "deployment/web", "--replicas=9"]);
    assert!(out.status.success());
    let (ok, _, err) = kubectl_tdset(&dir, &["resume", "web", "-n", &ns.name]);
    assert!(ok, "{err}");
    deployment_at(&client, &ns.name, "web", 3).await;
    assert_eq!(tdsets.get("web").await.unwrap().spec.suspend, Some(false));

    // Clear errors.
    let (ok, _, err) = kubectl_tdset(&dir, &["suspend", "nosuch", "-n", &ns.name]);
    assert!(
        !ok && err.contains("TDSet nosuch not found in namespace"),
        "{err}"
    );
    let (ok, _, err) = kubectl_tdset(
        &dir,
        &[
            "override",
            "web",
            "-n",
            &ns.name,
            "--replicas",
            "4",
            "--from",
            "2020-01-01T00:00:00Z",
            "--until",
            "2020-01-02T00:00:00Z",
        ],
    );
    assert!(!ok && err.contains("in the past"), "{err}");
    op.stop().await;
    ns.cleanup().await;
}

#[tokio::test]
async fn kubectl_tdset_says_when_it_may_not() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "plugin-rbac").await;
    create_tdset(&client, &ns.name, &tdset("web", json!({
        "container": {"image": "nginx", "port": 80}, "schedulingConfig": [], "defaultReplica": 1
    })))
    .await;
    // The namespace's default ServiceAccount may do nothing with TDSets.
    let dir = plugin_dir();
    eventually(GUARD, "the namespace's default ServiceAccount", || async {
        kubectl(&["-n", &ns.name, "get", "serviceaccount", "default"])
            .status
            .success()
            .then_some(())
    })
    .await;
    let (_, kubeconfig) = service_account_client(&ns.name, "default").await;
    // --kubeconfig wins over the KUBECONFIG the helper sets (the admin's).
    let (ok, _, err) = kubectl_tdset(
        &dir,
        &[
            "suspend",
            "web",
            "-n",
            &ns.name,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    assert!(!ok && err.contains("no permission"), "{err}");
    let t: TDSet = Api::namespaced(client.clone(), &ns.name)
        .get("web")
        .await
        .unwrap();
    assert_eq!(t.spec.suspend, None, "nothing was written");
    let _ = std::fs::remove_file(kubeconfig);
    ns.cleanup().await;
}

/// `kubectl tdset preview NAME` says where idleness stands as the operator last read it, and
/// when it would put the workloads to sleep if nothing comes.
#[tokio::test]
async fn kubectl_tdset_preview_says_when_idleness_would_sleep() {
    let client = client().await;
    install_crd(&client).await;
    let ns = TestNamespace::new(&client, "plugin-idle").await;
    let dir = plugin_dir();
    let spec = json!({
        "container": {"image": "nginx:1.27", "port": 8080},
        "schedulingConfig": [],
        "defaultReplica": 2,
        "idle": {"after": "30m", "during": "OutsideWindows",
                 "signals": [{"prometheus": {"query": "sum by (namespace, service) (rate(x[1m]))", "service": "web"}}]}
    });
    create_tdset(&client, &ns.name, &tdset("web", spec)).await;
    let preview = || {
        let (ok, out, err) = kubectl_tdset(&dir, &["preview", "web", "-n", &ns.name]);
        assert!(ok, "{err}");
        out
    };
    assert!(
        preview().contains("note: idle: not read yet"),
        "{}",
        preview()
    );
    let set_idle = |idle: serde_json::Value| {
        let patch = json!({"status": {"idle": idle}}).to_string();
        let out = kubectl(&[
            "-n",
            &ns.name,
            "patch",
            "tdset",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Quiet for 5 minutes of the 30: asleep 25 minutes from now if nothing comes.
    let since = chrono::Utc::now() - chrono::Duration::minutes(5);
    let fmt =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    set_idle(json!({"phase": "Quiet", "quietSince": fmt(since)}));
    let out = preview();
    let expected = format!(
        "note: idle: Quiet since {}; asleep by idleness from {} if nothing comes",
        fmt(since),
        fmt(since + chrono::Duration::minutes(30))
    );
    assert!(out.contains(&expected), "{expected}\n{out}");
    // Blind: nothing sleeps, and it says why.
    set_idle(json!({"phase": "Unknown", "reason": "PrometheusUnreachable"}));
    let out = preview();
    assert!(
        out.contains("note: idle: Unknown (PrometheusUnreachable): a signal cannot answer, idleness puts nothing to sleep"),
        "{out}"
    );
    ns.cleanup().await;
}
