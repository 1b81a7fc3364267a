//! The CRD's schema and CEL rules on the real API server: what `kubectl apply` accepts, and
//! what it rejects with a message naming the field.

use crate::support::*;

fn manifest(ns: &str, spec: &str) -> String {
    format!(
        "apiVersion: schedule.rs/v1\nkind: TDSet\nmetadata:\n  name: t\n  namespace: {ns}\nspec:\n{spec}"
    )
}

const OK_SPEC: &str = "  container: {image: nginx, port: 80}
  defaultReplica: 1
  schedulingConfig:
  - {startTime: 9, endTime: 17, replica: 3}
";

/// A valid spec with one line replaced (by a prefix match on the trimmed line) or appended.
fn variant(replace: &str, with: &str) -> String {
    let mut found = false;
    let mut out: Vec<String> = OK_SPEC
        .lines()
        .map(|l| {
            if !found && l.trim_start().starts_with(replace) && !replace.is_empty() {
                found = true;
                with.to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    if !found {
        out.push(with.to_string());
    }
    out.join("\n") + "\n"
}

fn apply(yaml: &str) -> (bool, String) {
    let out = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], yaml);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn seed_manifest_is_accepted_unchanged() {
    let client = client().await;
    install_crd(&client).await;
    // The seed names its namespace (`temp`); create it so the manifest applies as written.
    let _ = kubectl(&["create", "namespace", "temp"]);
    let path = repo_root().join("examples/tdset_helloworld.yaml");
    // Server-side: one request whether or not the seed exists. `reconcile` and `examples`
    // create and delete it in `temp` beside this suite, and a client-side apply (a read, then
    // a create) raced one of them once ("AlreadyExists" on a dry run).
    let file = path.to_str().unwrap();
    let args = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        file,
    ];
    let out = kubectl(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn valid_manifests_are_accepted() {
    let (_, ns) = setup("adm-ok").await;
    let specs = [
        OK_SPEC.to_string(),
        variant("defaultReplica", "  defaultReplica: 0"),
        variant("schedulingConfig", "  schedulingConfig: []")
            .replace("  - {startTime: 9, endTime: 17, replica: 3}\n", ""),
        variant(
            "- {startTime",
            r#"  - {name: business-hours, startTime: "08:30", endTime: "17:45", replica: 3, days: [Mon, Tue, Wed, Thu, Fri]}"#,
        ),
        variant(
            "- {startTime",
            r#"  - {startTime: "22:00", endTime: 6, replica: 0, days: [Fri]}"#,
        ),
        variant(
            "- {startTime",
            r#"  - {startTime: 23, endTime: 0, replica: 10000}"#,
        ),
        variant("", "  timeZone: America/New_York"),
        variant("", "  timeZone: Etc/GMT+5"),
        variant("", "  intervalMint: 1440"),
        variant("", "  service: {port: 8080}"),
        variant(
            "- {startTime",
            "  - {startTime: 9, endTime: 17, replica: 3, days: [Sat, Sun, Hol]}\n  holidays: [\"2026-12-25\", \"2026-12-24/2026-12-26\"]",
        ),
        variant(
            "",
            "  overrides:\n  - {start: \"2026-11-27T08:00:00+01:00\", end: \"2026-11-27T20:00:00+01:00\", replica: 12, reason: product launch}\n  - {start: \"2026-11-28T00:00:00Z\", end: \"2026-11-28T00:01:00Z\", replica: 0}",
        ),
        variant(
            "",
            "  holidays: [\"2028-02-29\", \"2028-02-28/2028-03-01\"]",
        ),
        variant("", "  suspend: true"),
        variant("", "  ramp: {step: 2, every: 15m, direction: Both}"),
        variant("", "  ramp: {step: 1, every: 1h30m, direction: Down}"),
        variant("", "  ramp: {step: 1, every: 24h}"),
        variant("", "  warmUp: {mode: Fixed, lead: 2m}"),
        variant("", "  warmUp: {mode: Measured, lead: 90s, max: 1h}"),
        variant("", "  warmUp: {mode: Measured}"),
        variant("", "  warmUp: {mode: \"Off\", lead: 10m}"),
        variant(
            "container",
            "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}",
        ),
        variant(
            "container",
            "  scaleTargetRef: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: web}\n  onDelete: Restore",
        ),
        variant(
            "container",
            "  scaleTargetRef: {apiVersion: argoproj.io/v1alpha1, kind: Rollout, name: web.v2}\n  onDelete: Keep",
        ),
        variant(
            "container",
            "  template:\n    metadata: {labels: {team: a}}\n    spec:\n      containers:\n      - name: app\n        image: nginx:1.27\n        resources: {limits: {cpu: 500m, memory: 128Mi}, requests: {cpu: \"0.25\", memory: 1000}}\n        ports: [{name: http, containerPort: 8080}]\n  service: {port: 80}",
        ),
    ];
    for (i, spec) in specs.iter().enumerate() {
        let (ok, out) = apply(&manifest(&ns.name, spec));
        assert!(ok, "valid case {i} was rejected:\n{spec}\n{out}");
    }
    ns.cleanup().await;
}

#[tokio::test]
async fn invalid_manifests_are_rejected_naming_the_field() {
    let (_, ns) = setup("adm-bad").await;
    let w = "- {startTime";
    let many_windows = format!(
        "  container: {{image: nginx, port: 80}}\n  defaultReplica: 1\n  schedulingConfig:\n{}",
        (0..65)
            .map(|i| format!(
                "  - {{startTime: {}, endTime: {}, replica: 1}}\n",
                i % 23,
                i % 23 + 1
            ))
            .collect::<String>()
    );
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "holiday not a date",
            variant("", "  holidays: [\"2026-13-01\"]"),
            "spec.holidays[0]",
        ),
        (
            "holiday range backwards",
            variant("", "  holidays: [\"2026-12-26/2026-12-24\"]"),
            "spec.holidays[0]",
        ),
        (
            "holiday that does not exist",
            variant("", "  holidays: [\"2026-12-24\", \"2027-02-29\"]"),
            // Kubernetes 1.35+ quotes the value (before: its type, "string").
            "spec.holidays[1]: Invalid value: \"2027-02-29\": not a real date",
        ),
        (
            "holiday range ending on a day that does not exist",
            variant("", "  holidays: [\"2026-04-01/2026-04-31\"]"),
            "spec.holidays[0]: Invalid value: \"2026-04-01/2026-04-31\": not a real date",
        ),
        (
            "too many holidays",
            variant(
                "",
                &format!(
                    "  holidays: [{}]",
                    (0..367).map(|i| format!("\"2026-01-01/2027-{:02}-01\"", i % 12 + 1)).collect::<Vec<_>>().join(", ")
                ),
            ),
            "spec.holidays: Too many",
        ),
        (
            "unknown day name",
            variant(w, "  - {startTime: 9, endTime: 17, replica: 3, days: [Holiday]}"),
            "spec.schedulingConfig[0].days[0]",
        ),
        (
            "override ending before it starts",
            variant(
                "",
                "  overrides: [{start: \"2026-11-27T20:00:00+01:00\", end: \"2026-11-27T08:00:00+01:00\", replica: 12}]",
            ),
            "spec.overrides[0].end",
        ),
        (
            "override start not an instant",
            variant("", "  overrides: [{start: tomorrow, end: \"2026-11-27T08:00:00Z\", replica: 12}]"),
            "spec.overrides[0].start",
        ),
        (
            "override replica negative",
            variant(
                "",
                "  overrides: [{start: \"2026-11-27T08:00:00Z\", end: \"2026-11-27T09:00:00Z\", replica: -1}]",
            ),
            "spec.overrides[0].replica",
        ),
        (
            "too many overrides",
            variant(
                "",
                &format!(
                    "  overrides: [{}]",
                    (0..33).map(|_| "{start: \"2026-11-27T08:00:00Z\", end: \"2026-11-27T09:00:00Z\", replica: 1}").collect::<Vec<_>>().join(", ")
                ),
            ),
            "spec.overrides: Too many",
        ),
        (
            "ramp step 0",
            variant("", "  ramp: {step: 0, every: 15m}"),
            "spec.ramp.step",
        ),
        (
            "ramp every under a minute",
            variant("", "  ramp: {step: 1, every: 30s}"),
            "spec.ramp.every",
        ),
        (
            "ramp every over a day",
            variant("", "  ramp: {step: 1, every: 25h}"),
            "spec.ramp.every",
        ),
        (
            "ramp every not a duration",
            variant("", "  ramp: {step: 1, every: soon}"),
            "spec.ramp.every",
        ),
        (
            "ramp direction unknown",
            variant("", "  ramp: {step: 1, every: 15m, direction: Sideways}"),
            "spec.ramp.direction",
        ),
        (
            "warmUp mode unknown",
            variant("", "  warmUp: {mode: Early}"),
            "spec.warmUp.mode",
        ),
        (
            // YAML reads an unquoted Off as false (write "Off", as for the VPA's updateMode).
            "warmUp mode Off unquoted",
            variant("", "  warmUp: {mode: Off}"),
            "spec.warmUp.mode",
        ),
        (
            "warmUp Fixed without a lead",
            variant("", "  warmUp: {mode: Fixed}"),
            "spec.warmUp.lead",
        ),
        (
            "warmUp lead not a duration",
            variant("", "  warmUp: {mode: Fixed, lead: soon}"),
            "spec.warmUp.lead",
        ),
        (
            "warmUp lead over the default max",
            variant("", "  warmUp: {mode: Fixed, lead: 11m}"),
            "spec.warmUp.lead",
        ),
        (
            "warmUp lead over its max",
            variant("", "  warmUp: {mode: Measured, lead: 5m, max: 2m}"),
            "spec.warmUp.lead",
        ),
        (
            "warmUp max over an hour",
            variant("", "  warmUp: {mode: Measured, max: 2h}"),
            "spec.warmUp.max",
        ),
        (
            "warmUp lead of 0s",
            variant("", "  warmUp: {mode: Fixed, lead: 0s}"),
            "spec.warmUp.lead",
        ),
        (
            "suspend not a boolean",
            variant("", "  suspend: sometimes"),
            "spec.suspend",
        ),
        (
            "no workload source",
            variant("container", ""),
            "exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector",
        ),
        (
            "two workload sources",
            variant(
                "",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}",
            ),
            "exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector",
        ),
        (
            "service with a referenced target",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  service: {port: 80}",
            ),
            "spec.service",
        ),
        (
            "onDelete with an owned Deployment",
            variant("", "  onDelete: Restore"),
            "spec.onDelete",
        ),
        (
            "onDelete unknown",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  onDelete: Delete",
            ),
            "spec.onDelete",
        ),
        (
            "scaleTargetRef without a name",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment}",
            ),
            "spec.scaleTargetRef.name: Required value",
        ),
        (
            "scaleTargetRef name not a DNS name",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: Web_1}",
            ),
            "spec.scaleTargetRef.name",
        ),
        (
            "scaleTargetRef apiVersion malformed",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps, kind: Deployment, name: web}",
            ),
            "spec.scaleTargetRef.apiVersion",
        ),
        (
            "scaleTargetRef with a namespace",
            variant(
                "container",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web, namespace: other}",
            ),
            "spec.scaleTargetRef.namespace",
        ),
        (
            "template without containers",
            variant("container", "  template: {spec: {}}"),
            "spec.template.spec.containers: Required value",
        ),
        (
            "template container without an image",
            variant(
                "container",
                "  template: {spec: {containers: [{name: app}]}}",
            ),
            "spec.template.spec.containers[0].image: Required value",
        ),
        (
            "template with a bad quantity",
            variant(
                "container",
                "  template: {spec: {containers: [{name: app, image: nginx, resources: {limits: {memory: lots}}}]}}",
            ),
            "spec.template.spec.containers[0].resources.limits[memory]",
        ),
        (
            "template with an unknown field",
            variant(
                "container",
                "  template: {spec: {containers: [{name: app, image: nginx, imagePullPolicyy: Always}]}}",
            ),
            "imagePullPolicyy",
        ),
        (
            "empty image",
            variant("container", r#"  container: {image: "", port: 80}"#),
            "spec.container.image",
        ),
        (
            "image with a space",
            variant(
                "container",
                r#"  container: {image: "nginx latest", port: 80}"#,
            ),
            "spec.container.image",
        ),
        (
            "missing port",
            variant("container", "  container: {image: nginx}"),
            "spec.container.port: Required value",
        ),
        (
            "port 0",
            variant("container", "  container: {image: nginx, port: 0}"),
            "spec.container.port",
        ),
        (
            "port 70000",
            variant("container", "  container: {image: nginx, port: 70000}"),
            "spec.container.port",
        ),
        (
            "port as text",
            variant("container", "  container: {image: nginx, port: http}"),
            "spec.container.port",
        ),
        (
            "missing defaultReplica",
            variant("defaultReplica", ""),
            "spec.defaultReplica: Required value",
        ),
        (
            "negative defaultReplica",
            variant("defaultReplica", "  defaultReplica: -1"),
            "spec.defaultReplica",
        ),
        (
            "huge defaultReplica",
            variant("defaultReplica", "  defaultReplica: 10001"),
            "spec.defaultReplica",
        ),
        (
            "missing schedulingConfig",
            OK_SPEC.lines().take(2).collect::<Vec<_>>().join("\n") + "\n",
            "spec.schedulingConfig: Required value",
        ),
        (
            "startTime 24",
            variant(w, "  - {startTime: 24, endTime: 17, replica: 3}"),
            "spec.schedulingConfig[0].startTime",
        ),
        (
            "startTime negative",
            variant(w, "  - {startTime: -1, endTime: 17, replica: 3}"),
            "spec.schedulingConfig[0].startTime",
        ),
        (
            "startTime H:MM",
            variant(w, r#"  - {startTime: "9:00", endTime: 17, replica: 3}"#),
            "spec.schedulingConfig[0].startTime",
        ),
        (
            "endTime 24:00",
            variant(w, r#"  - {startTime: 9, endTime: "24:00", replica: 3}"#),
            "spec.schedulingConfig[0].endTime",
        ),
        (
            "endTime 12:60",
            variant(w, r#"  - {startTime: 9, endTime: "12:60", replica: 3}"#),
            "spec.schedulingConfig[0].endTime",
        ),
        (
            "missing startTime",
            variant(w, "  - {endTime: 17, replica: 3}"),
            "spec.schedulingConfig[0].startTime: Required value",
        ),
        (
            "start equals end",
            variant(w, r#"  - {startTime: 9, endTime: "09:00", replica: 3}"#),
            "spec.schedulingConfig[0].endTime: Invalid value",
        ),
        (
            "negative replica",
            variant(w, "  - {startTime: 9, endTime: 17, replica: -2}"),
            "spec.schedulingConfig[0].replica",
        ),
        (
            "missing replica",
            variant(w, "  - {startTime: 9, endTime: 17}"),
            "spec.schedulingConfig[0].replica: Required value",
        ),
        (
            "unknown day",
            variant(
                w,
                "  - {startTime: 9, endTime: 17, replica: 3, days: [Funday]}",
            ),
            "spec.schedulingConfig[0].days[0]",
        ),
        (
            "lower-case day",
            variant(
                w,
                "  - {startTime: 9, endTime: 17, replica: 3, days: [mon]}",
            ),
            "spec.schedulingConfig[0].days[0]",
        ),
        (
            "duplicate day",
            variant(
                w,
                "  - {startTime: 9, endTime: 17, replica: 3, days: [Mon, Mon]}",
            ),
            "spec.schedulingConfig[0].days[1]",
        ),
        (
            "empty days",
            variant(w, "  - {startTime: 9, endTime: 17, replica: 3, days: []}"),
            "spec.schedulingConfig[0].days",
        ),
        (
            "window name with space",
            variant(
                w,
                r#"  - {name: "office hours", startTime: 9, endTime: 17, replica: 3}"#,
            ),
            "spec.schedulingConfig[0].name",
        ),
        (
            "intervalMint 0",
            variant("", "  intervalMint: 0"),
            "spec.intervalMint",
        ),
        (
            "intervalMint over a day",
            variant("", "  intervalMint: 1441"),
            "spec.intervalMint",
        ),
        (
            "service port 0",
            variant("", "  service: {port: 0}"),
            "spec.service.port",
        ),
        (
            "timeZone with spaces",
            variant("", "  timeZone: New York"),
            "spec.timeZone",
        ),
        (
            "too many windows",
            many_windows,
            "spec.schedulingConfig: Too many",
        ),
    ];
    assert!(cases.len() >= 15);
    let mut failures = Vec::new();
    for (what, spec, field) in &cases {
        let (ok, out) = apply(&manifest(&ns.name, spec));
        if ok {
            failures.push(format!("{what}: accepted, should be rejected"));
        } else if !out.contains(field) {
            failures.push(format!("{what}: message does not name {field:?}:\n  {out}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    ns.cleanup().await;
}

/// The group form (`scaleTargetSelector`): what it accepts, and every mistake named by field.
#[tokio::test]
async fn the_group_form_is_checked_at_admission() {
    let (_, ns) = setup("adm-group").await;
    let group = |selector: &str, rest: &str| {
        format!(
            "  scaleTargetSelector:\n{selector}  schedulingConfig:\n  - {{startTime: \"20:00\", endTime: \"07:00\", replica: 0, days: [Mon, Tue, Wed, Thu, Fri]}}\n{rest}"
        )
    };
    let accepted = [
        group("    selector: {}\n", ""),
        group(
            "    kinds: [Deployment, StatefulSet, CronJob, Rollout.argoproj.io]\n    selector: {matchLabels: {env: dev}, matchExpressions: [{key: tier, operator: NotIn, values: [db]}]}\n    exclude: [db-migrator]\n",
            "  defaultReplica: 2\n",
        ),
        // own: defaultReplica and an override's replica omitted (a manual wake-up).
        group(
            "    selector: {matchLabels: {env: dev}}\n",
            "  overrides:\n  - {start: \"2026-11-27T08:00:00Z\", end: \"2026-11-27T10:00:00Z\", reason: wake}\n",
        ),
        // Tiers woken in order, each waited for at most 90 s.
        group(
            "    selector: {matchLabels: {env: dev}}\n    order: [{matchLabels: {tier: data}}, {matchExpressions: [{key: tier, operator: In, values: [api, worker]}]}]\n    tierTimeout: 90s\n",
            "",
        ),
    ];
    for (i, spec) in accepted.iter().enumerate() {
        let (ok, out) = apply(&manifest(&ns.name, spec));
        assert!(ok, "valid group case {i} was rejected:\n{spec}\n{out}");
    }
    // A selector is matched against every event of what it may select: its size is bounded.
    let labels: Vec<String> = (0..33).map(|i| format!("k{i}: v")).collect();
    let many_labels = format!("    selector: {{matchLabels: {{{}}}}}\n", labels.join(", "));
    let expressions: Vec<&str> = vec!["{key: k, operator: Exists}"; 17];
    let many_expressions = format!(
        "    selector: {{matchExpressions: [{}]}}\n",
        expressions.join(", ")
    );
    let values: Vec<String> = (0..65).map(|i| format!("v{i}")).collect();
    let many_values = format!(
        "    selector: {{matchExpressions: [{{key: k, operator: In, values: [{}]}}]}}\n",
        values.join(", ")
    );
    let long_value = format!("    selector: {{matchLabels: {{k: {}}}}}\n", "v".repeat(64));
    let rejected: Vec<(&str, String, &str)> = vec![
        (
            "33 labels in a selector",
            group(&many_labels, ""),
            "spec.scaleTargetSelector.selector.matchLabels",
        ),
        (
            "17 expressions in a selector",
            group(&many_expressions, ""),
            "spec.scaleTargetSelector.selector.matchExpressions",
        ),
        (
            "65 values in an expression",
            group(&many_values, ""),
            "spec.scaleTargetSelector.selector.matchExpressions[0].values",
        ),
        (
            "a label value longer than a label may be",
            group(&long_value, ""),
            "spec.scaleTargetSelector.selector.matchLabels.k",
        ),
        (
            "unknown kind",
            group("    kinds: [Pod]\n    selector: {}\n", ""),
            "spec.scaleTargetSelector.kinds[0]",
        ),
        (
            "kind without a group",
            group("    kinds: [Deployment, Rollout]\n    selector: {}\n", ""),
            "spec.scaleTargetSelector.kinds[1]",
        ),
        (
            "kind with a bad group",
            group("    kinds: [Rollout.Argoproj..io]\n    selector: {}\n", ""),
            "spec.scaleTargetSelector.kinds[0]",
        ),
        (
            "an HPA as a group kind",
            group(
                "    kinds: [HorizontalPodAutoscaler.autoscaling]\n    selector: {}\n",
                "",
            ),
            "spec.scaleTargetSelector.kinds[0]",
        ),
        (
            "an object as a kind",
            group("    kinds: [{kind: Rollout}]\n    selector: {}\n", ""),
            "spec.scaleTargetSelector.kinds[0]",
        ),
        (
            "no selector",
            group("    kinds: [Deployment]\n", ""),
            "spec.scaleTargetSelector.selector: Required value",
        ),
        (
            "a ramp with own",
            group("    selector: {}\n", "  ramp: {step: 1, every: 15m}\n"),
            "spec.ramp",
        ),
        (
            "a form mix",
            group(
                "    selector: {}\n",
                "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n",
            ),
            "exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector",
        ),
        (
            "a Service with a group",
            group("    selector: {}\n", "  service: {port: 80}\n"),
            "spec.service",
        ),
        (
            "own outside the group form",
            variant(
                "",
                "  overrides:\n  - {start: \"2026-11-27T08:00:00Z\", end: \"2026-11-27T10:00:00Z\"}",
            ),
            "spec.overrides",
        ),
        (
            "the operator's own label selected on",
            group(
                "    selector: {matchLabels: {schedule.rs/held-by-uid: x}}\n",
                "",
            ),
            "spec.scaleTargetSelector.selector",
        ),
        (
            "the operator's own label in an expression",
            group(
                "    selector: {matchExpressions: [{key: schedule.rs/held-by-uid, operator: Exists}]}\n",
                "",
            ),
            "spec.scaleTargetSelector.selector",
        ),
        (
            "the operator's own label in a tier",
            group(
                "    selector: {}\n    order: [{matchLabels: {tier: data}}, {matchLabels: {schedule.rs/held-by-uid: x}}]\n",
                "",
            ),
            "spec.scaleTargetSelector.order[1]",
        ),
        (
            "nine tiers",
            group(
                &format!(
                    "    selector: {{}}\n    order: [{}]\n",
                    ["{matchLabels: {t: a}}"; 9].join(", ")
                ),
                "",
            ),
            "spec.scaleTargetSelector.order",
        ),
        (
            "a tier timeout over an hour",
            group("    selector: {}\n    tierTimeout: 2h\n", ""),
            "spec.scaleTargetSelector.tierTimeout",
        ),
        (
            "a tier timeout not a duration",
            group("    selector: {}\n    tierTimeout: soon\n", ""),
            "spec.scaleTargetSelector.tierTimeout",
        ),
        (
            "excluded name empty",
            group("    selector: {}\n    exclude: [\"\"]\n", ""),
            "spec.scaleTargetSelector.exclude[0]",
        ),
    ];
    let mut failures = Vec::new();
    for (what, spec, field) in &rejected {
        let (ok, out) = apply(&manifest(&ns.name, spec));
        if ok {
            failures.push(format!("{what}: accepted, should be rejected"));
        } else if !out.contains(field) {
            failures.push(format!("{what}: message does not name {field:?}:\n  {out}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    ns.cleanup().await;
}

/// A TDCalendar's dates are checked as a TDSet's: one that does not exist is refused at
/// `kubectl apply`, naming it (stored, it would leave every TDSet naming the calendar without
/// its dates).
#[tokio::test]
async fn a_calendar_with_a_date_that_does_not_exist_is_rejected() {
    let client = client().await;
    install_crd(&client).await;
    let calendar = |holidays: &str| {
        format!(
            "apiVersion: schedule.rs/v1\nkind: TDCalendar\nmetadata:\n  name: adm-{}\nspec:\n  holidays: {holidays}\n",
            unique_suffix()
        )
    };
    let (ok, out) = apply(&calendar(
        "[\"2026-12-24\", \"2028-02-29\", \"2026-12-30/2027-01-02\"]",
    ));
    assert!(ok, "{out}");
    for (holidays, field) in [
        ("[\"2026-12-24\", \"2027-02-29\"]", "spec.holidays[1]"),
        ("[\"2026-06-31\"]", "spec.holidays[0]"),
        ("[\"2026-12-30/2027-02-30\"]", "spec.holidays[0]"),
    ] {
        let (ok, out) = apply(&calendar(holidays));
        assert!(!ok, "{holidays} was accepted");
        assert!(
            out.contains(field) && out.contains("not a real date"),
            "{holidays}: {out}"
        );
    }
}

/// Scheduled HPA ceilings (`maxReplica`): at least the floor beside them, only for an HPA,
/// never with a ramp; the field named.
#[tokio::test]
async fn scheduled_ceilings_are_checked_at_admission() {
    let (_, ns) = setup("adm-ceiling").await;
    let hpa = "  scaleTargetRef: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: web}\n";
    let spec = |windows: &str, rest: &str| {
        format!("{hpa}  defaultReplica: 2\n  schedulingConfig:\n{windows}{rest}")
    };
    let day = "  - {startTime: 9, endTime: 17, replica: 10, maxReplica: 50}\n";
    let override_ = "  overrides: [{start: \"2026-12-24T00:00:00Z\", end: \"2026-12-25T00:00:00Z\", replica: 1, maxReplica: 3}]\n";
    for ok in [
        spec(day, ""),
        spec(day, "  defaultMaxReplica: 5\n"),
        spec(day, override_),
        spec(
            "  - {startTime: 9, endTime: 17, replica: 10, maxReplica: 10}\n",
            "",
        ),
    ] {
        let (accepted, out) = apply(&manifest(&ns.name, &ok));
        assert!(accepted, "rejected:\n{ok}\n{out}");
    }
    let cases = [
        (
            spec(
                "  - {startTime: 9, endTime: 17, replica: 10, maxReplica: 5}\n",
                "",
            ),
            "spec.schedulingConfig[0].maxReplica",
        ),
        (
            spec(day, "  defaultMaxReplica: 1\n"),
            "spec.defaultMaxReplica",
        ),
        (
            spec(day, &override_.replace("maxReplica: 3", "maxReplica: 0")),
            "spec.overrides[0].maxReplica",
        ),
        (
            spec(
                day,
                &override_.replace("replica: 1, maxReplica: 3", "replica: 4, maxReplica: 3"),
            ),
            "spec.overrides[0].maxReplica",
        ),
        (
            spec(day, "").replace(
                "autoscaling/v2, kind: HorizontalPodAutoscaler",
                "apps/v1, kind: Deployment",
            ),
            "need spec.scaleTargetRef to a HorizontalPodAutoscaler",
        ),
        (
            spec(day, "  ramp: {step: 1, every: 1m}\n"),
            "and no spec.ramp",
        ),
    ];
    for (bad, field) in cases {
        let (accepted, out) = apply(&manifest(&ns.name, &bad));
        assert!(!accepted, "accepted:\n{bad}");
        assert!(out.contains(field), "{field} not named:\n{bad}\n{out}");
    }
    ns.cleanup().await;
}

/// `spec.wakeOnRequest`: every form that can be asleep may wake on requests; a bad Service
/// name, duration, port or pattern is rejected with the field named.
#[tokio::test]
async fn wake_on_request_is_checked_at_admission_naming_the_field() {
    let (_, ns) = setup("adm-wake").await;
    let ok = [
        variant("", "  wakeOnRequest: {services: [{name: web}]}"),
        variant(
            "",
            r#"  wakeOnRequest: {services: [{name: web, ports: [http, 8080, metrics]}, {name: api}], wakeFor: 1m, hold: 60s, ignore: {userAgents: ["(?i)(bot|crawler|spider|ELB-HealthChecker)"], paths: [/healthz, "/.well-known/*"]}}"#,
        ),
        variant("", "  wakeOnRequest: {services: [{name: web}], wakeFor: 24h, hold: 1s}"),
        // Patterns RE2 takes that the proxy's engine may leave out: accepted, and never a
        // stopped schedule (the operator does not compile them).
        variant(
            "",
            r#"  wakeOnRequest: {services: [{name: web}], ignore: {userAgents: ['\Qa.b\E', '(?i)\b\w{3,20}bot\b']}}"#,
        ),
        // The group form (without a ramp), and a referenced workload.
        "  scaleTargetSelector: {selector: {matchLabels: {app: web}}}\n  schedulingConfig: []\n  wakeOnRequest: {services: [{name: web}]}\n"
            .to_string(),
        "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  defaultReplica: 0\n  schedulingConfig: []\n  wakeOnRequest: {services: [{name: web}]}\n"
            .to_string(),
    ];
    for (i, spec) in ok.iter().enumerate() {
        let (accepted, out) = apply(&manifest(&ns.name, spec));
        assert!(accepted, "valid case {i} was rejected:\n{spec}\n{out}");
    }
    let w = |line: &str| variant("", &format!("  wakeOnRequest: {line}"));
    let cases: Vec<(&str, String, &str)> = vec![
        ("no services", w("{services: []}"), "spec.wakeOnRequest.services"),
        ("a Service name that is no DNS label", w("{services: [{name: Web_1}]}"), "spec.wakeOnRequest.services[0].name"),
        ("the same Service twice", w("{services: [{name: web}, {name: web}]}"), "spec.wakeOnRequest.services[1]"),
        (
            "17 Services",
            w(&format!("{{services: [{}]}}", (0..17).map(|i| format!("{{name: s{i}}}")).collect::<Vec<_>>().join(", "))),
            "spec.wakeOnRequest.services: Too many",
        ),
        ("port 0", w("{services: [{name: web, ports: [0]}]}"), "spec.wakeOnRequest.services[0].ports[0]"),
        ("port 65536", w("{services: [{name: web, ports: [65536]}]}"), "spec.wakeOnRequest.services[0].ports[0]"),
        ("a port name with a capital", w("{services: [{name: web, ports: [Http]}]}"), "spec.wakeOnRequest.services[0].ports[0]"),
        ("a port name without a letter", w(r#"{services: [{name: web, ports: ["70000"]}]}"#), "spec.wakeOnRequest.services[0].ports[0]"),
        ("wakeFor 30s", w("{services: [{name: web}], wakeFor: 30s}"), "spec.wakeOnRequest.wakeFor"),
        ("wakeFor 25h", w("{services: [{name: web}], wakeFor: 25h}"), "spec.wakeOnRequest.wakeFor"),
        ("wakeFor not a duration", w("{services: [{name: web}], wakeFor: soon}"), "spec.wakeOnRequest.wakeFor"),
        ("hold 0s", w("{services: [{name: web}], hold: 0s}"), "spec.wakeOnRequest.hold"),
        ("hold 2m", w("{services: [{name: web}], hold: 2m}"), "spec.wakeOnRequest.hold"),
        (
            "a user agent pattern that is no regular expression",
            w(r#"{services: [{name: web}], ignore: {userAgents: ["(bot"]}}"#),
            "spec.wakeOnRequest.ignore.userAgents",
        ),
        ("a path without a leading slash", w("{services: [{name: web}], ignore: {paths: [healthz]}}"), "spec.wakeOnRequest.ignore.paths[0]"),
        (
            "a group with a ramp",
            "  scaleTargetSelector: {selector: {matchLabels: {app: web}}}\n  defaultReplica: 0\n  schedulingConfig: []\n  ramp: {step: 1, every: 15m}\n  wakeOnRequest: {services: [{name: web}]}\n".to_string(),
            "spec.wakeOnRequest: Forbidden: spec.wakeOnRequest wakes a group to the level own",
        ),
    ];
    for (what, spec, field) in cases {
        let (accepted, out) = apply(&manifest(&ns.name, &spec));
        assert!(!accepted, "{what}: accepted:\n{spec}");
        assert!(
            out.contains(field),
            "{what}: the message does not name {field}:\n{out}"
        );
    }
    ns.cleanup().await;
}

/// `spec.idle`: its bounds, its forms and what it needs beside it, each refusal naming the
/// field.
#[tokio::test]
async fn idle_is_checked_at_admission_naming_the_field() {
    let (_, ns) = setup("adm-idle").await;
    let wake = "  wakeOnRequest: {services: [{name: web}]}";
    let idle = |line: &str| format!("{}\n  idle: {line}", variant("", wake).trim_end());
    let alone = |line: &str| variant("", &format!("  idle: {line}"));
    let ok = [
        idle("{after: 30m, signals: [{prometheus: {template: traefik}}]}"),
        idle(
            "{after: 1m, during: Always, belowRequestsPerSecond: '0.5', signals: [{prometheus: {template: ingress-nginx, service: web}}, {cpu: {busyAbove: 20%}}]}",
        ),
        idle(
            "{after: 24h, during: Windows, windows: [{startTime: '12:00', endTime: 14, days: [Mon, Fri]}], signals: [{prometheus: {query: 'sum by (namespace, service) (rate(my_requests_total[2m]))'}}]}",
        ),
        // No request wakes it: a form other than RequestWakeUps, and the Service named.
        alone(
            "{after: 30m, during: OutsideWindows, signals: [{prometheus: {template: istio, service: web}}]}",
        ),
    ];
    for (i, spec) in ok.iter().enumerate() {
        let (accepted, out) = apply(&manifest(&ns.name, spec));
        assert!(accepted, "valid case {i} was rejected:\n{spec}\n{out}");
    }
    let traefik = "signals: [{prometheus: {template: traefik}}]";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "after 30s",
            idle(&format!("{{after: 30s, {traefik}}}")),
            "spec.idle.after",
        ),
        (
            "after 25h",
            idle(&format!("{{after: 25h, {traefik}}}")),
            "spec.idle.after",
        ),
        (
            "after not a duration",
            idle(&format!("{{after: later, {traefik}}}")),
            "spec.idle.after",
        ),
        (
            "no after",
            idle(&format!("{{{traefik}}}")),
            "spec.idle.after",
        ),
        (
            "an unknown during",
            idle(&format!("{{after: 5m, during: Sometimes, {traefik}}}")),
            "spec.idle.during",
        ),
        (
            "windows without during: Windows",
            idle(&format!(
                "{{after: 5m, windows: [{{startTime: 1, endTime: 2}}], {traefik}}}"
            )),
            "spec.idle.windows",
        ),
        (
            "during: Windows without windows",
            idle(&format!("{{after: 5m, during: Windows, {traefik}}}")),
            "spec.idle.windows",
        ),
        (
            "no signals",
            idle("{after: 5m, signals: []}"),
            "spec.idle.signals",
        ),
        (
            "only the cpu veto",
            idle("{after: 5m, signals: [{cpu: {busyAbove: 20%}}]}"),
            "spec.idle.signals: Required value",
        ),
        (
            "five signals",
            idle(
                "{after: 5m, signals: [{prometheus: {template: traefik}}, {prometheus: {template: envoy}}, {prometheus: {template: istio}}, {prometheus: {template: linkerd}}, {cpu: {busyAbove: 5%}}]}",
            ),
            "spec.idle.signals: Too many",
        ),
        (
            "a signal with both",
            idle("{after: 5m, signals: [{prometheus: {template: traefik}, cpu: {busyAbove: 5%}}]}"),
            "spec.idle.signals[0]",
        ),
        (
            "an unknown template",
            idle("{after: 5m, signals: [{prometheus: {template: haproxy}}]}"),
            "spec.idle.signals[0].prometheus.template",
        ),
        (
            "a template and a query",
            idle(
                "{after: 5m, signals: [{prometheus: {template: traefik, query: 'sum by (namespace, service) (x)'}}]}",
            ),
            "spec.idle.signals[0].prometheus",
        ),
        (
            "a query without namespace and service",
            idle("{after: 5m, signals: [{prometheus: {query: 'sum(rate(x[1m]))'}}]}"),
            "spec.idle.signals[0].prometheus.query",
        ),
        (
            "a Service name that is no DNS label",
            idle("{after: 5m, signals: [{prometheus: {template: traefik, service: Web_1}}]}"),
            "spec.idle.signals[0].prometheus.service",
        ),
        (
            "busyAbove 0%",
            idle(
                "{after: 5m, signals: [{prometheus: {template: traefik}}, {cpu: {busyAbove: 0%}}]}",
            ),
            "spec.idle.signals[1].cpu.busyAbove",
        ),
        (
            "busyAbove 101%",
            idle(
                "{after: 5m, signals: [{prometheus: {template: traefik}}, {cpu: {busyAbove: 101%}}]}",
            ),
            "spec.idle.signals[1].cpu.busyAbove",
        ),
        (
            "a threshold that is no number",
            idle(&format!(
                "{{after: 5m, belowRequestsPerSecond: 'a few', {traefik}}}"
            )),
            "spec.idle.belowRequestsPerSecond",
        ),
        (
            "RequestWakeUps with no request to wake it",
            alone("{after: 5m, signals: [{prometheus: {template: traefik, service: web}}]}"),
            "spec.idle: Required value: spec.idle.during RequestWakeUps",
        ),
        (
            "no Service to read without wakeOnRequest",
            alone("{after: 5m, during: Always, signals: [{prometheus: {template: traefik}}]}"),
            "spec.idle: Required value: a prometheus signal's service",
        ),
    ];
    for (what, spec, field) in cases {
        let (accepted, out) = apply(&manifest(&ns.name, &spec));
        assert!(!accepted, "{what}: accepted:\n{spec}");
        assert!(
            out.contains(field),
            "{what}: the message does not name {field}:\n{out}"
        );
    }
    ns.cleanup().await;
}
