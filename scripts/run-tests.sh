#!/usr/bin/env bash
# Runs the built test binaries side by side against the one control plane of scripts/test.sh.
#
#   run-tests.sh LOGDIR < LIST      LIST: one "NAME EXECUTABLE [FILTER]" line per suite (a test
#                                   binary, or the tests of one binary that FILTER picks)
#
# Most of a test's time is spent waiting on the API server, on controllers or on a schedule's
# boundary, not on the CPU: run one binary after the other (cargo test's way) and the suite
# waits its waits one by one. Here TDSET_TEST_JOBS binaries run at once (default 3; at 2 the
# CPUs were 72% busy once the tests' namespaces no longer stayed Terminating; before that, 3
# overloaded the API server and setups ran out of their waits), each
# with TDSET_TEST_THREADS tests at once (default 2; every test has its own namespace), the
# slowest first so that the last to finish is a short one. On 2 cores the suites used about a
# third of the CPU at 2 x 2 (a clean clone: 16 CPU-minutes in 26 minutes of tests); 4 x 4
# overloaded it (load 6-9) and tests that time a transition in real seconds failed. Each
# binary's output goes to LOGDIR/NAME.log and is
# printed whole when it fails, and its tests' own logs to LOGDIR/NAME.tests (kept only for the
# tests that failed); a table of the binaries' times ends the run. Exits 1 if any
# binary failed.
set -uo pipefail

logs="${1:?usage: run-tests.sh LOGDIR < LIST}"
jobs="${TDSET_TEST_JOBS:-3}"
threads="${TDSET_TEST_THREADS:-2}"
mkdir -p "$logs"

# The slowest binaries first (measured: docs/development.md, "Development notes"); the rest in any order.
slow=(group real_node group_holders group_memory group_release faults hardening history helm shards calendars
  hpa_ceilings workloads group_kinds
  reconcile prometheus)
# Tests that time a scale-up's readiness against its transition in real seconds (warmUp, tiers
# of `order`): run last, on a machine no other suite loads, TDSET_TEST_QUIET_JOBS at once
# (default 1: three at once made warm_up's group ready 1.4 s after its transition, and two at
# once failed group_order's tiers in one clean-clone run of three). Beside the group's memory
# tests (which have the API server encode hundreds of MB) their wake-ups came minutes late.
quiet=(group_order boundary_order warm_up)
# Suites that need what is built beside the suites (KEDA's operator, at low priority): run
# after the others, each once TDSET_TEST_GATE_<name> (a file with that build's exit code)
# exists; one whose build is still running when the others are done runs after the timed
# suites instead (a cold run: the build goes on beside them rather than holding them back).
# Without the variable a suite does not wait.
gated=(keda)
declare -A exe_of filter_of
while read -r n exe filter; do exe_of[$n]="$exe"; filter_of[$n]="$filter"; done
ordered=()
for n in "${slow[@]}"; do [[ -n "${exe_of[$n]:-}" ]] && ordered+=("$n"); done
for n in "${!exe_of[@]}"; do
  [[ " ${slow[*]} ${quiet[*]} ${gated[*]} " == *" $n "* ]] || ordered+=("$n")
done
last=()
for n in "${quiet[@]}"; do [[ -n "${exe_of[$n]:-}" ]] && last+=("$n"); done
for n in "${gated[@]}"; do [[ -n "${exe_of[$n]:-}" ]] && ordered+=("$n"); done

declare -A started name
failed=()
results=()
finish() {
  local pid="$1" rc="$2" n="${name[$1]}" secs
  secs=$(( $(date +%s) - started[$1] ))
  local summary
  summary="$(grep -E '^test result:' "$logs/$n.log" | tail -1)"
  if [[ "$rc" -eq 0 ]]; then
    echo "run-tests: ok     $n (${secs}s) ${summary#test result: }"
    rm -rf "$logs/$n.tests"
  else
    keep_failed_logs "$n"
    echo "run-tests: FAILED $n (${secs}s, exit $rc); its output:"
    sed 's/^/    /' "$logs/$n.log"
    failed+=("$n")
  fi
  results+=("$secs $n")
}

# A failed suite's per-test logs (LOGDIR/NAME.tests, TDSET_TEST_LOG_DIR: the in-process
# operator's log and those of the processes a test started, tests/it/support/logs.rs): those of
# its tests that passed are deleted, the rest kept for scripts/test.sh to keep.
keep_failed_logs() {
  local n="$1" t
  [[ -d "$logs/$n.tests" ]] || return 0
  while read -r t; do
    rm -f "$logs/$n.tests/${t//::/.}.log" "$logs/$n.tests/${t//::/.}".*.log
  done < <(sed -n 's/^test \([^ ]*\) \.\.\. ok$/\1/p' "$logs/$n.log")
}

running=()
# Waits for one running binary to end, and reports it.
reap() {
  local done_pid rc p rest=()
  wait -n -p done_pid "${running[@]}"; rc=$?
  finish "$done_pid" "$rc"
  for p in "${running[@]}"; do [[ "$p" == "$done_pid" ]] || rest+=("$p"); done
  running=("${rest[@]}")
}
# The file whose presence opens suite $1's gate (TDSET_TEST_GATE_<name>), or nothing.
gate_file() {
  # (A suite's name may hold characters a variable's may not: bin-tdset-operator.)
  local var="TDSET_TEST_GATE_${1//[^A-Za-z0-9_]/_}"
  echo "${!var:-}"
}
# Whether suite $1 may start: what it waits for was built. Waits.
gate_open() {
  local file rc
  file="$(gate_file "$1")"
  [[ -n "$file" ]] || return 0
  while [[ ! -e "$file" ]]; do sleep 1; done
  read -r rc <"$file"
  [[ "$rc" == 0 ]]
}

# Runs the binaries named, `at_once` at a time.
run_all() {
  local at_once="$1" n; shift
  for n in "$@"; do
    while [[ ${#running[@]} -ge $at_once ]]; do reap; done
    local gate; gate="$(gate_file "$n")"
    if [[ "$defer" == 1 && -n "$gate" && ! -e "$gate" ]]; then later+=("$n"); continue; fi
    if ! gate_open "$n"; then
      echo "run-tests: FAILED $n: what it needs was not built (see the log beside its gate file)"
      failed+=("$n")
      continue
    fi
    # shellcheck disable=SC2086 # an empty filter is no argument
    TDSET_TEST_LOG_DIR="$logs/$n.tests" "${exe_of[$n]}" ${filter_of[$n]} --test-threads "$threads" >"$logs/$n.log" 2>&1 &
    started[$!]=$(date +%s); name[$!]="$n"; running+=($!)
  done
  while [[ ${#running[@]} -gt 0 ]]; do reap; done
}
later=()
defer=1
run_all "$jobs" "${ordered[@]}"
defer=0
# TDSET_TEST_QUIET_MARK: a file made when only the timed suites are left (test.sh runs its
# lints and the demos beside them, at the lowest priority).
if [[ -n "${TDSET_TEST_QUIET_MARK:-}" ]]; then touch "$TDSET_TEST_QUIET_MARK"; fi
run_all "${TDSET_TEST_QUIET_JOBS:-1}" "${last[@]}"
if [[ ${#later[@]} -gt 0 ]]; then
  echo "run-tests: ${later[*]}: waiting for what they need to be built"
  run_all "$jobs" "${later[@]}"
fi

# Every suite listed ran (or failed): one left out by a fault of this script fails the run.
# (Not `printf | grep -q` under pipefail: grep leaving at its first match can kill printf with
# SIGPIPE, and a suite that ran was once reported as never run.)
declare -A ran
for r in "${results[@]}"; do ran[${r#* }]=1; done
for n in "${failed[@]}"; do ran[$n]=1; done
for n in "${!exe_of[@]}"; do
  if [[ -z "${ran[$n]:-}" ]]; then
    echo "run-tests: FAILED $n: it never ran"
    failed+=("$n")
  fi
done

echo "run-tests: the binaries' wall times (s), $jobs at once with $threads threads each:"
printf '%s\n' "${results[@]}" | sort -rn | head -15 | sed 's/^/    /'
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run-tests: failed: ${failed[*]}" >&2
  exit 1
fi
