//! The control-plane script fails with one clear line naming what failed and what to run.

use std::process::Command;

fn script() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane.sh")
}

#[test]
fn start_without_binaries_names_the_install_command() {
    let cache = std::env::temp_dir().join(format!("tdset-empty-cache-{}", std::process::id()));
    let err = start_fails("empty", &[("TDSET_CACHE_DIR", cache.to_str().unwrap())]);
    assert!(
        err.contains("run: scripts/control-plane.sh install"),
        "{err}"
    );
}

/// Runs `start` with `env`; asserts it fails with one line on stderr and starts nothing.
fn start_fails(name: &str, env: &[(&str, &str)]) -> String {
    let state = std::env::temp_dir().join(format!("tdset-{name}-state-{}", std::process::id()));
    let out = Command::new(script())
        .arg("start")
        .arg(&state)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!state.join("pids").exists(), "nothing may be started");
    err
}

#[test]
fn install_without_go_says_so() {
    let cache = std::env::temp_dir().join(format!("tdset-nogo-cache-{}", std::process::id()));
    // A PATH with the basic tools but no Go.
    let dir = std::env::temp_dir().join(format!("tdset-nogo-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for tool in [
        "bash", "mkdir", "mktemp", "dirname", "basename", "cat", "rm", "mv", "tail", "sed", "date",
    ] {
        if let Ok(p) = which(tool) {
            let _ = std::os::unix::fs::symlink(p, dir.join(tool));
        }
    }
    let out = Command::new(script())
        .arg("install")
        .env("TDSET_CACHE_DIR", &cache)
        .env("PATH", &dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.trim().lines().count() == 1 && err.contains("no Go toolchain"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_requested_port_that_is_taken_is_named_before_anything_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let err = start_fails("port", &[("TDSET_APISERVER_PORT", &port)]);
    assert!(
        err.contains(&format!(
            "port {port} (TDSET_APISERVER_PORT) is already in use"
        )),
        "{err}"
    );
    let err = start_fails("port", &[("TDSET_APISERVER_PORT", "http")]);
    assert!(err.contains("is not a port number"), "{err}");
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map_err(|_| ())?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if p.is_empty() { Err(()) } else { Ok(p.into()) }
}
