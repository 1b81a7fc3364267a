#!/usr/bin/env bash
# Runs every test: builds (or reuses) the cached local control plane, starts one for the whole
# run, and runs the unit, property and integration suites against it. Extra arguments go to
# `cargo test` (e.g. `scripts/test.sh --test it admission::`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need() { command -v "$1" >/dev/null 2>&1; }
missing=()
for tool in openssl curl python3; do need "$tool" || missing+=("$tool"); done
# Debian's prometheus package: the server (a real scrape in tests/it/prometheus.rs) and promtool
# (the alert rules are checked and unit-tested).
{ need prometheus && need promtool; } || missing+=(prometheus)
# A real node (tests/it/real_node.rs, scripts/real-node.sh), which needs root: containerd, runc,
# the CNI plugins, iptables for kube-proxy, buildah to build images without a Docker engine.
# Without root the real-node test says why and is skipped.
if [[ $(id -u) -eq 0 ]]; then
  for tool in containerd runc buildah iptables; do need "$tool" || missing+=("$tool"); done
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  if need apt-get && [[ $(id -u) -eq 0 ]]; then
    echo "test.sh: installing ${missing[*]} with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing ${missing[*]}; install them and retry" >&2; exit 1
  fi
fi
need cargo || { echo "test.sh: no Rust toolchain; install it with rustup (https://rustup.rs) and retry" >&2; exit 1; }

# Each phase's wall time, for docs/development.md, "Development notes" (the table of runs), and how busy
# the machine's CPUs were meanwhile (from /proc/stat: whether a phase waits or works).
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
phase_start=$SECONDS
read -r busy_start total_start < <(cpu_ticks)
phase() {
  local busy total
  read -r busy total < <(cpu_ticks)
  echo "test.sh: phase '$1' took $((SECONDS - phase_start)) s ($((SECONDS / 60)) min since the start; CPUs $(( (busy - busy_start) * 100 / (total - total_start + 1) ))% busy)" >&2
  phase_start=$SECONDS; busy_start=$busy; total_start=$total
}

state="$(mktemp -d "${TMPDIR:-/tmp}/tdset-test.XXXXXX")"
install_pid=""
# A control plane's build still running is left to finish: what it builds is cached.
load_pids=()
# A loaded run's two cgroups (TDSET_TEST_LOAD, below): this script and all it starts in `run`,
# the busy loops in `load`, of equal weight.
load_cg=""
if [[ "${TDSET_TEST_LOAD:-0}" -gt 0 && -w /sys/fs/cgroup/cpu/cgroup.procs ]]; then
  load_cg="/sys/fs/cgroup/cpu/tdset-test-$$"
  if ! { mkdir -p "$load_cg/run" "$load_cg/load" && echo $$ >"$load_cg/run/cgroup.procs"; } 2>/dev/null; then
    rmdir "$load_cg/run" "$load_cg/load" "$load_cg" 2>/dev/null || true
    load_cg=""
  fi
fi
cleanup() {
  [[ ${#load_pids[@]} -eq 0 ]] || kill "${load_pids[@]}" 2>/dev/null || true
  scripts/control-plane.sh stop "$state" || true; rm -rf "$state"
  if [[ -n "$load_cg" ]]; then
    echo $$ >/sys/fs/cgroup/cpu/cgroup.procs 2>/dev/null || true
    rmdir "$load_cg/load" "$load_cg/run" "$load_cg" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
phase "tools"

# The control plane's build (cached: seconds; cold: the longest phase) runs beside the Rust
# builds below: each has stretches that leave a core idle (Go's links, cargo's serial crates).
# A cold build's progress (a line every 30 s) reaches the terminal; the rest goes to its log.
TDSET_PROGRESS_FD=4 scripts/control-plane.sh install 4>&2 >"$state/install.log" 2>&1 &
install_pid=$!

cargo fmt --all -- --check
# Lints, on every target (a run of some suites; the whole run lints in its build, below).
lint() {
  if cargo clippy --version >/dev/null 2>&1; then
    cargo clippy --all-targets --quiet -- -D warnings
  else
    echo "test.sh: clippy is not installed (rustup component add clippy); only checking the build" >&2
    cargo check --all-targets --quiet
  fi
}
# One build: the tests, and the operator's binary they launch, which the real node's image and
# the demo take too (no second, release build; the Dockerfile's `prebuilt` target takes a binary).
# The control plane, once built, started for the whole run.
control_plane_up() {
  if ! wait "$install_pid"; then
    install_pid=""
    cat "$state/install.log" >&2
    echo "test.sh: building the control plane failed (above)" >&2
    exit 1
  fi
  install_pid=""
  # A cold build's split between the module proxy and the CPUs (nothing when cached).
  grep -h "^control-plane: timing:" "$state/install.log" | sed 's/^control-plane:/test.sh: control plane/' >&2 || true
  phase "the control plane's build (what the Rust builds left of it)"
  export TDSET_TEST_KUBECONFIG
  TDSET_TEST_KUBECONFIG="$(scripts/control-plane.sh start "$state" --kcm --watch $$)"
  export TDSET_TEST_STATE_DIR="$state"
  echo "test.sh: control plane up ($TDSET_TEST_KUBECONFIG); logs in $state/logs" >&2
}
if [[ $# -gt 0 ]]; then
  lint
  control_plane_up
  scripts/control-plane.sh install-keda >/dev/null
  cargo test --locked --lib --bins --tests "$@"
  exit
fi
# The lints run in that one build: clippy-driver compiles the workspace's own crates (clippy's
# lints, then the code, as `cargo clippy` would lint them), the dependencies are compiled once,
# by rustc. (`cargo clippy` apart checks every dependency again: about 10 CPU-minutes, which on
# 2 cores the suites, themselves keeping the CPUs busy, waited for.) The benchmarks are built
# too, not run (they take minutes and write BENCHMARKS.md). A warning fails the run at its end.
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [[ ! -x "$clippy_driver" ]]; then
  echo "test.sh: clippy is not installed (rustup component add clippy); only rustc's warnings are checked" >&2
  clippy_driver=""
fi
build_rc=0
# Not incremental (unless CARGO_INCREMENTAL says otherwise): from a clean clone the crate is
# compiled whole once, and incremental's bookkeeping only adds to that.
CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" RUSTC_WORKSPACE_WRAPPER="$clippy_driver" cargo test --locked --no-run --lib --bins --tests \
  --benches --message-format=json >"$state/build.json" || build_rc=$?
# Each diagnostic once (the lib and its tests report the same), as rustc renders it.
python3 -c '
import json, sys
seen = set()
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-message" and m["message"]["rendered"] not in seen:
        seen.add(m["message"]["rendered"])
        print(m["message"]["rendered"])
' "$state/build.json" >"$state/lints.log"
if [[ "$build_rc" -ne 0 ]]; then
  cat "$state/lints.log" >&2
  echo "test.sh: the build failed (above)" >&2
  exit 1
fi
phase "the build (with the lints)"
control_plane_up
# beside_timed NAME COMMAND...: COMMAND at nice 19 once only the timed suites are left (they
# mostly wait out real seconds), its output in $state/NAME.log, its exit code and end (seconds
# after the build) in $state/NAME.rc.
build_done=$SECONDS
beside_timed() {
  local name="$1"; shift
  ( while [[ ! -e "$state/quiet" ]]; do [[ -d "$state" ]] || exit 0; sleep 1; done
    renice -n 19 -p "$BASHPID" >/dev/null
    rc=0; "$@" >"$state/$name.log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - build_done))" >"$state/$name.rc.tmp"
    mv "$state/$name.rc.tmp" "$state/$name.rc" ) &
}
# Each suite as "NAME EXECUTABLE [FILTER]": the crate's unit tests (lib, bin-NAME), a test
# binary of its own (bounded_cost), and each module of the one integration binary (`tests/it`,
# NAME with the filter `NAME::`); and the operator.
python3 - "$state/build.json" >"$state/binaries" <<'EOF'
import json, subprocess, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t, exe = m["target"], m["executable"]
    if t["kind"] == ["bin"] and t["name"] == "tdset-operator" and not m["profile"]["test"]:
        print("operator", exe)
    elif not m["profile"]["test"] or t["kind"] == ["bench"]:
        continue
    elif t["kind"] != ["test"]:
        print("lib" if "lib" in t["kind"] else "bin-" + t["name"], exe)
    elif t["name"] != "it":
        print(t["name"], exe)
    else:
        listed = subprocess.run([exe, "--list", "--format", "terse"], check=True,
                                capture_output=True, text=True).stdout
        tests = [l.rsplit(": ", 1)[0] for l in listed.splitlines() if l.endswith(": test")]
        for module in sorted({name.split("::", 1)[0] for name in tests}):
            # libtest filters by substring: a module's filter must pick its own tests only.
            picked = [name for name in tests if module + "::" in name]
            if any(not name.startswith(module + "::") for name in picked):
                sys.exit(f"test.sh: the filter {module}:: picks tests of another module")
            print(module, exe, module + "::")
EOF
operator="$(awk '$1 == "operator" {print $2}' "$state/binaries")"
[[ -x "$operator" ]] || { echo "test.sh: the build named no operator binary" >&2; exit 1; }
# KEDA's operator (for its suite only) builds beside the suites, at the lowest priority: they
# mostly wait, and it fills the idle cores (cached after the first run).
( rc=0; TDSET_PROGRESS_FD=4 TDSET_PROGRESS_SECS=120 nice -n 19 scripts/control-plane.sh install-keda \
    4>&2 >"$state/keda-install.log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || cat "$state/keda-install.log" >&2
  grep -h "^control-plane: timing:" "$state/keda-install.log" | sed 's/^control-plane:/test.sh: KEDA/' >&2 || true
  echo "$rc" >"$state/keda.rc.tmp" && mv "$state/keda.rc.tmp" "$state/keda.rc" ) &
# The README's demo, start to stop, on its own control plane; then on a real node (the
# operator as pods installed by the chart, the workloads' containers really running). Both
# beside the timed suites too: they mostly wait on their control planes, and the real node
# (which the real_node suite uses) is free by then.
export TDSET_OPERATOR_BIN="$operator"
demos() {
  TDSET_DEMO_DIR="$state/demo" scripts/demo.sh smoke || return
  if scripts/control-plane.sh node-check; then
    TDSET_DEMO_DIR="$state/demo-real-node" scripts/demo.sh smoke --real-node
  else
    echo "test.sh: skipping the real-node demo (see above)"
  fi
}
beside_timed demos demos
# TDSET_TEST_LOAD=N: N busy loops beside the suites, for as long as they run, as on a machine
# that much slower (N = the CPUs, 2 here: half as fast). A wait that passes only on a fast
# machine fails here first. Where the cgroup v1 cpu controller can be written (root, as here),
# the run and the loops are two cgroups of equal weight: the loops take half of every CPU the
# suites want, whatever the number of threads they run. (Loops at nice 0 among the suites'
# own threads took far less: `group` ran 443 s loaded against 390-428 s unloaded.) Elsewhere
# the loops run at nice 0.
if [[ "${TDSET_TEST_LOAD:-0}" -gt 0 ]]; then
  for ((i = 0; i < TDSET_TEST_LOAD; i++)); do
    # (Each ends by itself once this script is gone, however it ended.)
    ( trap - INT TERM; while kill -0 $$ 2>/dev/null; do for _ in {1..100000}; do :; done; done ) &
    load_pids+=("$!")
    [[ -z "$load_cg" ]] || echo "$!" >"$load_cg/load/cgroup.procs"
  done
  echo "test.sh: TDSET_TEST_LOAD=$TDSET_TEST_LOAD: ${#load_pids[@]} busy loops beside the suites ($([[ -n "$load_cg" ]] && echo "a cgroup of the run's weight: $load_cg" || echo "at nice 0: no cgroup cpu controller to write"))" >&2
fi
tests_rc=0
grep -v '^operator ' "$state/binaries" | TDSET_TEST_QUIET_MARK="$state/quiet" \
  TDSET_TEST_GATE_keda="$state/keda.rc" scripts/run-tests.sh "$state/tests" || tests_rc=$?
touch "$state/quiet"
[[ ${#load_pids[@]} -eq 0 ]] || { kill "${load_pids[@]}" 2>/dev/null || true; load_pids=(); }
# What a failed test leaves to understand it, outside $state (which the run deletes): its own log
# (the operator's, tests/it/support/logs.rs), its suite's output, the control plane's logs.
keep_failed() {
  local keep="${TDSET_TEST_KEEP_DIR:-${TMPDIR:-/tmp}/tdset-test-failed-$(date -u +%Y%m%dT%H%M%SZ)}" d n
  mkdir -p "$keep/suites"
  for d in "$state/tests/"*.tests; do
    [[ -d "$d" ]] || continue
    n="$(basename "$d" .tests)"
    cp -r "$d" "$keep/suites/" && cp "$state/tests/$n.log" "$keep/suites/" 2>/dev/null || true
  done
  cp -r "$state/logs" "$keep/control-plane" 2>/dev/null || true
  for d in demos.log demo/logs demo-real-node/logs; do [[ -e "$state/$d" ]] && cp -r "$state/$d" "$keep/${d//\//-}"; done
  echo "test.sh: kept what the failures left (each failed test's own log, its suite's output, the control plane's logs) in $keep" >&2
}
# Namespaces the suites left Terminating (a TDSet whose finalizer no operator ran): each is
# retried by kube-controller-manager every ~8 s, some 70 requests, for the rest of the run.
kubectl="$(scripts/control-plane.sh install 2>/dev/null | tail -1)/kubectl"
echo "test.sh: namespaces left Terminating by the suites: $("$kubectl" \
  --kubeconfig "$TDSET_TEST_KUBECONFIG" get namespaces --no-headers 2>&1 | grep -c Terminating)" >&2
wait
failed=0
rc=1 secs=?
[[ -e "$state/demos.rc" ]] && read -r rc secs <"$state/demos.rc"
echo "test.sh: the demos ended ${secs} s after the build (exit $rc)" >&2
cat "$state/demos.log" >&2 || true
if [[ "$rc" -ne 0 ]]; then echo "test.sh: the demos failed (above)" >&2; failed=1; fi
if [[ -s "$state/lints.log" ]]; then
  cat "$state/lints.log" >&2
  echo "test.sh: the build warned (above): rustc's and clippy's warnings fail the run" >&2
  failed=1
fi
# The last lines say what failed: a CI that keeps only the tail of the output (the demos'
# transcript comes after the suites) still names the failed tests.
failure_summary() {
  local log t
  for log in "$state/tests/"*.log; do
    [[ -e "$log" ]] || continue
    while read -r t; do echo "test.sh: FAILED $(basename "$log" .log): $t" >&2; done \
      < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
  done
  [[ "$tests_rc" -eq 0 ]] || echo "test.sh: the tests failed (exit $tests_rc; each failed suite's output is above)" >&2
  [[ "$failed" -eq 0 ]] || echo "test.sh: the demos or the lints failed (above)" >&2
}
[[ "$tests_rc" -eq 0 && "$failed" -eq 0 ]] || { keep_failed; failure_summary; }
[[ "$tests_rc" -eq 0 ]] || exit "$tests_rc"
[[ "$failed" -eq 0 ]] || exit 1
phase "the tests (the demos beside the timed ones)"
