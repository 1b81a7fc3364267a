#!/usr/bin/env bash
# A real local Kubernetes control plane (etcd + kube-apiserver [+ kube-controller-manager,
# kube-scheduler and kwok's simulated kubelets]) built from the published Go modules, cached
# outside the repo, run as plain processes on 127.0.0.1. No Docker, no downloads of release
# binaries.
#
#   control-plane.sh install                 build (or reuse) the cached binaries, print their dir
#   control-plane.sh start DIR [--kcm] [--watch PID]
#                                            start a control plane with its state in DIR; prints
#                                            the kubeconfig path. --kcm adds kube-controller-manager,
#                                            kube-scheduler, kwok and 3 fake nodes (pods run and
#                                            become Ready). --real-node instead adds a real node
#                                            (containerd, kubelet, kube-proxy; scripts/real-node.sh)
#                                            and no fake ones. --watch PID stops it when PID exits.
#   control-plane.sh stop DIR                stop everything started for DIR
#   control-plane.sh restart-apiserver DIR [SECONDS]
#                                            stop kube-apiserver, wait, start it again (fault tests)
#   control-plane.sh node-check              exit 0 if this machine can run a real node, else why
#   control-plane.sh build-image TAG ARCHIVE [ARGS]
#                                            `buildah bud` (docker build) with ARGS; saves the image
#   control-plane.sh load-image DIR ARCHIVE  imports an image into DIR's real node
#   control-plane.sh env DIR                 print `export KUBECONFIG=...` for a shell
#   control-plane.sh bin-dir                 print the cache dir (does not build)
#   control-plane.sh helm-dir                print the dir holding helm (does not build)
#   control-plane.sh install-keda            build KEDA's operator (cached like the rest)
#   control-plane.sh keda-dir                print the dir holding keda-operator and
#                                            keda-crds.yaml (does not build)
#   control-plane.sh install-traefik         build Traefik, an ingress controller (cached like the
#                                            rest; `install` builds it where a node can run)
#   control-plane.sh traefik-dir             print the dir holding traefik (does not build)
#   control-plane.sh monitoring-crds-dir     print the dir holding the ServiceMonitor and
#                                            PrometheusRule CRDs (does not fetch)
#   control-plane.sh istio-crds-dir          print the dir holding Istio's CRDs,
#                                            istio-crds.yaml (does not fetch)
#
# TDSET_APISERVER_PORT=N makes `start` serve on that port instead of a free one it picks.
# TDSET_KCM_QPS=N lets kube-controller-manager send N requests/s (burst 2N) instead of its
# default 20: a boundary of thousands of pods (the warm-up benchmark) is otherwise paced by it.
# TDSET_APISERVER_ARGS="--flag=value ..." adds flags to kube-apiserver (e.g. a feature gate
# turned off, to test against what an older cluster serves); split on spaces.
# -E: the ERR trap that stops a half-started cluster fires in functions too.
set -eEuo pipefail

# One Go module builds them all (`build_go`): the versions are chosen so that each uses the
# Kubernetes libraries of the control plane (v0.36), which are then compiled once.
K8S_VERSION="v1.36.3"
ETCD_VERSION="v3.6.16"
KWOK_VERSION="v0.8.0"   # the newest release on the module proxy (2026-11-22); k8s.io v0.36
HELM_VERSION="v3.21.4"  # the newest helm.sh/helm/v3 on k8s.io v0.36 (v3.22 is on v0.37)
KEDA_VERSION="v2.21.0"  # KEDA's operator, for the ScaledObject form's tests (k8s.io v0.36)
CACHE_ROOT="${TDSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tdset-operator}"
BIN_DIR="$CACHE_ROOT/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}/bin"
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl kube-scheduler)
SCHEDULER="$BIN_DIR/kube-scheduler"
KWOK_DIR="$CACHE_ROOT/kwok-${KWOK_VERSION}"
HELM_DIR="$CACHE_ROOT/helm-${HELM_VERSION}"
KEDA_DIR="$CACHE_ROOT/keda-${KEDA_VERSION}"
# Traefik, an ingress controller in front of a Service woken on request (its Ingress provider
# reads the Service's EndpointSlices). v3.7 cannot be built from the module proxy here: it
# refuses the pseudo-version of github.com/containous/go-http-auth v3.7 requires, and v3.7's
# replace points at ./pkg/config/dynamic/ext, a module of its own the module's zip leaves out.
TRAEFIK_VERSION="v3.6.12"
TRAEFIK_DIR="$CACHE_ROOT/traefik-${TRAEFIK_VERSION}"
# The ServiceMonitor and PrometheusRule CRDs, so the chart's optional objects are validated by
# the API server in the tests (from the prometheus-operator module's own CRD manifests).
PROMOP_VERSION="v0.85.0"
PROMOP_DIR="$CACHE_ROOT/prometheus-operator-${PROMOP_VERSION}"
# Istio's CRDs (its PeerAuthentication, which the operator reads before a Service sleeps behind
# the wake proxy), from the istio.io/api module's own generated manifest: nothing of Istio runs.
ISTIO_API_VERSION="v1.32.0"
ISTIO_DIR="$CACHE_ROOT/istio-api-${ISTIO_API_VERSION}"

die() { echo "control-plane: $*" >&2; exit 1; }
log() { echo "control-plane: $*" >&2; }
# What a person waiting on a first build should see: on stderr, or on the descriptor
# TDSET_PROGRESS_FD names (scripts/test.sh keeps the rest of the install's output in a log).
progress() { echo "control-plane: $*" >&"${TDSET_PROGRESS_FD:-2}"; }

# shellcheck source=scripts/real-node.sh
source "$(dirname "${BASH_SOURCE[0]}")/real-node.sh"

have_binaries() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice
  externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet
  metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller
  streaming)

# What each part of the install is made of: its Go packages, where its outputs go, and which.
# `core` is the control plane; `node` a real node's kubelet and kube-proxy (only where this
# machine can run one); `kwok` simulated kubelets; `helm` the chart's tests; `keda` KEDA's
# operator and its CRDs.
part_pkgs() {
  case "$1" in
    core) echo k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kubectl,kube-scheduler} \
      go.etcd.io/etcd/server/v3 ;;
    node) echo k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    helm) echo helm.sh/helm/v3/cmd/helm ;;
    keda) echo github.com/kedacore/keda/v2/cmd/operator ;;   # built by build_keda
    traefik) echo github.com/traefik/traefik/v3/cmd/traefik ;;   # built by build_traefik
  esac
}
part_dir() {
  case "$1" in
    core) echo "$BIN_DIR" ;; node) echo "$NODE_DIR" ;; kwok) echo "$KWOK_DIR" ;; helm) echo "$HELM_DIR" ;;
    keda) echo "$KEDA_DIR" ;; traefik) echo "$TRAEFIK_DIR" ;;
  esac
}
part_outputs() {
  case "$1" in
    core) echo "${BINARIES[*]}" ;;
    node) echo kubelet kube-proxy ;;
    kwok) echo kwok kwok-stages.yaml ;;
    helm) echo helm ;;
    keda) echo keda-operator keda-admission-webhooks keda-crds.yaml ;;
    traefik) echo traefik ;;
  esac
}
part_missing() {
  local f dir; dir="$(part_dir "$1")"
  for f in $(part_outputs "$1"); do [[ -e "$dir/$f" ]] || return 0; done
  return 1
}

k8s_ldflags() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  local ld="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ld="$ld -X $pkg.gitTreeState=clean -X $pkg.buildDate=${date}"
  done
  echo "$ld"
}

# helm's version, and the Kubernetes version it assumes without a cluster (lint, template),
# which follows its client-go as helm's own Makefile sets it.
helm_ldflags() {
  local src cg major minor ld pkg
  src="$(go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cg="$(awk '$1 == "k8s.io/client-go" {print $2}' "$src/go.mod")"   # v0.36.2
  major=$(( $(cut -d. -f1 <<<"${cg#v}") + 1 )); minor="$(cut -d. -f2 <<<"$cg")"
  ld="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  ld="$ld -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld="$ld -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  echo "$ld"
}

# The k8s.io/kubernetes module requires its staging modules at v0.0.0, which only resolve
# inside the kubernetes repo; outside it every one needs a replace to the published tag. The
# other tools' modules join it: one module graph, each shared package at one version.
k8s_module() {
  local dir="$1" name="$2" stage_ver="v0.${K8S_VERSION#v1.}" m
  mkdir -p "$dir"
  {
    echo "module tdset.local/$name"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"; echo
    for m in "${STAGING[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $stage_ver"; done
  } >"$dir/go.mod"
}

module_version() {
  case "$1" in
    k8s.io/kubernetes/*) echo "$K8S_VERSION" ;;
    go.etcd.io/etcd/*) echo "$ETCD_VERSION" ;;
    sigs.k8s.io/kwok/*) echo "$KWOK_VERSION" ;;
    helm.sh/helm/*) echo "$HELM_VERSION" ;;
  esac
}

# go_build LABEL TOTAL ARGS...: `go build -v ARGS`, its output into the build log, and one line
# of progress every TDSET_PROGRESS_SECS (30) on fd 3 (`progress`'s descriptor, which the build's
# callers open: the build's own output goes to its log): a first, cold build takes tens of minutes, and a newcomer must tell it
# from a hang. TOTAL is `go list -deps` of what is built (the standard library included: a
# fresh Go cache compiles it too); packages already in Go's cache are not compiled again.
go_build() {
  local label="$1" total="$2"; shift 2
  local out; out="$(mktemp "${TMPDIR:-/tmp}/tdset-go-build-v.XXXXXX")"
  local t0=$SECONDS every="${TDSET_PROGRESS_SECS:-30}" rc=0
  # A package path alone on a line; go's other lines (errors, "# pkg") have spaces or a '#'.
  compiled() { grep -cE '^[[:alnum:]][^ ]*$' "$out" || true; }
  ( while sleep "$every"; do
      echo "control-plane: building $label: $(compiled) of $total packages compiled, $(( (SECONDS - t0) / 60 )) min so far" >&3 2>/dev/null || true
    done ) &
  local ticker=$!
  go build -v "$@" 2>"$out" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  cat "$out" >&2
  echo "control-plane: built $label: $(compiled) packages compiled in $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s" >&3 2>/dev/null || true
  rm -f "$out"
  return "$rc"
}

# build_go WORK PKG...: every main package at once (`go build` of several into one directory):
# one module graph, each package compiled once, the links side by side. etcd's main package is
# go.etcd.io/etcd/server/v3, whose binary is `server`.
build_go() {
  local work="$1"; shift
  k8s_module "$work/src" tdset-build && cd "$work/src"
  local gets=() p
  for p in "$@"; do gets+=("$p@$(module_version "$p")"); done
  log "resolving ${gets[*]}"
  local t0=$SECONDS
  go get "${gets[@]}"
  # Every module the build needs, fetched before the build's clock starts: a cold build's time
  # depends on the module proxy's speed as much as on the CPUs, and the two are told apart.
  local total; total="$(go list -deps "$@" | wc -l)"
  log "timing: modules resolved and fetched in $((SECONDS - t0)) s"
  log "building $*"
  t0=$SECONDS
  local label="" p
  for p in "$@"; do label="$label${label:+, }${p##*/cmd/}"; done
  [[ " $* " != *" k8s.io/kubernetes/cmd/kube-apiserver "* ]] || label="the control plane ($label)"
  go_build "$label" "$total" -trimpath -ldflags "$(k8s_ldflags) $(helm_ldflags)" -o "$work/out/" "$@"
  log "timing: compiled and linked in $((SECONDS - t0)) s"
  [[ ! -e "$work/out/server" ]] || mv "$work/out/server" "$work/out/etcd"
  if [[ -e "$work/out/kwok" ]]; then kwok_module_stages >"$work/out/kwok-stages.yaml"; fi
}

# build_own_module WORK MODULE@VERSION PACKAGE OUT VERSION_VAR: a program as its releases build
# it, in its own module (its go.mod, go.sum and replaces, read-only), its version stamped into
# VERSION_VAR as they stamp it; leaves the shell in the module's copy. Not in the control
# plane's module graph: there its newer requirements would move libraries Kubernetes is built
# with.
build_own_module() {
  local work="$1" module="$2" pkg="$3" out="$4" version_var="$5" src version="${2##*@v}"
  src="$(go mod download -json "$module" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cp -r "$src" "$work/$out-src" && chmod -R u+w "$work/$out-src" && cd "$work/$out-src"
  local t0=$SECONDS
  local total; total="$(GOFLAGS=-mod=readonly go list -deps "$pkg" | wc -l)"
  log "timing: modules of $module fetched in $((SECONDS - t0)) s"
  log "building $module"
  t0=$SECONDS
  GOFLAGS=-mod=readonly go_build "$out" "$total" -trimpath -ldflags "-s -w -X $version_var=$version" \
    -o "$work/out/$out" "$pkg"
  log "timing: $out compiled and linked in $((SECONDS - t0)) s"
}

# build_keda WORK: KEDA's operator and its admission webhooks (which its chart installs beside
# it: they refuse a ScaledObject KEDA could not run, an update too), and its CRDs from the same
# module (its operator watches every one of them). Its version is set as its releases set it:
# it labels the HPAs it makes.
build_keda() {
  local f t0
  build_own_module "$1" "github.com/kedacore/keda/v2@${KEDA_VERSION}" ./cmd/operator \
    keda-operator github.com/kedacore/keda/v2/version.Version
  t0=$SECONDS
  GOFLAGS=-mod=readonly go build -trimpath \
    -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}" \
    -o "$1/out/keda-admission-webhooks" ./cmd/webhooks
  log "timing: keda-admission-webhooks compiled and linked in $((SECONDS - t0)) s"
  for f in config/crd/bases/*.yaml; do echo "---"; cat "$f"; done >"$1/out/keda-crds.yaml"
}

# build_traefik WORK: Traefik, an ingress controller.
build_traefik() {
  build_own_module "$1" "github.com/traefik/traefik/v3@${TRAEFIK_VERSION}" ./cmd/traefik \
    traefik github.com/traefik/traefik/v3/pkg/version.Version
}

# kwok simulates kubelets: pods bound to its nodes go Running and Ready. What happens to a
# node or a pod, and when, comes from the module's own "fast" stage files.
kwok_module_stages() {
  local src f
  src="$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    cat "$src/kustomize/stage/$f"; echo "---"
  done
}

fetch_monitoring_crds() {
  local work="$1" src f
  src="$(go mod download -json "github.com/prometheus-operator/prometheus-operator@${PROMOP_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  for f in servicemonitors prometheusrules; do
    cp "$src/example/prometheus-operator-crd/monitoring.coreos.com_$f.yaml" "$work/out/"
  done
}

fetch_istio_crds() {
  local work="$1" src
  src="$(go mod download -json "istio.io/api@${ISTIO_API_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cp "$src/kubernetes/customresourcedefinitions.gen.yaml" "$work/out/istio-crds.yaml"
}

# Builds an optional component into DEST unless all its outputs are there.
install_extra() {
  local name="$1" fn="$2" dest="$3"; shift 3
  local f missing=0
  for f in "$@"; do [[ -e "$dest/$f" ]] || missing=1; done
  [[ $missing -eq 1 ]] || return 0
  local work; work="$(mktemp -d "${TMPDIR:-/tmp}/tdset-$name-build.XXXXXX")"
  local buildlog="$CACHE_ROOT/build-$name.log"
  mkdir -p "$work/out" "$dest"
  log "building $name into $dest (log: $buildlog)"
  # Not in a condition: there bash ignores `set -e`, and a failed step would go unnoticed.
  local rc=0
  (
    set -e
    export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
    "$fn" "$work"
  ) 3>&"${TDSET_PROGRESS_FD:-2}" >"$buildlog" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 15 "$buildlog" >&2
    rm -rf "$work"
    die "building $name failed; full log: $buildlog"
  fi
  for f in "$@"; do mv "$work/out/$f" "$dest/$f.tmp" && mv "$dest/$f.tmp" "$dest/$f"; done
  rm -rf "$work"
}

# Waits for each background job "PID NAME"; dies naming every one that failed.
wait_jobs() {
  local failed=() pid name
  while [[ $# -gt 0 ]]; do
    pid="$1" name="$2"; shift 2
    wait "$pid" || failed+=("$name")
  done
  [[ ${#failed[@]} -eq 0 ]] || die "building ${failed[*]} failed (above)"
}

# The Go parts missing from the cache, built together (`build_go`), then each part's outputs
# moved into its directory, last, so a half-finished build never looks like a cache hit.
install_go_parts() {
  local parts=() pkgs=() part
  for part in "$@"; do
    [[ $part != node ]] || node_buildable || continue
    part_missing "$part" || continue
    parts+=("$part")
    # shellcheck disable=SC2207  # package paths have no spaces
    [[ $part == keda || $part == traefik ]] || pkgs+=($(part_pkgs "$part"))
  done
  [[ ${#parts[@]} -gt 0 ]] || return 0
  local work; work="$(mktemp -d "${TMPDIR:-/tmp}/tdset-go-build.XXXXXX")"
  local joined; joined="$(IFS=-; echo "${parts[*]}")"
  local buildlog="$CACHE_ROOT/build-${joined}-${K8S_VERSION}.log"
  mkdir -p "$CACHE_ROOT" "$work/out"
  log "building ${parts[*]} (Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}, kwok ${KWOK_VERSION}, helm ${HELM_VERSION}, KEDA ${KEDA_VERSION}; log: $buildlog)"
  progress "building ${parts[*]}: a first run builds these from their Go modules once (on a 2-core machine 15 to 33 min; progress every ${TDSET_PROGRESS_SECS:-30} s); later runs reuse the cache in $CACHE_ROOT"
  local rc=0
  (
    set -e
    export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
    # (`if`, not `||`: set -e does not reach into a function run on the left of `||`.)
    if [[ ${#pkgs[@]} -gt 0 ]]; then build_go "$work" "${pkgs[@]}"; fi
    if [[ " ${parts[*]} " == *" keda "* ]]; then build_keda "$work"; fi
    if [[ " ${parts[*]} " == *" traefik "* ]]; then build_traefik "$work"; fi
  ) 3>&"${TDSET_PROGRESS_FD:-2}" >"$buildlog" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 15 "$buildlog" >&2
    rm -rf "$work"
    die "building ${parts[*]} failed; full log: $buildlog"
  fi
  grep -h "^control-plane: timing:" "$buildlog" >&2 || true
  local dir f
  for part in "${parts[@]}"; do
    dir="$(part_dir "$part")"; mkdir -p "$dir"
    for f in $(part_outputs "$part"); do
      mv "$work/out/$f" "$dir/$f.tmp" && mv "$dir/$f.tmp" "$dir/$f" || die "building ${parts[*]} made no $f; log: $buildlog"
    done
  done
  rm -rf "$work"
}

# Whether anything install makes is missing (all of it comes through Go's module proxy).
need_go() {
  local part
  for part in core kwok helm node traefik; do
    [[ $part != node && $part != traefik ]] || node_buildable || continue
    part_missing "$part" && return 0
  done
  [[ -e "$PROMOP_DIR/monitoring.coreos.com_prometheusrules.yaml" ]] || return 0
  return 1
}

# KEDA's operator and CRDs, for the ScaledObject form's suite only: apart from `install`, so
# `scripts/test.sh` can build it at low priority beside the suites that do not need it.
cmd_install_keda() {
  if part_missing keda && ! command -v go >/dev/null; then
    die "no Go toolchain on PATH; install Go >= 1.26 (https://go.dev/dl) and retry"
  fi
  install_go_parts keda
  echo "$KEDA_DIR"
}

# Traefik alone (`install` builds it too where a real node can run).
cmd_install_traefik() {
  if part_missing traefik && ! command -v go >/dev/null; then
    die "no Go toolchain on PATH; install Go >= 1.26 (https://go.dev/dl) and retry"
  fi
  install_go_parts traefik
  echo "$TRAEFIK_DIR"
}

cmd_install() {
  if need_go && ! command -v go >/dev/null; then
    die "no Go toolchain on PATH; install Go >= 1.26 (https://go.dev/dl) and retry"
  fi
  command -v openssl >/dev/null || die "openssl is missing; install it (apt-get install -y openssl) and retry"
  # Beside the Go build, what shares nothing with it (downloads, the real node's images): each
  # leaves a core idle at times (downloads, links), which the other fills.
  local jobs=()
  install_extra monitoring-crds fetch_monitoring_crds "$PROMOP_DIR" \
    monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml &
  jobs+=("$!" monitoring-crds)
  install_extra istio-crds fetch_istio_crds "$ISTIO_DIR" istio-crds.yaml &
  jobs+=("$!" istio-crds)
  install_node_images &
  jobs+=("$!" node-images)
  install_go_parts core node kwok helm &
  jobs+=("$!" "the Go build")
  # Traefik, where a real node can run (the ingress controller in front of its woken
  # Services): a build of its own module beside the control plane's, whose links it fills.
  if node_buildable; then
    install_go_parts traefik &
    jobs+=("$!" Traefik)
  fi
  wait_jobs "${jobs[@]}"
  have_binaries || die "the control plane's binaries are still missing from $BIN_DIR"
  echo "$BIN_DIR"
}

port_free() {
  python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.close()' "$1" 2>/dev/null
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

gen_certs() {
  local d="$1/pki" san="${2:-}"
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=tdset-local-serving-ca" \
      -keyout serving-ca.key -out serving-ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
    printf 'subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.0.0.1%s\nextendedKeyUsage=serverAuth\n' "$san" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA serving-ca.crt -CAkey serving-ca.key -CAcreateserial \
      -days 3650 -extfile apiserver.ext -out apiserver.crt
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=tdset-local-client-ca" \
      -keyout client-ca.key -out client-ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=admin" -keyout admin.key -out admin.csr
    printf 'extendedKeyUsage=clientAuth\n' >admin.ext
    openssl x509 -req -in admin.csr -CA client-ca.crt -CAkey client-ca.key -CAcreateserial \
      -days 3650 -extfile admin.ext -out admin.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >"$1/logs/pki.log" 2>&1 || die "generating certificates failed; log: $1/logs/pki.log"
}

# Where the API server listens: 127.0.0.1, or with a real node the host's end of its veth
# (10.99.N.1), which pods reach too.
api_host() { cat "$1/apiserver.host" 2>/dev/null || echo 127.0.0.1; }

write_kubeconfig() {
  local dir="$1" port="$2"
  local b64="base64 -w0"
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tdset-local
  cluster:
    server: https://$(api_host "$dir"):${port}
    certificate-authority-data: $($b64 <"$dir/pki/serving-ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $($b64 <"$dir/pki/admin.crt")
    client-key-data: $($b64 <"$dir/pki/admin.key")
contexts:
- name: tdset-local
  context: {cluster: tdset-local, user: admin}
current-context: tdset-local
EOF
}

# Record a pid we own so `stop` can find it, even after this shell is gone.
track() { echo "$2" >"$1/pids/$3"; }

wait_ready() {
  local dir="$1" what="$2" url="$3" logf="$4" pidf="$5" i
  for i in $(seq 1 240); do
    if ! kill -0 "$(cat "$pidf")" 2>/dev/null; then
      tail -n 5 "$logf" >&2 || true
      return 1
    fi
    if curl -sf -o /dev/null --cacert "$dir/pki/serving-ca.crt" --cert "$dir/pki/admin.crt" \
      --key "$dir/pki/admin.key" "$url"; then
      return 0
    fi
    sleep 0.5
  done
  log "$what did not become ready within 120s"
  return 1
}

start_etcd() {
  local dir="$1" cport pport
  cport="$(cat "$dir/etcd.port")"; pport="$(free_port)"
  # 8 GiB backend quota (etcd's largest recommended; the default is 2 GiB): the fleet
  # benchmark's 100 000 TDSets, Deployments and Events with their revisions outgrow 2 GiB.
  setsid "$BIN_DIR/etcd" --name tdset-local --data-dir "$dir/etcd-data" --unsafe-no-fsync \
    --quota-backend-bytes 8589934592 \
    --listen-client-urls "http://127.0.0.1:${cport}" --advertise-client-urls "http://127.0.0.1:${cport}" \
    --listen-peer-urls "http://127.0.0.1:${pport}" --initial-advertise-peer-urls "http://127.0.0.1:${pport}" \
    --initial-cluster "tdset-local=http://127.0.0.1:${pport}" --listen-metrics-urls "" \
    >"$dir/logs/etcd.log" 2>&1 </dev/null &
  track "$dir" $! etcd
}

start_apiserver() {
  local dir="$1" port eport
  port="$(cat "$dir/apiserver.port")"; eport="$(cat "$dir/etcd.port")"
  setsid "$BIN_DIR/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:${eport}" \
    --bind-address "$(api_host "$dir")" --advertise-address "$(api_host "$dir")" --secure-port "$port" \
    --cert-dir "$dir/pki" --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/client-ca.crt" \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --authorization-mode RBAC --service-cluster-ip-range 10.0.0.0/24 \
    --endpoint-reconciler-type none --allow-privileged=true \
    ${TDSET_APISERVER_ARGS:-} $(cat "$dir/apiserver.node-args" 2>/dev/null || true) \
    >"$dir/logs/kube-apiserver.log" 2>&1 </dev/null &
  track "$dir" $! kube-apiserver
}

start_kcm() {
  local dir="$1" controllers="garbage-collector-controller,deployment-controller,replicaset-controller,statefulset-controller,namespace-controller,serviceaccount-controller,horizontal-pod-autoscaler-controller,clusterrole-aggregation-controller,node-lifecycle-controller"
  # Pods that really run need their service account's CA (kube-root-ca.crt) and Services
  # their endpoints. (Not on kwok's cluster: the EndpointSlice controller would follow every
  # pod of every test for one test's sake, and the one clean-clone run with it on failed two
  # timing tests; tests/it/wake_slices.rs writes a Service's own slice as it would.)
  [[ -f "$dir/node/index" ]] &&
    controllers="$controllers,root-ca-certificate-publisher-controller,endpoints-controller,endpointslice-controller"
  setsid "$BIN_DIR/kube-controller-manager" --kubeconfig "$dir/kubeconfig" \
    --controllers "$controllers" \
    --horizontal-pod-autoscaler-sync-period 2s \
    --leader-elect=false --secure-port 0 --root-ca-file "$dir/pki/serving-ca.crt" \
    --service-account-private-key-file "$dir/pki/sa.key" --use-service-account-credentials=false \
    --concurrent-gc-syncs 5 \
    ${TDSET_KCM_QPS:+--kube-api-qps "$TDSET_KCM_QPS" --kube-api-burst "$((2 * TDSET_KCM_QPS))"} \
    >"$dir/logs/kube-controller-manager.log" 2>&1 </dev/null &
  track "$dir" $! kube-controller-manager
}

start_scheduler() {
  local dir="$1"
  setsid "$SCHEDULER" --kubeconfig "$dir/kubeconfig" --leader-elect=false --secure-port 0 \
    >"$dir/logs/kube-scheduler.log" 2>&1 </dev/null &
  track "$dir" $! kube-scheduler
}

# kwok's fast stages, with one change: a pod annotated `pod-ready.stage.kwok.x-k8s.io/delay`
# (a duration, "15s") becomes Running and Ready that long after it is bound, as a pod with a
# slow start-up or readiness probe does (the warm-up tests and benchmark). Without it, at once.
# Derived at start, not at build, so the cached build stays valid.
kwok_stages() {
  local dir="$1"
  python3 - "$KWOK_DIR/kwok-stages.yaml" >"$dir/kwok-stages.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
delay = ("  delay:\n    durationMilliseconds: 0\n    durationFrom:\n      expressionFrom: "
         "'.metadata.annotations[\"pod-ready.stage.kwok.x-k8s.io/delay\"]'\n  next:\n")
for i, d in enumerate(docs):
    if "name: pod-ready\n" in d and "  delay:" not in d:
        docs[i] = d.replace("\n  next:\n", "\n" + delay, 1)
print("\n---\n".join(docs), end="")
PY
}

start_kwok() {
  local dir="$1"
  kwok_stages "$dir"
  setsid "$KWOK_DIR/kwok" --kubeconfig "$dir/kubeconfig" --config "$dir/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --server-address 127.0.0.1:0 \
    >"$dir/logs/kwok.log" 2>&1 </dev/null &
  track "$dir" $! kwok
}

# Three fake nodes with room for the tests and the demo (1000 pods each).
create_nodes() {
  local dir="$1" i
  for i in 0 1 2; do
    printf '%s\n' "apiVersion: v1" "kind: Node" "metadata:" "  name: kwok-node-$i" \
      "  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: \"0\"}" \
      "  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}" \
      "status:" "  allocatable: {cpu: \"1000\", memory: 1000Gi, pods: \"1000\"}" \
      "  capacity: {cpu: \"1000\", memory: 1000Gi, pods: \"1000\"}" "---"
  done >"$dir/nodes.yaml"
  "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" apply -f "$dir/nodes.yaml" >"$dir/logs/nodes.log" 2>&1
}

kill_pidfile() {
  local f="$1" pid i
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  # The watchdog's bash execs `stop` as its last command, so that pid may be our own.
  if [[ "$pid" != "$$" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

cmd_stop() {
  local dir="${1:?usage: control-plane.sh stop DIR}" p
  [[ -d "$dir/pids" ]] || return 0
  # Reverse start order: clients first, etcd last.
  kill_pidfile "$dir/pids/watchdog"
  stop_node "$dir"
  for p in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do kill_pidfile "$dir/pids/$p"; done
}

cmd_start() {
  local dir="${1:?usage: control-plane.sh start DIR [--kcm|--real-node] [--watch PID]}"; shift
  local kcm=0 watch="" real=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --kcm) kcm=1 ;;
      --real-node) kcm=1; real=1 ;;
      --watch) watch="${2:?--watch needs a pid}"; shift ;;
      *) die "unknown option $1" ;;
    esac
    shift
  done
  local port="${TDSET_APISERVER_PORT:-}"
  if [[ -n "$port" ]]; then
    [[ "$port" =~ ^[0-9]+$ && "$port" -ge 1 && "$port" -le 65535 ]] ||
      die "TDSET_APISERVER_PORT=$port is not a port number (1-65535)"
    port_free "$port" ||
      die "port $port (TDSET_APISERVER_PORT) is already in use on 127.0.0.1; free it or choose another"
  fi
  have_binaries || die "control-plane binaries missing in $BIN_DIR; run: scripts/control-plane.sh install"
  mkdir -p "$dir/logs" "$dir/pids"
  # The kubeconfig and keys in it are the cluster's admin (and with a real node, the node's).
  chmod 700 "$dir"
  dir="$(cd "$dir" && pwd)"
  rm -f "$dir/apiserver.host" "$dir/apiserver.node-args"
  # Any failure from here on (`die` included) must not leave half a control plane running.
  trap 'cmd_stop "$dir"' ERR EXIT
  local san=""
  if [[ $real -eq 1 ]]; then
    [[ -x "$NODE_DIR/kubelet" && -f "$IMAGES_DIR/pause.tar" ]] ||
      die "the real node's binaries or images are missing; run: scripts/control-plane.sh install"
    [[ -z "$(node_tools_missing)" ]] ||
      die "a real node needs $(node_tools_missing) (Debian: apt-get install ${NODE_PACKAGES[*]})"
    node_network_up "$dir"
    local i; i="$(node_index "$dir")"
    san=",IP:10.99.$i.1"
    echo "10.99.$i.1" >"$dir/apiserver.host"
    # The API server is the `kubernetes` Service's endpoint; it reaches the kubelet by its IP.
    echo "--endpoint-reconciler-type lease --kubelet-preferred-address-types InternalIP --kubelet-client-certificate $dir/pki/admin.crt --kubelet-client-key $dir/pki/admin.key" >"$dir/apiserver.node-args"
  fi
  gen_certs "$dir" "$san"
  free_port >"$dir/etcd.port"
  [[ -n "$port" ]] || port="$(free_port)"
  echo "$port" >"$dir/apiserver.port"
  start_etcd "$dir"
  write_kubeconfig "$dir" "$port"
  start_apiserver "$dir"
  wait_ready "$dir" kube-apiserver "https://$(api_host "$dir"):${port}/readyz" "$dir/logs/kube-apiserver.log" "$dir/pids/kube-apiserver" ||
    { cmd_stop "$dir"
      if grep -q "address already in use" "$dir/logs/kube-apiserver.log" 2>/dev/null; then
        die "port ${port} was taken by another process before kube-apiserver could bind it; run start again"
      fi
      die "kube-apiserver failed to start; log: $dir/logs/kube-apiserver.log, $dir/logs/etcd.log"; }
  if [[ $kcm -eq 1 ]]; then
    [[ -x "$SCHEDULER" && -x "$KWOK_DIR/kwok" ]] ||
      { cmd_stop "$dir"; die "kube-scheduler or kwok missing; run: scripts/control-plane.sh install"; }
    start_kcm "$dir"
    start_scheduler "$dir"
    # A real node's cluster has no simulated nodes: every pod really runs.
    [[ $real -eq 1 ]] || start_kwok "$dir"
    sleep 0.5
    local c
    for c in kube-controller-manager kube-scheduler kwok; do
      [[ -f "$dir/pids/$c" ]] || continue
      kill -0 "$(cat "$dir/pids/$c")" 2>/dev/null ||
        { cmd_stop "$dir"; die "$c exited at start; log: $dir/logs/$c.log"; }
    done
    if [[ $real -eq 1 ]]; then
      start_node "$dir"
      wait_node_ready "$dir" || { cmd_stop "$dir"; die "the real node did not start; logs: $dir/logs/node.log, kubelet.log, containerd.log"; }
    else
      create_nodes "$dir" || { cmd_stop "$dir"; die "creating the fake nodes failed; log: $dir/logs/nodes.log"; }
    fi
  fi
  if [[ -n "$watch" ]]; then
    # Stops the control plane when the process that asked for it is gone, however it ended.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3"' _ \
      "$watch" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")" "$dir" \
      >/dev/null 2>&1 </dev/null &
    track "$dir" $! watchdog
  fi
  trap - ERR EXIT
  echo "$dir/kubeconfig"
}

cmd_restart_apiserver() {
  local dir="${1:?usage: control-plane.sh restart-apiserver DIR [SECONDS]}" down="${2:-5}"
  kill_pidfile "$dir/pids/kube-apiserver"
  sleep "$down"
  start_apiserver "$dir"
  wait_ready "$dir" kube-apiserver "https://$(api_host "$dir"):$(cat "$dir/apiserver.port")/readyz" \
    "$dir/logs/kube-apiserver.log" "$dir/pids/kube-apiserver" ||
    die "kube-apiserver did not come back; log: $dir/logs/kube-apiserver.log"
}

case "${1:-}" in
  install) cmd_install ;;
  install-keda) cmd_install_keda ;;
  install-traefik) cmd_install_traefik ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  restart-apiserver) shift; cmd_restart_apiserver "$@" ;;
  node-check) cmd_node_check ;;
  build-image) shift; cmd_build_image "$@" ;;
  load-image) shift; cmd_load_image "$@" ;;
  env) echo "export KUBECONFIG=${2:?usage: control-plane.sh env DIR}/kubeconfig; export PATH=$BIN_DIR:\$PATH" ;;
  bin-dir) echo "$BIN_DIR" ;;
  helm-dir) echo "$HELM_DIR" ;;
  keda-dir) echo "$KEDA_DIR" ;;
  traefik-dir) echo "$TRAEFIK_DIR" ;;
  monitoring-crds-dir) echo "$PROMOP_DIR" ;;
  istio-crds-dir) echo "$ISTIO_DIR" ;;
  *) sed -n '2,33p' "$0" >&2; exit 2 ;;
esac
