# Shared by the benchmark scripts of hack/bench (sourced after `cd` to the repository root).

# delete_run SELECTOR NAMESPACE: deletes a run's configs, servers, CRDs and namespace. Call it
# after the operator is stopped: the configs' and servers' finalizers are the operator's, so
# they are dropped here.
delete_run() {
  local sel=$1 ns=$2 k o
  kubectl delete crdconversionconfigs -l "$sel" --wait=false >/dev/null 2>&1 || true
  kubectl delete conversionwebhookservers -l "$sel" --wait=false >/dev/null 2>&1 || true
  for k in crdconversionconfigs conversionwebhookservers; do
    for o in $(kubectl get "$k" -l "$sel" -o name 2>/dev/null); do
      kubectl patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
  done
  kubectl delete crd -l "$sel" --wait=false >/dev/null 2>&1 || true
  kubectl delete ns "$ns" --wait=false >/dev/null 2>&1 || true
}

# wait_ready URL PID LOG [SECONDS]: until URL answers 2xx (-k: the webhook's certificate is
# the bench's own). Fails, printing LOG, when process PID exits first or SECONDS (30) pass.
wait_ready() {
  local url=$1 pid=$2 log=$3 tries=$((${4:-30} * 10)) _
  for _ in $(seq 1 "$tries"); do
    curl -fsk "$url" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}

# own_cluster_up DIR POD_IP_RANGE [APISERVER_FLAG...]: a local cluster of the bench's own
# (one apiserver, its own etcd) in DIR, so a heavy run neither slows the shared cluster nor
# counts its requests; then KUBECONFIG points at it. Stop it with own_cluster_stop DIR.
own_cluster_up() {
  local dir=$1 range=$2 args="" a
  shift 2
  for a in "$@"; do args="$args --apiserver-arg=$a"; done
  own_cluster_stop "$dir"
  mkdir -p "$dir"
  DCO_TESTENV_DIR="$dir" DCO_TESTENV_APISERVERS=1 DCO_TESTENV_HELM=0 DCO_TESTENV_POD_IP_RANGE="$range" \
    DCO_TESTENV_ARGS="$args" hack/testenv up >"$dir/up.log" 2>&1 || { cat "$dir/up.log" >&2; return 1; }
  export DCO_TESTENV_DIR="$dir" KUBECONFIG="$dir/kubeconfig"
}

# own_cluster_stop DIR: the testenv server of DIR only (its pid files, checked against its
# command line), never another instance.
own_cluster_stop() {
  local dir=$1 pid
  for pid in $(sed -n 's/^pid=//p' "$dir/ready" 2>/dev/null) $(cat "$dir/run/testenv.pid" 2>/dev/null); do
    if tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q -- "testenv serve --state-dir $dir "; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -f "$dir/ready" "$dir/run/testenv.pid"
}
