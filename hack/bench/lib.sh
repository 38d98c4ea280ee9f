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
