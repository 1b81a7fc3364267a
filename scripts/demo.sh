#!/usr/bin/env bash
# The operator end to end on this machine: a local control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and kwok running the pods on fake nodes), the CRD,
# the operator, and three examples: the seed's own, a
# business-hours TDSet that owns its Deployment, and one that scales a Deployment "deployed by
# Helm" through scaleTargetRef.
#
#   scripts/demo.sh          start everything and leave it running (prints how to explore/stop)
#   scripts/demo.sh stop     stop the operator and the control plane
#   scripts/demo.sh smoke    start, check the example converged, stop (used by the test command)
#   --real-node (after start or smoke): a real node instead of kwok's (containerd, kubelet,
#   kube-proxy; scripts/real-node.sh), the operator built into its image and installed by the
#   Helm chart as pods beside the workloads, whose containers really run (a small HTTP server
#   stands in for the examples' images: nothing can be pulled here).
# TDSET_OPERATOR_BIN=PATH runs (and builds the image from) a binary already built instead of
# the release build (the test command passes the one its tests were built with).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STATE="${TDSET_DEMO_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tdset-operator/demo}"
CP=scripts/control-plane.sh
REAL=0
[[ "${2:-}" == "--real-node" || "${1:-}" == "--real-node" ]] && REAL=1
WORKLOAD_IMAGE=localhost/tdset/httpd:1
BIN="${TDSET_OPERATOR_BIN:-$PWD/target/release/tdset-operator}"
# The examples as written, or with their images replaced by one the real node has.
example() { if [[ $REAL -eq 1 ]]; then sed "s#image: .*#image: $WORKLOAD_IMAGE#" "$1"; else cat "$1"; fi; }

stop() {
  if [[ -f "$STATE/operator.pid" ]]; then
    kill -TERM "$(cat "$STATE/operator.pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$STATE/operator.pid")" 2>/dev/null || break; sleep 0.1; done
    rm -f "$STATE/operator.pid"
  fi
  [[ -d "$STATE" ]] && $CP stop "$STATE"
  echo "demo stopped"
}

start() {
  # A demo still running (its operator, or a real node) is stopped before its dir is reused.
  { [[ -f "$STATE/operator.pid" ]] || [[ -d "$STATE/pids" ]]; } && stop >/dev/null
  rm -rf "$STATE" && mkdir -p "$STATE"
  echo "== building the control plane (cached after the first run) and the operator"
  $CP install >/dev/null
  # The same build command as the Dockerfile.
  [[ -n "${TDSET_OPERATOR_BIN:-}" ]] || cargo build --release --locked --bin tdset-operator
  # The plugin is the same binary, installed as kubectl-tdset.
  mkdir -p "$STATE/bin" && ln -sf "$BIN" "$STATE/bin/kubectl-tdset"
  export KUBECONFIG
  if [[ $REAL -eq 1 ]]; then
    echo "== starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a real node (containerd, kubelet, kube-proxy)"
    KUBECONFIG="$($CP start "$STATE" --real-node)"
  else
    echo "== starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1"
    KUBECONFIG="$($CP start "$STATE" --kcm)"
  fi
  PATH="$($CP bin-dir):$PATH"
  kubectl create namespace temp >/dev/null 2>&1 || true
  if [[ $REAL -eq 1 ]]; then
    echo "== building the operator's image (Dockerfile, target prebuilt) and installing the Helm chart with it"
    # The Dockerfile's prebuilt target, from a build context that holds the binary alone.
    mkdir -p "$STATE/image" && cp "$BIN" "$STATE/image/tdset-operator"
    $CP build-image localhost/tdset/operator:demo "$STATE/operator-image.tar" --target prebuilt \
      --build-arg BINARY=tdset-operator -f Dockerfile "$STATE/image" >/dev/null
    $CP load-image "$STATE" "$STATE/operator-image.tar" 2>/dev/null
    "$($CP helm-dir)/helm" install tdset-operator deploy/helm/tdset-operator -n tdset-system --create-namespace \
      --set image.repository=localhost/tdset/operator --set image.tag=demo --set image.pullPolicy=Never \
      --wait --timeout 180s >/dev/null || { install_failed; return 1; }
    kubectl -n tdset-system get pods -o wide
  else
    start_operator
  fi
  echo "== applying the seed example, a business-hours example, and a Deployment someone else runs with a TDSet that scales it"
  example examples/tdset_helloworld.yaml | kubectl apply -f -
  example examples/business-hours.yaml | kubectl apply -n temp -f -
  kubectl -n temp create deployment shop-frontend --image="$([[ $REAL -eq 1 ]] && echo $WORKLOAD_IMAGE || echo nginx:1.27)" --replicas=2
  kubectl apply -n temp -f examples/existing-deployment.yaml
  kubectl -n temp wait --for=jsonpath='{.status.observedGeneration}'=1 tds/tdset-hello-world tds/business-hours tds/shop-frontend-hours --timeout=60s >/dev/null
  # The pods become Ready (kwok's fake ones, or real containers), as on a real cluster.
  kubectl -n temp wait --for=condition=Available tds/tdset-hello-world tds/business-hours tds/shop-frontend-hours --timeout=120s >/dev/null
  sleep 1
  if [[ $REAL -eq 1 ]]; then
    echo
    echo "\$ kubectl get pods -A -o wide   (the operator's pods beside the workloads, on the real node)"
    kubectl get pods -A -o wide
  fi
  show
  dev_namespace
}

# Why the chart's pods did not become ready (a run that failed here once left nothing to read).
install_failed() {
  echo "demo: the chart's install did not become ready; what the cluster says:" >&2
  kubectl get pods -A -o wide >&2 || true
  kubectl -n tdset-system describe pods >&2 || true
  kubectl get events -A --sort-by=.lastTimestamp 2>&1 | tail -40 >&2 || true
  df -h / "$STATE" >&2 || true
}

# A whole environment with one TDSet (the group form): three workloads labelled env=dev and
# examples/sleep-dev-namespace.yaml, put to sleep now by hand whatever the time of day.
dev_namespace() {
  local image; image="$([[ $REAL -eq 1 ]] && echo $WORKLOAD_IMAGE || echo nginx:1.27)"
  echo
  echo "== a dev namespace: Deployments api (3) and web (2), a CronJob, all labelled env=dev; one TDSet for all"
  kubectl create namespace dev --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # Each pod asks for what a small service does, so the savings say what sleeping frees.
  kubectl -n dev create deployment api --image="$image" --replicas=3 --dry-run=client -o yaml | kubectl label --local -f - env=dev -o yaml |
    kubectl set resources --local -f - --requests=cpu=250m,memory=256Mi -o yaml | kubectl apply -f - >/dev/null
  kubectl -n dev create deployment web --image="$image" --replicas=2 --dry-run=client -o yaml | kubectl label --local -f - env=dev -o yaml |
    kubectl set resources --local -f - --requests=cpu=100m,memory=128Mi -o yaml | kubectl apply -f - >/dev/null
  kubectl -n dev create cronjob report --image="$image" --schedule="0 3 * * *" --dry-run=client -o yaml | kubectl label --local -f - env=dev -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f examples/calendars/ >/dev/null
  example examples/sleep-dev-namespace.yaml | kubectl apply -n dev -f - >/dev/null
  echo
  echo "\$ kubectl get deploy,cronjob -n dev   (before)"
  kubectl get deploy,cronjob -n dev
  echo
  echo "\$ kubectl tdset override dev-sleep -n dev --replicas 0 --for 10m --reason demo   (asleep now, whatever the hour)"
  "$STATE/bin/kubectl-tdset" override dev-sleep -n dev --replicas 0 --for 10m --reason demo
  kubectl -n dev wait --for=jsonpath='{.spec.replicas}'=0 deploy/api deploy/web --timeout=60s >/dev/null
  kubectl -n dev wait --for=jsonpath='{.spec.suspend}'=true cronjob/report --timeout=60s >/dev/null
  kubectl -n dev wait --for=jsonpath='{.status.savings.replicas}'=5 tds/dev-sleep --timeout=60s >/dev/null
  echo
  echo "\$ kubectl get deploy,cronjob -n dev   (after: each one's own count is recorded on it)"
  kubectl get deploy,cronjob -n dev
  kubectl -n dev get deploy api -o jsonpath='{.metadata.annotations}{"\n"}'
  echo
  echo "\$ kubectl get tds -n dev; kubectl tdset savings -A"
  kubectl get tds -n dev
  "$STATE/bin/kubectl-tdset" savings -A
  echo
  echo "\$ kubectl tdset preview dev-sleep -n dev   (the level, and each workload at the next transition)"
  "$STATE/bin/kubectl-tdset" preview dev-sleep -n dev
}

start_operator() {
  kubectl apply -f crds/tdset.yaml -f crds/tdcalendar.yaml
  # `kubectl wait` fails at once while the new CRD has no conditions yet, so ask again, for at
  # most 3 min (a bound that only stops a hang: a loaded machine's kubectl alone can take more
  # than the 1 s a last check once had, which failed a loaded run).
  local crds=(crd/tdsets.schedule.rs crd/tdcalendars.schedule.rs) deadline=$((SECONDS + 180))
  until kubectl wait --for condition=Established "${crds[@]}" --timeout=60s >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then
      kubectl wait --for condition=Established "${crds[@]}" --timeout=30s; exit 1
    fi
    sleep 0.5
  done
  echo "== starting the operator (log: $STATE/logs/operator.log, metrics: http://127.0.0.1:18080/metrics)"
  "$BIN" run --kubeconfig "$KUBECONFIG" --metrics-addr 127.0.0.1:18080 \
    >"$STATE/logs/operator.log" 2>&1 &
  echo $! >"$STATE/operator.pid"
  # (At most 2 min: its first lists, on a loaded machine.)
  for _ in $(seq 1 600); do curl -sf http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.2; done
  curl -sf http://127.0.0.1:18080/readyz >/dev/null || { tail -20 "$STATE/logs/operator.log"; echo "operator not ready" >&2; exit 1; }
}

show() {
  echo
  echo "\$ kubectl get tds,deploy -n temp"
  kubectl get tds,deploy -n temp
  echo
  echo "\$ kubectl describe tds -n temp tdset-hello-world   (status and events)"
  kubectl describe tds -n temp tdset-hello-world | sed -n '/^Status:/,$p'
  echo
  echo "\$ kubectl get tds -n temp shop-frontend-hours -o wide"
  kubectl get tds -n temp shop-frontend-hours -o wide
  echo
  echo "\$ kubectl describe tds -n temp shop-frontend-hours   (a referenced target)"
  kubectl describe tds -n temp shop-frontend-hours | sed -n '/^Status:/,$p'
  echo
  echo "\$ kubectl get deploy -n temp shop-frontend -o jsonpath=...   (who manages which fields)"
  kubectl get deploy -n temp shop-frontend -o jsonpath='{range .metadata.managedFields[*]}{.manager}{"\t"}{.operation}{"\t"}{.subresource}{"\t"}{.fieldsV1.f:spec}{"\n"}{end}' | cut -c1-110
  echo
  local from to
  from="$(date -u +%Y-%m-%dT00:00:00Z)"; to="$(date -u -d '+7 days' +%Y-%m-%dT00:00:00Z)"
  echo "\$ tdset-operator preview -f examples/business-hours.yaml -o chart --from $from --to $to"
  "$BIN" preview -f examples/business-hours.yaml -o chart --from "$from" --to "$to" --width 112
}

metrics_hint() {
  if [[ $REAL -eq 1 ]]; then
    echo "  kubectl get --raw /api/v1/namespaces/tdset-system/services/http:tdset-operator-metrics:metrics/proxy/metrics | grep ^tdset_"
    echo "  kubectl -n tdset-system logs deploy/tdset-operator; kubectl -n temp logs deploy/business-hours"
  else
    echo "  curl -s http://127.0.0.1:18080/metrics | grep ^tdset_"
  fi
}

case "${1:-start}" in
  start | --real-node)
    start
    cat <<EOT

The demo keeps running. Explore it with:
  export KUBECONFIG=$STATE/kubeconfig PATH=$STATE/bin:$($CP bin-dir):\$PATH
  kubectl get tds -A -o wide; kubectl -n temp scale deploy/tdset-hello-world --replicas=9   # reverted at once
  kubectl tdset preview dev-sleep -n dev; kubectl tdset history dev-sleep -n dev; kubectl tdset savings -A
$(metrics_hint)
Stop it with:
  scripts/demo.sh stop
EOT
    ;;
  stop) stop ;;
  smoke)
    trap stop EXIT
    start
    export KUBECONFIG="$STATE/kubeconfig"; PATH="$($CP bin-dir):$PATH"
    want="$("$BIN" preview -f examples/tdset_helloworld.yaml -o json | python3 -c 'import sys,json; print(json.load(sys.stdin)["desiredReplicas"])')"
    got="$(kubectl -n temp get deploy tdset-hello-world -o jsonpath='{.spec.replicas}')"
    [[ "$got" == "$want" ]] || { echo "demo smoke: Deployment has $got replicas, preview says $want" >&2; exit 1; }
    want_ref="$("$BIN" preview -f examples/existing-deployment.yaml -o json | python3 -c 'import sys,json; print(json.load(sys.stdin)["desiredReplicas"])')"
    got_ref="$(kubectl -n temp get deploy shop-frontend -o jsonpath='{.spec.replicas}')"
    [[ "$got_ref" == "$want_ref" ]] || { echo "demo smoke: referenced Deployment has $got_ref replicas, preview says $want_ref" >&2; exit 1; }
    asleep="$(kubectl -n dev get deploy api web -o jsonpath='{.items[*].spec.replicas}')"
    [[ "$asleep" == "0 0" ]] || { echo "demo smoke: the dev group is not asleep ($asleep)" >&2; exit 1; }
    # 3 x 250m + 2 x 100m, and 3 x 256Mi + 2 x 128Mi.
    saved="$(kubectl -n dev get tds dev-sleep -o jsonpath='{.status.savings.cpu} {.status.savings.memory}')"
    [[ "$saved" == "0.95 1Gi" ]] || { echo "demo smoke: the dev group saves '$saved', not 0.95 CPU and 1Gi" >&2; exit 1; }
    echo "demo smoke: ok ($got replicas owned, $got_ref referenced, as preview says; the dev group asleep, saving $saved)"
    ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
