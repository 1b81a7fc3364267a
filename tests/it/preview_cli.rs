//! The `preview` command's contract, through the real binary.

use std::process::Command;

fn preview(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tdset-operator"))
        .arg("preview")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/tdset_helloworld.yaml"
);

#[test]
fn at_json_has_the_contract_shape() {
    let (ok, out, err) = preview(&["-f", SEED, "--at", "2026-05-01T18:30:00Z", "-o", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["at"], "2026-05-01T18:30:00Z");
    assert_eq!(v["desiredReplicas"], 3);
    assert_eq!(v["activeWindow"], "17:00-19:00");
    assert_eq!(v["nextTransitionTime"], "2026-05-01T19:00:00Z");
    assert_eq!(v["nextReplicas"], 2);
}

#[test]
fn at_json_outside_windows_has_null_window() {
    let (ok, out, _) = preview(&[
        "-f",
        SEED,
        "--at",
        "2026-05-01T00:30:00+00:00",
        "-o",
        "json",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["desiredReplicas"], 3);
    assert!(v["activeWindow"].is_null());
    assert_eq!(v["nextTransitionTime"], "2026-05-01T01:00:00Z");
    assert_eq!(v["nextReplicas"], 2);
}

#[test]
fn range_json_lists_every_change() {
    let (ok, out, err) = preview(&[
        "-f",
        SEED,
        "--from",
        "2026-05-01T00:00:00Z",
        "--to",
        "2026-05-02T00:00:00Z",
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["initialReplicas"], 3);
    let got: Vec<(String, i64)> = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["at"].as_str().unwrap().to_string(),
                t["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    // 00:00 default 3 -> 01:00 2 -> 07:00 3 -> 09:00 5 -> 17:00 3 -> 19:00 2 -> 00:00 3 (in range, at `to`)
    let want = [
        ("01:00", 2),
        ("07:00", 3),
        ("09:00", 5),
        ("17:00", 3),
        ("19:00", 2),
    ];
    let mut want: Vec<(String, i64)> = want
        .iter()
        .map(|(t, r)| (format!("2026-05-01T{t}:00Z"), *r))
        .collect();
    want.push(("2026-05-02T00:00:00Z".into(), 3));
    assert_eq!(got, want);
}

#[test]
fn chart_draws_a_day() {
    let (ok, out, _) = preview(&["-f", SEED, "--from", "2026-05-01T00:00:00Z", "-o", "chart"]);
    assert!(ok);
    assert!(out.contains('█') && out.lines().count() >= 7, "{out}");
}

#[test]
fn invalid_manifest_says_what_and_where_and_fails() {
    // Its own directory: removing the one `manifest` writes to raced the tests beside it.
    let dir = std::env::temp_dir().join(format!("tdset-preview-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "startTime: 9 ",
            "startTime: 24 ",
            "spec.schedulingConfig[0].startTime",
        ),
        (
            "endTime: 17",
            "endTime: 9",
            "spec.schedulingConfig[0].endTime",
        ),
        (
            "defaultReplica: 3",
            "defaultReplica: 3\n  timeZone: Mars/Base",
            "spec.timeZone",
        ),
        ("port: 8000", "port: 70000", "spec.container.port"),
        (
            "replica: 5",
            "replica: many",
            "spec.schedulingConfig[0].replica",
        ),
    ];
    let seed = std::fs::read_to_string(SEED).unwrap();
    for (i, (from, to, field)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.yaml"));
        std::fs::write(&path, seed.replacen(from, to, 1)).unwrap();
        let (ok, _, err) = preview(&["-f", path.to_str().unwrap(), "--at", "2026-05-01T00:00:00Z"]);
        assert!(!ok, "case {i} should fail");
        assert!(err.contains(field), "case {i}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn preview_works_for_all_three_workload_forms() {
    // 2026-05-06 is a Wednesday: 12:00 in Berlin, 06:00 in New York, 11:00 in London.
    for (example, want) in [
        ("full-template.yaml", 3),
        ("existing-deployment.yaml", 1),
        ("hpa-business-hours.yaml", 5),
    ] {
        let path = format!("{}/examples/{example}", env!("CARGO_MANIFEST_DIR"));
        let (ok, out, err) = preview(&["-f", &path, "--at", "2026-05-06T10:00:00Z", "-o", "json"]);
        assert!(ok, "{example}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["desiredReplicas"], want, "{example}");
    }
}

/// `text` written as manifest `name` in this test run's own temp dir.
fn manifest(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tdset-preview-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_manifest_with_two_workload_sources_is_refused() {
    let text = std::fs::read_to_string(SEED).unwrap().replace(
        "spec:\n",
        "spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n",
    );
    let path = manifest("two.yaml", &text);
    let (ok, _, err) = preview(&["-f", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("exactly one of spec.container, spec.template, spec.scaleTargetRef or spec.scaleTargetSelector"),
        "{err}"
    );
}

const WARM_UP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/warm-up.yaml");

/// `warmUp`: the rise at 09:00 is listed with the start of its write, 3 minutes ahead; the
/// fall at 17:00 has none. At 08:58 the 10 replicas are written already.
#[test]
fn preview_shows_when_a_scale_up_is_written_ahead() {
    let range = [
        "-f",
        WARM_UP,
        "--from",
        "2026-05-04T08:00:00Z",
        "--to",
        "2026-05-04T18:00:00Z",
    ];
    let (ok, out, err) = preview(&[&range[..], &["-o", "json"]].concat());
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = v["transitions"].as_array().unwrap();
    assert_eq!(t[0]["at"], "2026-05-04T09:00:00Z");
    assert_eq!(t[0]["writeAt"], "2026-05-04T08:57:00Z");
    assert_eq!(t[1]["at"], "2026-05-04T17:00:00Z");
    assert!(t[1].get("writeAt").is_none(), "{}", t[1]);
    let (ok, table, err) = preview(&range);
    assert!(ok, "{err}");
    assert!(table.contains("3m ahead: warmUp"), "{table}");
    let at = |t: &str| {
        let (ok, out, err) = preview(&["-f", WARM_UP, "--at", t, "-o", "json"]);
        assert!(ok, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let before = at("2026-05-04T08:56:00Z");
    assert_eq!(before["desiredReplicas"], 2);
    assert_eq!(before["nextWriteTime"], "2026-05-04T08:57:00Z");
    assert_eq!(before["nextTransitionTime"], "2026-05-04T09:00:00Z");
    let ahead = at("2026-05-04T08:58:00Z");
    assert_eq!(ahead["desiredReplicas"], 10);
    assert!(ahead["activeWindow"].is_null());
    assert!(ahead.get("nextWriteTime").is_none(), "{ahead}");
}

const WARM_UP_MEASURED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/warm-up-measured.yaml"
);

/// `warmUp: Measured`: with nothing measured, the guess (`lead: 2m`); with the times its
/// status keeps (a live TDSet, or its `-o yaml`), their 90th percentile plus the margin.
#[test]
fn preview_leads_by_what_the_status_has_measured() {
    let range = |file: &str| {
        let (ok, out, err) = preview(&[
            "-f",
            file,
            "--from",
            "2026-05-04T06:00:00Z",
            "--to",
            "2026-05-04T12:00:00Z",
            "-o",
            "json",
        ]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["transitions"][0]["writeAt"].clone()
    };
    assert_eq!(range(WARM_UP_MEASURED), "2026-05-04T08:58:00Z");
    let text = std::fs::read_to_string(WARM_UP_MEASURED).unwrap()
        + "status:\n  warmUp: {lead: 55s, basis: Measured, samples: [50, 40]}\n";
    let path = manifest("measured.yaml", &text);
    assert_eq!(range(path.to_str().unwrap()), "2026-05-04T08:59:05Z");
}
