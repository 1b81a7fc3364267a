# A real node for the local control plane (sourced by control-plane.sh): containerd + runc from
# Debian's packages, kubelet and kube-proxy built from the same Go modules as the control plane,
# pods on a bridge (Debian's CNI plugins). Where kwok's nodes only make pods look Running, this
# one starts their processes, so probes, users, file systems and signals are real.
#
# The node lives in namespaces of its own, as a kind node lives in a container:
#   - a network namespace `tdset-node-N`, joined to the host by a veth pair (host 10.99.N.1,
#     node 10.99.N.2); pods get 10.98.N.0/24 on a bridge inside it, and kube-proxy's iptables
#     rules stay inside it. The API server listens on 10.99.N.1 (only: not on the machine's
#     network) and is the `kubernetes` Service's endpoint, so in-cluster configuration works as
#     on any cluster.
#   - a PID namespace and a private mount namespace: containerd, its shims, kubelet, kube-proxy
#     and every container are in it, and every mount they make (tmpfs volumes, overlays, pod
#     network namespaces) is in it. Stopping kills the namespace's first process, which takes
#     all the others with it, and the mounts go with the last of them.
#   - cgroups under /tdset-node-N in each cgroup v1 hierarchy (kubelet's cgroupRoot), removed
#     at stop.
# Nothing is pulled (there is no registry here): the pause image, a small HTTP server image and
# a stand-in for the operator's distroless base are built from source and Debian's packages
# with buildah, and imported into the node's containerd.

NODE_DIR="$CACHE_ROOT/node-k8s-${K8S_VERSION}"
IMAGES_DIR="$CACHE_ROOT/images-v1"
BUILDAH_ROOT="$CACHE_ROOT/buildah"
NODE_NAME="real-node"
PAUSE_IMAGE="localhost/tdset/pause:1"
HTTPD_IMAGE="localhost/tdset/httpd:1"
# A workload that says what it was sent (bodies, WebSocket messages): wake on request's tests.
ECHO_IMAGE="localhost/tdset/echo:1"
# The operator's runtime base (Dockerfile). Not pullable here; the stand-in carries the same
# name so the Dockerfile builds unchanged.
DISTROLESS_IMAGE="gcr.io/distroless/cc-debian12:nonroot"
NODE_PACKAGES=(containerd runc buildah containernetworking-plugins iptables)
CNI_BIN_DIR="/usr/lib/cni"

buildah_() { buildah --root "$BUILDAH_ROOT/root" --runroot "$BUILDAH_ROOT/run" --storage-driver vfs "$@"; }

# Whether install builds the node: root and the tools (test.sh installs them first as root).
node_buildable() { [[ $(id -u) -eq 0 && -z "$(node_tools_missing)" ]]; }

node_tools_missing() {
  local t missing=()
  for t in containerd ctr runc buildah iptables gcc; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" ]] || missing+=(containernetworking-plugins)
  echo "${missing[*]}"
}

# A single-layer image from a directory tree, saved as a docker archive.
image_from_tree() {
  local tree="$1" name="$2" out="$3"; shift 3
  local c; c="$(buildah_ from scratch)"
  buildah_ copy "$c" "$tree" / >/dev/null
  buildah_ config "$@" "$c"
  buildah_ commit -q --rm "$c" "$name" >/dev/null
  buildah_ push -q "$name" "docker-archive:$out:$name"
}

# The images every real node needs: the pod sandbox (pause), a workload that really serves, and
# the distroless stand-in (glibc, libgcc, CA certificates, user nonroot 65532, from Debian).
build_images() {
  local work="$1" src; src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/images"
  mkdir -p "$work/pause" "$work/httpd" "$work/base/etc" "$work/debs"
  gcc -static -O2 -Wall -o "$work/pause/pause" "$src/pause.c"
  image_from_tree "$work/pause" "$PAUSE_IMAGE" "$work/out/pause.tar" \
    --entrypoint '["/pause"]' --user 65535:65535
  gcc -static -O2 -Wall -o "$work/httpd/httpd" "$src/httpd.c"
  image_from_tree "$work/httpd" "$HTTPD_IMAGE" "$work/out/httpd.tar" \
    --entrypoint '["/httpd"]' --user 65532:65532 --port 8080
  (cd "$work/debs" && apt-get download libc6 libgcc-s1 ca-certificates netbase tzdata)
  local d; for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/base"; done
  # ca-certificates' bundle is made by its postinst; distroless ships the bundle.
  mkdir -p "$work/base/etc/ssl/certs" "$work/base/home/nonroot" "$work/base/tmp"
  cat "$work"/base/usr/share/ca-certificates/*/*.crt >"$work/base/etc/ssl/certs/ca-certificates.crt"
  printf '%s\n' "root:x:0:0:root:/root:/sbin/nologin" "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin" \
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" >"$work/base/etc/passwd"
  printf '%s\n' "root:x:0:" "nobody:x:65534:" "nonroot:x:65532:" >"$work/base/etc/group"
  chmod 1777 "$work/base/tmp"; chown 65532:65532 "$work/base/home/nonroot"
  image_from_tree "$work/base" "$DISTROLESS_IMAGE" "$work/out/distroless-cc-debian12.tar" \
    --user 65532 --workingdir /home/nonroot --env PATH=/usr/local/bin:/usr/bin:/bin
}

# `node-check`: exit 0 when this machine can run a real node, else say why on stderr.
cmd_node_check() {
  local why=()
  [[ $(id -u) -eq 0 ]] || why+=("root (network and PID namespaces, mounts, cgroups)")
  # The node's kubelet runs cgroup v1 through cgroupfs (what this project's machines have).
  [[ -d /sys/fs/cgroup/cpu && -d /sys/fs/cgroup/memory ]] || why+=("cgroup v1 hierarchies (cgroup v2 alone is not supported yet)")
  local missing; missing="$(node_tools_missing)"
  [[ -z "$missing" ]] || why+=("$missing (Debian: apt-get install ${NODE_PACKAGES[*]})")
  [[ -x "$NODE_DIR/kubelet" && -f "$IMAGES_DIR/pause.tar" && -f "$IMAGES_DIR/echo.tar" ]] || why+=("the node's kubelet and images (scripts/control-plane.sh install)")
  [[ ${#why[@]} -eq 0 ]] || { echo "a real node needs: $(IFS=';'; echo "${why[*]}")" >&2; return 1; }
}

# The real node's images (its kubelet and kube-proxy are part of the Go build, `install_go_parts`).
install_node_images() {
  local missing; missing="$(node_tools_missing)"
  if [[ -n "$missing" || $(id -u) -ne 0 ]]; then
    log "not building the real node (needs root and $missing; Debian: apt-get install ${NODE_PACKAGES[*]})"
    return 0
  fi
  install_extra images build_images "$IMAGES_DIR" pause.tar httpd.tar distroless-cc-debian12.tar
  install_extra echo-image build_echo_image "$IMAGES_DIR" echo.tar
}

build_echo_image() {
  local work="$1" src; src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/images"
  mkdir -p "$work/echo"
  gcc -static -O2 -Wall -o "$work/echo/echo" "$src/echo.c"
  image_from_tree "$work/echo" "$ECHO_IMAGE" "$work/out/echo.tar" \
    --entrypoint '["/echo"]' --user 65532:65532 --port 8080
}

# `build-image TAG ARCHIVE [buildah bud args...]`: builds the repository's Dockerfile (or what the
# args say) with buildah, as `docker build` would, the distroless base coming from the stand-in,
# and saves it as a docker archive for `load-image`.
cmd_build_image() {
  local tag="${1:?usage: build-image TAG ARCHIVE [bud args]}" out="${2:?usage: build-image TAG ARCHIVE [bud args]}"; shift 2
  [[ -f "$IMAGES_DIR/distroless-cc-debian12.tar" ]] || die "images missing; run: scripts/control-plane.sh install"
  buildah_ inspect --type image "$DISTROLESS_IMAGE" >/dev/null 2>&1 ||
    buildah_ pull -q "docker-archive:$IMAGES_DIR/distroless-cc-debian12.tar" >/dev/null
  buildah_ bud --pull=never --layers=false -q -t "$tag" "$@" >&2
  rm -f "$out"
  buildah_ push -q "$tag" "docker-archive:$out:$tag"
  # vfs keeps a full copy per image; the archive is what the node loads.
  buildah_ rmi -f "$tag" >/dev/null 2>&1 || true
}

# `load-image DIR ARCHIVE`: imports an image into the real node's containerd (the node's pods use
# it with imagePullPolicy IfNotPresent or Never).
cmd_load_image() {
  local dir="${1:?usage: load-image DIR ARCHIVE}" archive="${2:?usage: load-image DIR ARCHIVE}"
  ctr --address "$dir/node/containerd.sock" -n k8s.io images import --no-unpack=false "$archive" >&2
}

node_index() { cat "$1/node/index"; }

# Claims the first free N by creating the namespace (atomic: two clusters starting at once
# cannot both get it), then joins it to the host with a veth pair.
node_network_up() {
  local dir="$1" i ns
  mkdir -p "$dir/node"
  for i in $(seq 1 250); do
    if ip netns add "tdset-node-$i" 2>/dev/null; then
      echo "$i" >"$dir/node/index"
      break
    fi
  done
  [[ -f "$dir/node/index" ]] || die "no free node index (tdset-node-1..250 all exist; stop old clusters or: ip netns del NAME)"
  ns="tdset-node-$i"
  ip link add "tdn$i-h" type veth peer name "tdn$i-n"
  ip link set "tdn$i-n" netns "$ns"
  ip addr add "10.99.$i.1/24" dev "tdn$i-h"
  ip link set "tdn$i-h" up
  ip route add "10.98.$i.0/24" via "10.99.$i.2"
  ip -n "$ns" link set "tdn$i-n" name eth0
  ip -n "$ns" addr add "10.99.$i.2/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "10.99.$i.1"
}

write_node_config() {
  local dir="$1" i="$2" nd="$1/node"
  mkdir -p "$nd/containerd" "$nd/cni" "$nd/kubelet" "$nd/log"
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
[grpc]
  address = "$nd/containerd.sock"
# Its default is /opt/containerd on the host.
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This VM refuses to lower oom_score_adj; the sandbox asks for -998.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$nd/cni"
EOF
  cat >"$nd/cni/10-tdset.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "tdset", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$nd/ipam",
            "ranges": [[{"subnet": "10.98.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  # kubelet and kube-proxy reach the API server across the veth, with the admin credentials.
  cp "$dir/kubeconfig" "$nd/kubeconfig"
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$nd/containerd.sock
address: 10.99.$i.2
readOnlyPort: 0
# Only the API server (with the admin client certificate) may use the kubelet's API (logs,
# exec, port-forward): pods can reach 10.99.$i.2, and anonymous requests are refused.
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $dir/pki/client-ca.crt}}
authorization: {mode: AlwaysAllow}
# What this VM allows: cgroup v1 through cgroupfs, no QoS hierarchy, swap on. Since 1.35 the
# kubelet refuses cgroup v1 unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
cgroupRoot: /tdset-node-$i
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
serializeImagePulls: false
resolvConf: /etc/resolv.conf
EOF
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $nd/kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: 10.98.$i.0/24
conntrack: {maxPerCore: 0}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
}

# What runs as the first process of the node's PID namespace. Its own /run and /var/lib hide the
# host's (shim sockets, runc state, CNI caches), /var/log is the node's log dir.
node_init() {
  local nd="$1" i="$2"
  mount -t tmpfs tmpfs /run
  mount -t tmpfs tmpfs /var/lib
  mount --bind "$nd/log" /var/log
  mkdir -p /var/lib/cni /run/containerd
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  containerd --config "$nd/containerd.toml" >"$nd/../logs/containerd.log" 2>&1 &
  local n
  for n in $(seq 1 100); do [[ -S "$nd/containerd.sock" ]] && break; sleep 0.1; done
  local img
  for img in pause httpd echo; do
    ctr --address "$nd/containerd.sock" -n k8s.io images import "$IMAGES_DIR/$img.tar" >/dev/null
  done
  "$NODE_DIR/kubelet" --config "$nd/kubelet.yaml" --kubeconfig "$nd/kubeconfig" --root-dir "$nd/kubelet" \
    --hostname-override "$NODE_NAME" --node-ip "10.99.$i.2" >"$nd/../logs/kubelet.log" 2>&1 &
  "$NODE_DIR/kube-proxy" --config "$nd/kube-proxy.yaml" >"$nd/../logs/kube-proxy.log" 2>&1 &
  wait
}

start_node() {
  local dir="$1" i; i="$(node_index "$dir")"
  local ns="tdset-node-$i"
  write_node_config "$dir" "$i"
  # The kubelet sets these host-wide (not per namespace); stop puts them back.
  sysctl -n kernel.panic_on_oops kernel.panic vm.overcommit_memory >"$dir/node/host-sysctls"
  local c; for c in /sys/fs/cgroup/*/; do
    [[ -e "$c/cgroup.procs" && "$c" != */unified/ ]] && mkdir -p "$c/tdset-node-$i"
  done
  # --kill-child: when unshare is killed, its child (the namespace's first process) gets SIGKILL,
  # and with it every process of the namespace.
  # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup mounts kubelet needs.
  setsid nsenter --net="/run/netns/$ns" unshare --pid --fork --kill-child --mount-proc --propagation private \
    bash -c "$(declare -f node_init); IMAGES_DIR='$IMAGES_DIR' NODE_DIR='$NODE_DIR' NODE_NAME='$NODE_NAME' node_init '$dir/node' '$i'" \
    >"$dir/logs/node.log" 2>&1 </dev/null &
  track "$dir" $! node
}

wait_node_ready() {
  local dir="$1" n
  for n in $(seq 1 240); do
    kill -0 "$(cat "$dir/pids/node")" 2>/dev/null || { tail -n 5 "$dir/logs/node.log" >&2; return 1; }
    if "$BIN_DIR/kubectl" --kubeconfig "$dir/kubeconfig" get node "$NODE_NAME" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -x True >/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  log "node $NODE_NAME not Ready within 120s; logs: $dir/logs/kubelet.log, containerd.log"
  return 1
}

stop_node() {
  local dir="$1" i ns n c
  [[ -f "$dir/node/index" ]] || return 0
  i="$(node_index "$dir")"; ns="tdset-node-$i"
  # unshare blocks SIGTERM; SIGKILL takes the namespace's first process, and all the others.
  [[ -f "$dir/pids/node" ]] && kill -KILL "$(cat "$dir/pids/node")" 2>/dev/null || true
  rm -f "$dir/pids/node"
  # The namespace's processes die with its first one; wait until the kernel has reaped them.
  if ip netns list | awk '{print $1}' | grep -x "$ns" >/dev/null; then
    for n in $(seq 1 100); do [[ -z "$(ip netns pids "$ns" 2>/dev/null)" ]] && break; sleep 0.1; done
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  fi
  # The link before the namespace: the index is free again only once both are gone.
  ip link del "tdn$i-h" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  for c in /sys/fs/cgroup/*/tdset-node-"$i"; do
    [[ -d "$c" ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [[ -f "$dir/node/host-sysctls" ]]; then
    local v; mapfile -t v <"$dir/node/host-sysctls"
    sysctl -qw "kernel.panic_on_oops=${v[0]}" "kernel.panic=${v[1]}" "vm.overcommit_memory=${v[2]}" || true
    rm -f "$dir/node/host-sysctls"
  fi
  rm -f "$dir/node/index"
}
