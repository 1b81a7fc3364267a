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
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STATE="${TDSET_DEMO_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tdset-operator/demo}"
CP=scripts/control-plane.sh

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
  [[ -f "$STATE/operator.pid" ]] && stop >/dev/null
  rm -rf "$STATE" && mkdir -p "$STATE"
  echo "== building the control plane (cached after the first run) and the operator"
  $CP install >/dev/null
  # The same build command as the Dockerfile.
  cargo build --release --locked --bin tdset-operator
  echo "== starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1"
  export KUBECONFIG
  KUBECONFIG="$($CP start "$STATE" --kcm)"
  PATH="$($CP bin-dir):$PATH"
  kubectl apply -f crds/tdset.yaml -f crds/tdcalendar.yaml
  # `kubectl wait` fails at once while the new CRD has no conditions yet, so ask again.
  for _ in $(seq 1 60); do
    kubectl wait --for condition=Established crd/tdsets.schedule.rs crd/tdcalendars.schedule.rs --timeout=60s >/dev/null 2>&1 && break
    sleep 0.5
  done
  kubectl wait --for condition=Established crd/tdsets.schedule.rs --timeout=1s
  kubectl create namespace temp >/dev/null 2>&1 || true
  echo "== starting the operator (log: $STATE/logs/operator.log, metrics: http://127.0.0.1:18080/metrics)"
  ./target/release/tdset-operator run --kubeconfig "$KUBECONFIG" --metrics-addr 127.0.0.1:18080 \
    >"$STATE/logs/operator.log" 2>&1 &
  echo $! >"$STATE/operator.pid"
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.2; done
  curl -sf http://127.0.0.1:18080/readyz >/dev/null || { tail -20 "$STATE/logs/operator.log"; echo "operator not ready" >&2; exit 1; }
  echo "== applying the seed example, a business-hours example, and a Deployment someone else runs with a TDSet that scales it"
  kubectl apply -f examples/tdset_helloworld.yaml
  kubectl apply -n temp -f examples/business-hours.yaml
  kubectl -n temp create deployment shop-frontend --image=nginx:1.27 --replicas=2
  kubectl apply -n temp -f examples/existing-deployment.yaml
  kubectl -n temp wait --for=jsonpath='{.status.observedGeneration}'=1 tds/tdset-hello-world tds/business-hours tds/shop-frontend-hours --timeout=60s >/dev/null
  # kwok runs the pods on its fake nodes: wait until they are Ready, as on a real cluster.
  kubectl -n temp wait --for=condition=Available tds/tdset-hello-world tds/business-hours tds/shop-frontend-hours --timeout=120s >/dev/null
  sleep 1
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
  ./target/release/tdset-operator preview -f examples/business-hours.yaml -o chart --from "$from" --to "$to" --width 112
}

case "${1:-start}" in
  start)
    start
    cat <<EOT

The demo keeps running. Explore it with:
  export KUBECONFIG=$STATE/kubeconfig PATH=$($CP bin-dir):\$PATH
  kubectl get tds -A -o wide; kubectl -n temp scale deploy/tdset-hello-world --replicas=9   # reverted at once
  curl -s http://127.0.0.1:18080/metrics | grep ^tdset_
Stop it with:
  scripts/demo.sh stop
EOT
    ;;
  stop) stop ;;
  smoke)
    trap stop EXIT
    start
    export KUBECONFIG="$STATE/kubeconfig"; PATH="$($CP bin-dir):$PATH"
    want="$(./target/release/tdset-operator preview -f examples/tdset_helloworld.yaml -o json | python3 -c 'import sys,json; print(json.load(sys.stdin)["desiredReplicas"])')"
    got="$(kubectl -n temp get deploy tdset-hello-world -o jsonpath='{.spec.replicas}')"
    [[ "$got" == "$want" ]] || { echo "demo smoke: Deployment has $got replicas, preview says $want" >&2; exit 1; }
    want_ref="$(./target/release/tdset-operator preview -f examples/existing-deployment.yaml -o json | python3 -c 'import sys,json; print(json.load(sys.stdin)["desiredReplicas"])')"
    got_ref="$(kubectl -n temp get deploy shop-frontend -o jsonpath='{.spec.replicas}')"
    [[ "$got_ref" == "$want_ref" ]] || { echo "demo smoke: referenced Deployment has $got_ref replicas, preview says $want_ref" >&2; exit 1; }
    echo "demo smoke: ok ($got replicas owned, $got_ref referenced, as preview says)"
    ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
