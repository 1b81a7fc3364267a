//! The Helm chart (deploy/helm/tdset-operator) with helm built from its Go module: lint, the
//! rendering that deploy/ is made of, the API server's validation of every option, and one
//! release's life (install, upgrade, uninstall, reinstall scoped to a namespace) on a control
//! plane of its own, so that "no cluster-scoped leftovers" is checked exactly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tdset_operator::clock::SystemClock;
use tdset_operator::controller::LeaseOptions;

const GUARD: Duration = Duration::from_secs(120);

fn chart() -> String {
    repo_root()
        .join("deploy/helm/tdset-operator")
        .display()
        .to_string()
}

fn all_options() -> String {
    repo_root()
        .join("deploy/helm/tdset-operator/ci/all-options-values.yaml")
        .display()
        .to_string()
}

/// `helm template` of the chart as release `tdset-operator` in `namespace`.
fn render(namespace: &str, extra: &[&str]) -> String {
    let chart = chart();
    let mut args = vec![
        "template",
        "tdset-operator",
        &chart,
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    succeeded("helm template", helm(&control_plane().kubeconfig, &args))
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("parsing helm's output")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn chart_lints_clean_with_defaults_and_with_every_option() {
    let kc = &control_plane().kubeconfig;
    succeeded("helm lint", helm(kc, &["lint", "--strict", &chart()]));
    succeeded(
        "helm lint (every option)",
        helm(kc, &["lint", "--strict", &chart(), "-f", &all_options()]),
    );
}

#[test]
fn deploy_dir_is_the_chart_rendered_with_its_defaults() {
    let out = std::process::Command::new(repo_root().join("scripts/render-deploy.sh"))
        .arg("--check")
        .output()
        .expect("running scripts/render-deploy.sh");
    succeeded(
        "scripts/render-deploy.sh --check (deploy/ drifted from the chart)",
        out,
    );
}

#[test]
fn rbac_is_least_privilege_in_every_rendering() {
    for (what, yaml) in [
        ("defaults", render("tdset-system", &[])),
        (
            "every option",
            render("tdset-system", &["-f", &all_options()]),
        ),
    ] {
        for doc in documents(&yaml) {
            for rule in doc["rules"].as_array().into_iter().flatten() {
                for key in ["apiGroups", "resources", "verbs"] {
                    let items = rule[key].as_array().unwrap();
                    assert!(
                        !items.iter().any(|i| i == "*"),
                        "{what}: wildcard in {key}: {rule}"
                    );
                }
                let resources = rule["resources"].as_array().unwrap();
                assert!(
                    !resources.iter().any(|r| r == "secrets" || r == "pods"),
                    "{what}: the operator reads no secrets or pods: {rule}"
                );
                let verbs = rule["verbs"].as_array().unwrap();
                for never in ["escalate", "bind", "impersonate"] {
                    assert!(!verbs.iter().any(|v| v == never), "{what}: {never}: {rule}");
                }
            }
        }
    }
}

/// `patch` on StatefulSets and CronJobs is the group form's alone, bound only where
/// `groupFormIn` allows the form: cluster-wide for "*", a RoleBinding per listed namespace,
/// nowhere for "none" (and no other rule grants it).
#[test]
fn the_group_forms_grant_is_bound_only_where_the_form_is_allowed() {
    let patches_workloads = |doc: &Value| {
        doc["rules"].as_array().into_iter().flatten().any(|r| {
            let has = |k: &str, v: &str| r[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
            has("verbs", "patch")
                && (has("resources", "statefulsets") || has("resources", "cronjobs"))
        })
    };
    let bindings = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .filter(|d| d["roleRef"]["name"] == "tdset-operator-group-form")
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    let granting = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .filter(|d| patches_workloads(d))
            .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let defaults = documents(&render("tdset-system", &[]));
    assert_eq!(granting(&defaults), ["tdset-operator-group-form"]);
    assert_eq!(bindings(&defaults), ["ClusterRoleBinding/"]);
    let listed = documents(&render(
        "tdset-system",
        &["--set", "groupFormIn={team-a,team-b}"],
    ));
    assert_eq!(granting(&listed), ["tdset-operator-group-form"]);
    assert_eq!(
        bindings(&listed),
        ["RoleBinding/team-a", "RoleBinding/team-b"]
    );
    let env = |docs: &[Value]| {
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .and_then(|d| {
                d["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array()?
                    .iter()
                    .find(|e| e["name"] == "TDSET_GROUP_FORM_IN")
                    .map(|e| e["value"].clone())
            })
    };
    assert_eq!(env(&listed), Some(json!("team-a,team-b")));
    let none = documents(&render("tdset-system", &["--set", "groupFormIn={none}"]));
    assert!(granting(&none).is_empty(), "{:?}", granting(&none));
    assert!(bindings(&none).is_empty());
    assert_eq!(env(&none), Some(json!("none")));
}

#[tokio::test]
async fn every_option_renders_objects_the_api_server_accepts() {
    let (client, ns) = setup("helm-dry").await;
    install_monitoring_crds(&control_plane().kubeconfig);
    let watched = TestNamespace::new(&client, "helm-watched").await;

    let defaults = render(&ns.name, &[]);
    let every = render(
        &ns.name,
        &[
            "-f",
            &all_options(),
            "--set",
            &format!("watchNamespace={}", watched.name),
            "--set",
            &format!("grafanaDashboard.namespace={}", watched.name),
        ],
    );
    // By default no Prometheus is read: spec.idle's signals are Unknown, nothing idles.
    assert!(!defaults.contains("TDSET_PROMETHEUS_URL"), "{defaults}");
    for (what, yaml) in [("defaults", &defaults), ("every option", &every)] {
        let out = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], yaml);
        succeeded(&format!("kubectl apply --dry-run=server ({what})"), out);
    }

    // Each option reached the object it is for.
    let docs = documents(&every);
    let names = kinds(&docs);
    for expected in [
        "ServiceMonitor/tdset-operator",
        "PrometheusRule/tdset-operator",
        "PodDisruptionBudget/tdset-operator",
        "ServiceAccount/tdset-operator-custom",
        "CustomResourceDefinition/tdsets.schedule.rs",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    // The dashboard, where Grafana's sidecar finds it: the file deploy/grafana ships.
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "tdset-operator-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(dashboard["metadata"]["namespace"], json!(watched.name));
    assert_eq!(
        dashboard["metadata"]["labels"]["grafana_dashboard"],
        json!("1")
    );
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/grafana/tdset-operator.json")).unwrap(),
    )
    .unwrap();
    let carried: Value =
        serde_json::from_str(dashboard["data"]["tdset-operator.json"].as_str().unwrap()).unwrap();
    assert_eq!(carried, shipped);
    assert!(
        !kinds(&documents(&defaults))
            .iter()
            .any(|k| k == "ConfigMap/tdset-operator-dashboard"),
        "no dashboard unless asked for"
    );
    // Scoped to one namespace: bound there, not cluster-wide.
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "RoleBinding" && d["metadata"]["name"] == "tdset-operator")
        .expect("a RoleBinding for watchNamespace");
    assert_eq!(binding["metadata"]["namespace"], json!(watched.name));
    // The cluster-wide bindings are for cluster-scoped kinds only: TDCalendars read, and
    // TokenReviews created (the wake endpoint's check of the proxy's token).
    let cluster_bindings: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("ClusterRoleBinding/"))
        .collect();
    assert_eq!(
        cluster_bindings,
        [
            "ClusterRoleBinding/tdset-operator-calendars",
            "ClusterRoleBinding/tdset-operator-wake"
        ],
        "{names:?}"
    );
    let wake = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "tdset-operator-wake")
        .expect("the wake ClusterRole");
    assert_eq!(
        wake["rules"],
        json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}])
    );
    let calendars = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "tdset-operator-calendars")
        .expect("the calendars ClusterRole");
    assert_eq!(
        calendars["rules"],
        json!([
            {"apiGroups": ["schedule.rs"], "resources": ["tdcalendars"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["schedule.rs"], "resources": ["tdcalendars/status"], "verbs": ["patch"]}
        ])
    );
    // ConfigMaps (calendars' iCalendar documents) are read in the release's namespace only.
    let documents = docs
        .iter()
        .find(|d| {
            d["kind"] == "Role" && d["metadata"]["name"] == "tdset-operator-calendar-documents"
        })
        .expect("the calendar documents Role");
    assert_eq!(
        documents["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}])
    );
    let crd = docs
        .iter()
        .find(|d| d["kind"] == "CustomResourceDefinition")
        .unwrap();
    assert!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"].is_null(),
        "crds.keep=false"
    );

    let deploy = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(deploy["spec"]["replicas"], json!(3));
    assert_eq!(
        c["image"],
        json!("registry.example.com/platform/tdset-operator:0.1.0-rc.1")
    );
    assert_eq!(c["imagePullPolicy"], json!("Always"));
    assert_eq!(c["args"], json!(["run", "--lease-duration=30"]));
    assert_eq!(c["ports"][0]["containerPort"], json!(9090));
    assert_eq!(c["resources"]["limits"]["memory"], json!("512Mi"));
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
        .collect();
    for (k, v) in [
        ("TDSET_NAMESPACE", watched.name.as_str()),
        ("TDSET_LEASE_DURATION", "30"),
        ("TDSET_CONCURRENCY", "32"),
        ("TDSET_LOG", "tdset_operator=debug,kube=info"),
        ("TDSET_LOG_FORMAT", "text"),
        ("TDSET_METRICS_ADDR", "0.0.0.0:9090"),
        (
            "TDSET_PROMETHEUS_URL",
            "http://prometheus-operated.monitoring.svc:9090",
        ),
        ("TDSET_IDLE_READ_INTERVAL", "15"),
        ("TDSET_IDLE_RATE_WINDOW", "60"),
        ("RUST_BACKTRACE", "1"),
    ] {
        assert!(
            env.contains(&(k.into(), v.into())),
            "{k}={v} missing from {env:?}"
        );
    }
    assert_eq!(pod["serviceAccountName"], json!("tdset-operator-custom"));
    assert_eq!(pod["priorityClassName"], json!("system-cluster-critical"));
    assert_eq!(
        pod["imagePullSecrets"][0]["name"],
        json!("registry-credentials")
    );
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], json!("linux"));
    assert_eq!(pod["tolerations"][0]["key"], json!("dedicated"));
    assert!(pod["affinity"]["podAntiAffinity"].is_object());
    assert_eq!(pod["topologySpreadConstraints"][0]["maxSkew"], json!(1));
    assert_eq!(pod["securityContext"]["fsGroup"], json!(10001));
    let meta = &deploy["spec"]["template"]["metadata"];
    assert_eq!(meta["annotations"]["example.com/team"], json!("platform"));
    assert_eq!(meta["labels"]["example.com/tier"], json!("control"));

    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    let text = serde_json::to_string(&rule["spec"]).unwrap();
    for tuned in [
        "\"for\":\"30m\"",
        "> 30",
        "> 600",
        "namespace=\\\"tdset-system\\\"",
    ] {
        assert!(
            text.contains(tuned),
            "{tuned} missing from the PrometheusRule: {text}"
        );
    }
    watched.cleanup().await;
    ns.cleanup().await;
}

/// The wake proxy comes with the operator by default; turned off, nothing of it is rendered
/// and the operator serves no wake endpoint (its TDSets with wakeOnRequest are then refused).
#[test]
fn the_wake_proxy_is_installed_by_default_and_left_out_when_turned_off() {
    let wake_objects = |docs: &[Value]| -> Vec<String> {
        kinds(docs)
            .into_iter()
            .filter(|k| k.contains("wake"))
            .collect()
    };
    let operator_env = |docs: &[Value]| -> Vec<String> {
        let d = docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "tdset-operator")
            .expect("the operator's Deployment");
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    let on = documents(&render("tdset-system", &[]));
    let mut found = wake_objects(&on);
    found.sort();
    assert_eq!(
        found,
        [
            "ClusterRole/tdset-operator-wake",
            "ClusterRole/tdset-operator-wake-proxy",
            "ClusterRoleBinding/tdset-operator-wake",
            "ClusterRoleBinding/tdset-operator-wake-proxy",
            "Deployment/tdset-operator-wake-proxy",
            "PodDisruptionBudget/tdset-operator-wake-proxy",
            "Role/tdset-operator-wake-proxy",
            "RoleBinding/tdset-operator-wake-proxy-operator-address",
            "Service/tdset-operator-wake",
            "Service/tdset-operator-wake-proxy",
            "ServiceAccount/tdset-operator-wake-proxy",
            "ValidatingAdmissionPolicy/tdset-operator-wake-slices",
            "ValidatingAdmissionPolicyBinding/tdset-operator-wake-slices",
        ]
    );
    assert!(operator_env(&on).contains(&"TDSET_WAKE_ADDR".to_string()));
    let off = documents(&render(
        "tdset-system",
        &["--set", "wakeOnRequest.enabled=false"],
    ));
    assert_eq!(wake_objects(&off), Vec::<String>::new());
    assert!(
        !operator_env(&off)
            .iter()
            .any(|e| e.starts_with("TDSET_WAKE")),
        "{:?}",
        operator_env(&off)
    );
}

#[test]
fn values_the_operator_cannot_take_are_refused_by_helm() {
    for (set, says) in [
        (vec!["logFormat=yaml"], "logFormat must be json or text"),
        (
            vec!["leaderElection.enabled=false", "replicaCount=2"],
            "replicaCount > 1 needs leaderElection.enabled",
        ),
        (
            vec!["shards[0].name=a"],
            "each entry of shards needs a name and a selector",
        ),
        (
            vec!["shards[0].name=A", "shards[0].selector=x=y"],
            "use 1-40 lowercase letters",
        ),
        (
            vec![
                "shards[0].name=a",
                "shards[0].selector=x=y",
                "shards[1].name=a",
                "shards[1].selector=x=z",
            ],
            "shard \"a\" is listed twice",
        ),
        (
            vec!["wakeOnRequest.ports=20000"],
            "wakeOnRequest.ports \"20000\": use FROM-TO",
        ),
        (
            vec![
                "wakeOnRequest.ports=20000-20001",
                "shards[0].name=a",
                "shards[0].selector=x=a",
                "shards[1].name=b",
                "shards[1].selector=x=b",
                "shards[2].name=c",
                "shards[2].selector=x=c",
            ],
            "has fewer ports than there are shards (3)",
        ),
    ] {
        let chart = chart();
        let mut args = vec!["template", "x", chart.as_str()];
        for s in &set {
            args.extend(["--set", s]);
        }
        let out = helm(&control_plane().kubeconfig, &args);
        assert!(!out.status.success(), "{set:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{set:?}: {err}");
    }
    // One replica without election is fine (a small cluster, a test).
    let chart = chart();
    let args = [
        "template",
        "x",
        chart.as_str(),
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicaCount=1",
    ];
    succeeded("helm template", helm(&control_plane().kubeconfig, &args));
}

#[test]
fn shards_render_one_operator_deployment_each_with_its_selector_and_lease() {
    // docs/install.md's example values.
    let example = repo_root().join("examples/helm/shards.yaml");
    let yaml = render(
        "tdset-system",
        &[
            "--set",
            "leaderElection.enabled=false",
            "-f",
            example.to_str().unwrap(),
        ],
    );
    let docs = documents(&yaml);
    // The operator's Deployments (the wake proxy's is one, whatever the shards).
    let deployments: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "Deployment" && d["metadata"]["name"] != "tdset-operator-wake-proxy"
        })
        .collect();
    let env = |d: &Value, name: &str| -> Option<String> {
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)?["value"]
            .as_str()
            .map(str::to_string)
    };
    let shards: Vec<_> = deployments
        .iter()
        .map(|d| {
            (
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["spec"]["replicas"].as_i64().unwrap(),
                env(d, "TDSET_SHARD").unwrap(),
                env(d, "TDSET_SHARD_SELECTOR").unwrap(),
                env(d, "TDSET_LEADER_ELECT").unwrap(),
                d["spec"]["selector"]["matchLabels"]["schedule.rs/shard"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let want = [
        (
            "tdset-operator-a",
            2i64,
            "a",
            "schedule.rs/shard=a",
            "true",
            "a",
        ),
        (
            "tdset-operator-rest",
            3,
            "rest",
            "schedule.rs/shard!=a",
            "true",
            "rest",
        ),
    ]
    .map(|(d, n, shard, sel, e, l)| {
        let s = |x: &str| x.to_string();
        (s(d), n, s(shard), s(sel), s(e), s(l))
    });
    assert_eq!(shards, want);
    // Each shard gives out wake proxy ports from its own part of the range (the proxy listens
    // on all of it): two shards never give out one port at the same moment.
    let ranges: Vec<Option<String>> = (deployments.iter())
        .map(|d| env(d, "TDSET_WAKE_PROXY_PORTS"))
        .collect();
    assert_eq!(
        ranges,
        [
            Some("20000-20127".to_string()),
            Some("20128-20255".to_string())
        ]
    );
    // Election is on for shards even when switched off: the Lease Role comes with them.
    assert!(
        docs.iter()
            .any(|d| d["kind"] == "Role" && d["rules"][0]["resources"][0] == "leases"),
        "no Role for the shards' Leases"
    );
}

/// Installs prometheus-operator's ServiceMonitor and PrometheusRule CRDs (cached by
/// control-plane.sh) so the API server validates those objects too.
fn install_monitoring_crds(kubeconfig: &Path) {
    let dir = std::process::Command::new(script())
        .arg("monitoring-crds-dir")
        .output()
        .expect("control-plane.sh monitoring-crds-dir");
    let dir = PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim());
    for crd in ["servicemonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{crd}.yaml"));
        assert!(
            file.exists(),
            "{} missing; run: scripts/control-plane.sh install",
            file.display()
        );
        let path = file.display().to_string();
        succeeded(
            "applying a monitoring CRD",
            kubectl_at(
                kubeconfig,
                &["apply", "--server-side", "--force-conflicts", "-f", &path],
            ),
        );
        // Polled, not `kubectl wait --for=condition=Established`: that fails at once ("<nil> is
        // of the type <nil>") when it reads the CRD before the API server has written any
        // condition (seen in a CI run, the other test applying the same CRD at that moment).
        let established = || {
            let out = kubectl_at(
                kubeconfig,
                &[
                    "get",
                    &format!("crd/{crd}.monitoring.coreos.com"),
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                ],
            );
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "True"
        };
        let started = std::time::Instant::now();
        while !established() {
            assert!(
                started.elapsed() < GUARD,
                "the monitoring CRD {crd} was not Established"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

/// Names of the cluster-scoped objects a release made (its instance label), as kind/name.
fn cluster_scoped_of(kubeconfig: &Path, release: &str) -> Vec<String> {
    let out = succeeded(
        "listing cluster-scoped objects",
        kubectl_at(
            kubeconfig,
            &[
                "get",
                "clusterroles,clusterrolebindings,customresourcedefinitions,validatingadmissionpolicies,validatingadmissionpolicybindings",
                "-l",
                &format!("app.kubernetes.io/instance={release}"),
                "-o",
                "name",
            ],
        ),
    );
    let mut names: Vec<String> = out.lines().map(str::to_string).collect();
    names.sort();
    names
}

#[tokio::test]
async fn install_upgrade_uninstall_and_reinstall_on_a_cluster_of_its_own() {
    let dir = std::env::temp_dir().join(format!("tdset-helm-cp-{}", unique_suffix()));
    let cp = start_control_plane(&dir);
    let kc = cp.kubeconfig.as_path();
    let client = client_for(kc).await;
    let chart = chart();
    let release = "tdset";
    let ns = "tdset-system";

    // Install: the chart's defaults, as the README's three commands do.
    install(kc, &chart, &["--create-namespace"]);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deploys.get("tdset-tdset-operator").await.unwrap();
    assert_eq!(replicas(&d), Some(2));
    // The pods the Deployment made carry the chart's pod spec, scheduled on kwok's nodes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running = running_pods(
        &pods,
        "app.kubernetes.io/name=tdset-operator,app.kubernetes.io/instance=tdset",
        2,
    )
    .await;
    let spec = running[0].spec.as_ref().unwrap();
    let c = &spec.containers[0];
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("tdset-tdset-operator")
    );
    assert_eq!(
        c.image.as_deref(),
        Some("ghcr.io/tdset-operator/tdset-operator:0.1.0")
    );
    assert_eq!(c.args.as_deref(), Some(&["run".to_string()][..]));
    let env = |name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(env("TDSET_LEADER_ELECT").as_deref(), Some("true"));
    assert_eq!(
        env("TDSET_LEASE_NAME").as_deref(),
        Some("tdset-tdset-operator")
    );
    assert_eq!(env("TDSET_LOG").as_deref(), Some("info"));
    assert_eq!(
        env("TDSET_NAMESPACE"),
        None,
        "watches every namespace by default"
    );
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert!(
        spec.node_name
            .as_deref()
            .unwrap_or_default()
            .starts_with("kwok-node-")
    );
    wake_proxy_installed_with_the_operator(kc, &client, &pods, &running[0]).await;
    let crd_keep = succeeded(
        "reading the CRD",
        kubectl_at(
            kc,
            &[
                "get",
                "crd",
                "tdsets.schedule.rs",
                "-o",
                "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}",
            ],
        ),
    );
    assert_eq!(crd_keep, "keep");

    // The release's RBAC is enough for the operator: the built binary's controller, with the
    // release's ServiceAccount token, reconciles a TDSet in another namespace.
    let apps = TestNamespace::new(&client, "helm-apps").await;
    let sa_name = "tdset-tdset-operator";
    works_as_the_release_service_account(kc, &client, (ns, sa_name), &apps.name, None).await;

    // Upgrade with changed values: the Deployment follows; revision 2.
    succeeded(
        "helm upgrade",
        helm(
            kc,
            &[
                "upgrade",
                release,
                &chart,
                "-n",
                ns,
                "--reuse-values",
                "--set",
                "logLevel=debug",
                "--set",
                "replicaCount=1",
                "--wait",
                "--timeout",
                "2m",
            ],
        ),
    );
    let d = deploys.get("tdset-tdset-operator").await.unwrap();
    assert_eq!(replicas(&d), Some(1));
    let env = &d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env;
    assert!(
        env.iter()
            .flatten()
            .any(|e| e.name == "TDSET_LOG" && e.value.as_deref() == Some("debug"))
    );
    let history = succeeded(
        "helm history",
        helm(kc, &["history", release, "-n", ns, "-o", "json"]),
    );
    let history: Vec<Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(history.len(), 2, "{history:?}");

    // Uninstall: nothing of the release is left but the CRD (and with it every TDSet).
    let before = cluster_scoped_of(kc, release);
    assert_eq!(
        before,
        [
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-calendars",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-core",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-edit",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-group-form",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-view",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-wake",
            "clusterrole.rbac.authorization.k8s.io/tdset-tdset-operator-wake-proxy",
            "clusterrolebinding.rbac.authorization.k8s.io/tdset-tdset-operator",
            "clusterrolebinding.rbac.authorization.k8s.io/tdset-tdset-operator-calendars",
            "clusterrolebinding.rbac.authorization.k8s.io/tdset-tdset-operator-group-form",
            "clusterrolebinding.rbac.authorization.k8s.io/tdset-tdset-operator-wake",
            "clusterrolebinding.rbac.authorization.k8s.io/tdset-tdset-operator-wake-proxy",
            "customresourcedefinition.apiextensions.k8s.io/tdcalendars.schedule.rs",
            "customresourcedefinition.apiextensions.k8s.io/tdsets.schedule.rs",
            "validatingadmissionpolicy.admissionregistration.k8s.io/tdset-tdset-operator-wake-slices",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/tdset-tdset-operator-wake-slices",
        ]
    );
    let out = succeeded(
        "helm uninstall",
        helm(kc, &["uninstall", release, "-n", ns]),
    );
    release_gone(kc, release).await;
    assert!(
        out.contains("tdsets.schedule.rs"),
        "helm says the CRD was kept: {out}"
    );
    assert_eq!(
        cluster_scoped_of(kc, release),
        [
            "customresourcedefinition.apiextensions.k8s.io/tdcalendars.schedule.rs",
            "customresourcedefinition.apiextensions.k8s.io/tdsets.schedule.rs"
        ]
    );
    let left = succeeded(
        "listing the release namespace",
        kubectl_at(
            kc,
            &[
                "-n",
                ns,
                "get",
                "all,serviceaccounts,roles,rolebindings,leases",
                "-l",
                "app.kubernetes.io/instance=tdset",
                "-o",
                "name",
            ],
        ),
    );
    assert_eq!(left.trim(), "", "left in {ns}: {left}");
    let kept = succeeded(
        "listing TDSets",
        kubectl_at(kc, &["-n", &apps.name, "get", "tdsets", "-o", "name"]),
    );
    assert_eq!(
        kept.trim(),
        "tdset.schedule.rs/web",
        "TDSets outlive the release"
    );

    // Reinstall over the kept CRD, scoped to one namespace: its permissions hold there only.
    let scope = format!("watchNamespace={}", apps.name);
    install(kc, &chart, &["--set", &scope]);
    let sa = "system:serviceaccount:tdset-system:tdset-tdset-operator";
    let can = |scope: &[&str]| {
        let mut args = vec!["auth", "can-i", "patch", "deployments.apps", "--as", sa];
        args.extend_from_slice(scope);
        String::from_utf8_lossy(&kubectl_at(kc, &args).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(can(&["-n", &apps.name]), "yes");
    assert_eq!(can(&["-n", "default"]), "no");
    assert_eq!(can(&["--all-namespaces"]), "no");
    // The proxy, scoped the same way, reads slices there only; the operator still reads the
    // proxy's own slices in its namespace.
    let proxy = "system:serviceaccount:tdset-system:tdset-tdset-operator-wake-proxy";
    let can_as = |who: &str, verb: &str, scope: &[&str]| {
        let mut args = vec![
            "auth",
            "can-i",
            verb,
            "endpointslices.discovery.k8s.io",
            "--as",
            who,
        ];
        args.extend_from_slice(scope);
        String::from_utf8_lossy(&kubectl_at(kc, &args).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(can_as(proxy, "watch", &["-n", &apps.name]), "yes");
    assert_eq!(can_as(proxy, "watch", &["-n", "default"]), "no");
    assert_eq!(can_as(sa, "list", &["-n", "tdset-system"]), "yes");
    assert_eq!(can_as(sa, "patch", &["-n", "tdset-system"]), "no");
    works_as_the_release_service_account(kc, &client, (ns, sa_name), &apps.name, Some("web2"))
        .await;
    a_second_release_beside_it(kc, &client, &chart, &apps.name).await;
    succeeded(
        "helm uninstall",
        helm(kc, &["uninstall", release, "-n", ns]),
    );
    // Everything of the release goes, its RoleBinding in the watched namespace included.
    release_gone(kc, release).await;

    let _ = std::process::Command::new(script())
        .arg("stop")
        .arg(&dir)
        .status();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits until exactly `n` pods that `labels` picks are Running, and returns them.
async fn running_pods(pods: &Api<Pod>, labels: &str, n: usize) -> Vec<Pod> {
    eventually(GUARD, &format!("{n} pods running ({labels})"), || async {
        let list = pods
            .list(&ListParams::default().labels(labels))
            .await
            .ok()?;
        let running: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        (running.len() == n).then_some(running)
    })
    .await
}

/// The chart's default wake proxy beside the operator (`operator`, one of its pods): its pods
/// with their own identity and token, the operator pointed at it, its RBAC reading
/// EndpointSlices only, and the admission policy that lets only the operator (or a cluster
/// admin) write a slice labelled as the operator's.
async fn wake_proxy_installed_with_the_operator(
    kc: &Path,
    client: &kube::Client,
    pods: &Api<Pod>,
    operator: &Pod,
) {
    let proxies = running_pods(
        pods,
        "app.kubernetes.io/name=tdset-operator-wake-proxy,app.kubernetes.io/instance=tdset",
        2,
    )
    .await;
    let spec = proxies[0].spec.as_ref().unwrap();
    let c = &spec.containers[0];
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("tdset-tdset-operator-wake-proxy")
    );
    assert_eq!(c.args.as_deref(), Some(&["wake-proxy".to_string()][..]));
    let env_of = |c: &k8s_openapi::api::core::v1::Container, name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    // The wake Service by name, its ClusterIP read through the API: no cluster DNS needed.
    assert_eq!(
        env_of(c, "TDSET_WAKE_OPERATOR_SERVICE").as_deref(),
        Some("tdset-system/tdset-tdset-operator-wake:8081")
    );
    assert_eq!(env_of(c, "TDSET_WAKE_OPERATOR_URL"), None);
    let token = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "wake-token")
        .and_then(|v| v.projected.as_ref())
        .and_then(|p| p.sources.as_ref())
        .and_then(|s| s[0].service_account_token.as_ref())
        .expect("a projected token for the wake endpoint");
    assert_eq!(token.audience.as_deref(), Some("wake.tdset.schedule.rs"));
    let op = &operator.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        env_of(op, "TDSET_WAKE_ADDR").as_deref(),
        Some("0.0.0.0:8081")
    );
    assert_eq!(
        env_of(op, "TDSET_WAKE_PROXY_SERVICE_ACCOUNT").as_deref(),
        Some("tdset-system/tdset-tdset-operator-wake-proxy")
    );
    assert_eq!(
        env_of(op, "TDSET_WAKE_PROXY_PORTS"),
        env_of(c, "TDSET_WAKE_PROXY_PORTS")
    );
    let can = |who: &str, verb: &str, resource: &str| {
        String::from_utf8_lossy(
            &kubectl_at(kc, &["auth", "can-i", verb, resource, "--as", who, "-A"]).stdout,
        )
        .trim()
        .to_string()
    };
    let proxy = "system:serviceaccount:tdset-system:tdset-tdset-operator-wake-proxy";
    let operator_sa = "system:serviceaccount:tdset-system:tdset-tdset-operator";
    assert_eq!(
        can(proxy, "watch", "endpointslices.discovery.k8s.io"),
        "yes"
    );
    for (verb, resource) in [
        ("patch", "endpointslices.discovery.k8s.io"),
        ("list", "services"),
        ("list", "pods"),
        ("get", "secrets"),
        ("create", "tokenreviews.authentication.k8s.io"),
    ] {
        assert_eq!(
            can(proxy, verb, resource),
            "no",
            "the proxy may {verb} {resource}"
        );
    }
    assert_eq!(
        can(operator_sa, "create", "tokenreviews.authentication.k8s.io"),
        "yes"
    );

    // A tenant who may write EndpointSlices in its namespace writes its own, but none labelled
    // as the operator's; the operator's identity may.
    let tenant = TestNamespace::new(client, "helm-slices").await;
    let t = tenant.name.as_str();
    succeeded(
        "granting a tenant EndpointSlices",
        kubectl_at(
            kc,
            &[
                "-n",
                t,
                "create",
                "role",
                "slices",
                "--verb=create,update,patch,get",
                "--resource=endpointslices.discovery.k8s.io",
            ],
        ),
    );
    succeeded(
        "binding it",
        kubectl_at(
            kc,
            &[
                "-n",
                t,
                "create",
                "rolebinding",
                "slices",
                "--role=slices",
                "--user=tenant",
            ],
        ),
    );
    let slice_by = |name: &str, manager: Option<&str>| {
        let mut labels = json!({"kubernetes.io/service-name": "web"});
        if let Some(m) = manager {
            labels["endpointslice.kubernetes.io/managed-by"] = json!(m);
        }
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": name, "namespace": t, "labels": labels},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.9.9.9"], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": 20000}]})
        .to_string()
    };
    let slice = |name: &str, ours: bool| slice_by(name, ours.then_some("tdset.schedule.rs"));
    let apply_as = |who: &str, doc: String| {
        let mut cmd = std::process::Command::new(kubectl_path());
        cmd.env("KUBECONFIG", kc)
            .args([
                "apply",
                "--server-side",
                "--field-manager=tdset-operator",
                "--as",
                who,
                "-f",
                "-",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(doc.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    // The policy takes effect once the API server has loaded it.
    let refused = eventually(GUARD, "a forged slice refused", || async {
        let out = apply_as("tenant", slice("forged", true));
        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await;
    assert!(
        refused.contains("written by the tdset-operator only"),
        "{refused}"
    );
    succeeded(
        "the tenant's own slice",
        apply_as("tenant", slice("own", false)),
    );
    let relabel = apply_as("tenant", slice("own", true));
    assert!(
        !relabel.status.success(),
        "the tenant relabelled its slice as the operator's"
    );
    succeeded(
        "the operator's slice",
        apply_as(operator_sa, slice("ours", true)),
    );
    // Nor one labelled as the EndpointSlice controller's (the proxy relays to its endpoints),
    // which that controller itself writes as ever.
    let kcm = "endpointslice-controller.k8s.io";
    let forged = apply_as("tenant", slice_by("forged-kcm", Some(kcm)));
    assert!(
        String::from_utf8_lossy(&forged.stderr).contains("written by Kubernetes' controllers only"),
        "{forged:?}"
    );
    let relabel = apply_as("tenant", slice_by("own", Some(kcm)));
    assert!(
        !relabel.status.success(),
        "the tenant relabelled its slice as the controller's"
    );
    succeeded(
        "a slice of another manager",
        apply_as("tenant", slice_by("mesh", Some("mesh.example"))),
    );
    // (Its bootstrap role has no `patch`, which a server-side apply is: granted here.)
    succeeded(
        "binding the slices role to the EndpointSlice controller",
        kubectl_at(
            kc,
            &[
                "-n",
                t,
                "create",
                "rolebinding",
                "slices-kcm",
                "--role=slices",
                "--serviceaccount=kube-system:endpointslice-controller",
            ],
        ),
    );
    succeeded(
        "the EndpointSlice controller's slice",
        apply_as(
            "system:serviceaccount:kube-system:endpointslice-controller",
            slice_by("kcm", Some(kcm)),
        ),
    );
    // Any other kube-system ServiceAccount that may write slices (a CNI's, a log agent's) may
    // not forge one as the controller's (before, every kube-system ServiceAccount was excepted).
    succeeded(
        "binding the slices role to a log agent in kube-system",
        kubectl_at(
            kc,
            &[
                "-n",
                t,
                "create",
                "rolebinding",
                "slices-agent",
                "--role=slices",
                "--serviceaccount=kube-system:log-agent",
            ],
        ),
    );
    let agent = apply_as(
        "system:serviceaccount:kube-system:log-agent",
        slice_by("agent-kcm", Some(kcm)),
    );
    assert!(
        String::from_utf8_lossy(&agent.stderr).contains("written by Kubernetes' controllers only"),
        "{agent:?}"
    );
    tenant.cleanup().await;
}

/// Waits until nothing labelled with the release is left in any namespace and, of the
/// cluster-scoped objects, only the kept CRD. Polled rather than `helm uninstall --wait`, which
/// in this suite sometimes ran into its 5-minute timeout with every object already gone.
async fn release_gone(kubeconfig: &Path, release: &str) {
    let selector = format!("app.kubernetes.io/instance={release}");
    let aggregated = format!("clusterrole/{release}-tdset-operator");
    eventually(GUARD, "the release's objects gone", || async {
        // Kubernetes' ClusterRole aggregation controller force-applies the aggregated rules
        // when a selected role (our -core) goes; if its cache still holds the aggregated role
        // Helm has just deleted, that apply creates it again (new uid, no labels, no rules),
        // and the next install refuses to adopt it. docs/install.md tells users to delete it; so
        // does the test, and only that object.
        // Ours carries the release's labels; what Helm deleted and the controller recreated
        // carries none.
        let found = kubectl_at(
            kubeconfig,
            &[
                "get",
                &aggregated,
                "--ignore-not-found",
                "-o",
                "jsonpath={.metadata.name}:{.metadata.labels}",
            ],
        );
        let found = String::from_utf8_lossy(&found.stdout).to_string();
        if found.ends_with(':') {
            let yaml = kubectl_at(
                kubeconfig,
                &["get", &aggregated, "-o", "yaml", "--show-managed-fields"],
            );
            eprintln!(
                "{aggregated} was recreated after the uninstall; deleting it:\n{}",
                String::from_utf8_lossy(&yaml.stdout)
            );
            let _ = kubectl_at(kubeconfig, &["delete", &aggregated, "--ignore-not-found"]);
            return None;
        }
        let left = succeeded(
            "listing what is left",
            kubectl_at(
                kubeconfig,
                &[
                    "get",
                    "all,serviceaccounts,roles,rolebindings,leases",
                    "-A",
                    "-l",
                    &selector,
                    "-o",
                    "name",
                ],
            ),
        );
        // Only the kept CRDs (TDSet, TDCalendar), where this release installed them, remain.
        let kept = cluster_scoped_of(kubeconfig, release)
            .iter()
            .all(|name| name.starts_with("customresourcedefinition"));
        (left.trim().is_empty() && kept && found.is_empty()).then_some(())
    })
    .await;
}

/// `helm install tdset` into tdset-system, waiting for the operator's pods.
fn install(kubeconfig: &Path, chart: &str, extra: &[&str]) {
    succeeded(
        &format!("helm install {extra:?}"),
        install_as(kubeconfig, ("tdset", "tdset-system"), chart, extra),
    );
}

/// `helm install` of `release` into its namespace, waiting for its pods; Helm's answer.
fn install_as(
    kubeconfig: &Path,
    (release, namespace): (&str, &str),
    chart: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "install",
        release,
        chart,
        "-n",
        namespace,
        "--wait",
        "--timeout",
        "2m",
    ];
    args.extend_from_slice(extra);
    helm(kubeconfig, &args)
}

/// Beside the release `tdset` (watching `theirs` alone), a second release: refused where it
/// would reconcile the same TDSets (every namespace, or `theirs`), installed where it watches
/// a namespace of its own. There both operators work, and neither one's EndpointSlice policy
/// refuses the other's operator (a cluster-wide policy would: it admits its own operator only).
async fn a_second_release_beside_it(kc: &Path, client: &kube::Client, chart: &str, theirs: &str) {
    let other = ("other", "tdset-other");
    let not_twice = ["--create-namespace", "--set", "crds.install=false"];
    let said = format!(
        "release tdset (namespace tdset-system) already reconciles the TDSets of namespace {theirs}"
    );
    for (scope, would) in [
        (None, "every namespace".to_string()),
        (Some(theirs), format!("namespace {theirs}")),
    ] {
        let mut args = not_twice.to_vec();
        let watch = scope.map(|ns| format!("watchNamespace={ns}"));
        if let Some(watch) = &watch {
            args.extend(["--set", watch]);
        }
        let out = install_as(kc, other, chart, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "a release over {would} was installed"
        );
        assert!(
            stderr.contains(&said) && stderr.contains(&format!("would reconcile those of {would}")),
            "{stderr}"
        );
    }
    let left = succeeded(
        "listing the refused release's objects",
        kubectl_at(
            kc,
            &[
                "get",
                "clusterroles,deployments",
                "-A",
                "-l",
                "app.kubernetes.io/instance=other",
                "-o",
                "name",
            ],
        ),
    );
    assert_eq!(left.trim(), "", "a refused release wrote nothing");

    let mine = TestNamespace::new(client, "helm-other").await;
    let watch = format!("watchNamespace={}", mine.name);
    let mut args = not_twice.to_vec();
    args.extend(["--set", &watch]);
    succeeded("helm install other", install_as(kc, other, chart, &args));
    let operator = |ns: &str| format!("system:serviceaccount:{ns}:other-tdset-operator");
    let slice = std::env::temp_dir().join(format!("tdset-slice-{}.yaml", unique_suffix()));
    std::fs::write(
        &slice,
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-wake\n  \
             namespace: {}\n  labels:\n    endpointslice.kubernetes.io/managed-by: tdset.schedule.rs\n    \
             kubernetes.io/service-name: web\naddressType: IPv4\nendpoints: []\n",
            mine.name
        ),
    )
    .unwrap();
    let write_as = |who: &str| {
        let slice = slice.to_string_lossy();
        kubectl_at(
            kc,
            &["create", "--dry-run=server", "-f", &slice, "--as", who],
        )
    };
    succeeded(
        "the second operator writing its slice in its namespace",
        write_as(&operator(other.1)),
    );
    let theirs_there = write_as("system:serviceaccount:tdset-system:tdset-tdset-operator");
    assert!(
        !theirs_there.status.success(),
        "the first operator may not write in the second's namespace"
    );
    let _ = std::fs::remove_file(&slice);
    works_as_the_release_service_account(
        kc,
        client,
        (other.1, "other-tdset-operator"),
        &mine.name,
        Some("web3"),
    )
    .await;
    succeeded(
        "helm uninstall other",
        helm(kc, &["uninstall", other.0, "-n", other.1]),
    );
    release_gone(kc, other.0).await;
}

/// Runs the operator's controller in-process with the release's ServiceAccount token
/// (watching `namespace`, or every namespace) and waits until a new TDSet's Deployment exists.
async fn works_as_the_release_service_account(
    kubeconfig: &Path,
    admin: &kube::Client,
    (sa_namespace, sa): (&str, &str),
    namespace: &str,
    scoped_name: Option<&str>,
) {
    let (sa_client, _) = service_account_client_at(kubeconfig, sa_namespace, sa).await;
    let lease = LeaseOptions {
        name: format!("helm-test-{}", unique_suffix()),
        namespace: sa_namespace.into(),
        duration: std::time::Duration::from_secs(10),
        shard_selector: None,
    };
    let op = Operator::start_with(
        &sa_client,
        scoped_name.map(|_| namespace),
        SystemClock::default(),
        Some(lease),
        "helm-test",
    );
    let name = scoped_name.unwrap_or("web");
    create_tdset(
        admin,
        namespace,
        &tdset(
            name,
            json!({"container": {"image": "nginx", "port": 80},
                   "schedulingConfig": [{"startTime": 0, "endTime": 12, "replica": 2},
                                        {"startTime": 12, "endTime": 0, "replica": 2}],
                   "defaultReplica": 1}),
        ),
    )
    .await;
    deployment_at(admin, namespace, name, 2).await;
    assert_eq!(op.counter("tdset_reconcile_errors_total"), 0.0);
    op.stop().await;
}
