# Shared by the benchmarks that run the operator on the local cluster (scale.sh, reconciles.sh).

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
