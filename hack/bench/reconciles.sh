#!/usr/bin/env bash
# How much work one config change costs the operator, on the local cluster (docs/testenv.md).
# Runs dco-operator as tests/tests/handover_pinned_move.rs does (a local process, the testenv's
# admin kubeconfig, `--selector` scoped to this run's objects), then measures:
#   1. WATCH streams per resource the operator holds: the apiserver's
#      apiserver_longrunning_requests{verb="WATCH"} right after the operator is ready, minus
#      the same just before it started (no server exists yet, so no webhook Pod watches either);
#   2. reconciles by controller (dco_operator_reconciles_total) over WINDOW seconds: once idle
#      (the noise floor: Lease-expiry requeues and the like), once after an annotation on one
#      config, once after a rule change, once after a rule that breaks it (its phase changes,
#      which its server's status lists) and once after the fix; SERVERS servers and CONFIGS
#      pinned configs (config i on server i % SERVERS), all settled first.
#
#   hack/bench/reconciles.sh [OPERATOR_BINARY]    # default target/debug/dco-operator
#   SERVERS=2 CONFIGS=10 WINDOW=15 hack/bench/reconciles.sh target/bench/dco-operator-base
#
# Measured with the defaults (2 servers, 10 configs, 15 s windows), the base 1c931c7 against
# the shared reflectors and the fan-out (now operator/src/wake/), two runs each, same numbers:
#   WATCH streams: 12 (servers, both config kinds and Secrets twice each) -> 8 (one per kind)
#   crdconversionconfig reconciles after c0's phase changes: 7 (c0 and its server's other 4)
#   -> 2 (c0 and its own status write); annotation 1 -> 1; rule 2 -> 2; idle 0 -> 0.
#   conversionwebhookserver: 2-4 a window either way (2 idle: Lease-expiry requeues).
# Needs target/debug/dco-webhook (`cargo build -p dco-webhook`). Leaves the cluster up; the
# namespace, servers, configs and CRDs of the run are deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh

OPERATOR=${1:-target/debug/dco-operator}
SERVERS=${SERVERS:-2}
CONFIGS=${CONFIGS:-10}
WINDOW=${WINDOW:-15}
PORT=${METRICS_PORT:-19181}
SETTLE_TIMEOUT=${SETTLE_TIMEOUT:-240}

[ -x "$OPERATOR" ] || { echo "no operator binary at $OPERATOR" >&2; exit 1; }
[ -x target/debug/dco-webhook ] || { echo "build dco-webhook first: cargo build -p dco-webhook" >&2; exit 1; }
hack/testenv up >/dev/null
eval "$(hack/testenv env)"

NS=bench-$(date +%s)
SEL_KEY=dco-bench
SEL="$SEL_KEY=$NS"
LOG=target/testenv/logs/dco-operator_$NS.log
op_pid=
cleanup() {
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null
  delete_run "$SEL" "$NS"
}
trap cleanup EXIT

kubectl apply --server-side --force-conflicts -f charts/dco/crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s \
  crd/conversionwebhookservers.conversion.dco.rs crd/crdconversionconfigs.conversion.dco.rs \
  crd/xrdconversionconfigs.conversion.dco.rs >/dev/null
kubectl create ns "$NS" >/dev/null

# "group/resource count" lines of the apiserver's open WATCH requests (all scopes summed).
watches() {
  kubectl get --raw /metrics | awk '/^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {
    match($0, /group="[^"]*"/); g = substr($0, RSTART + 7, RLENGTH - 8)
    match($0, /resource="[^"]*"/); r = substr($0, RSTART + 10, RLENGTH - 11)
    n[(g == "" ? "core" : g) "/" r] += $NF } END { for (k in n) print k, n[k] }' | sort
}
# "controller count" lines of the operator's dco_operator_reconciles_total.
reconciles() {
  curl -fs "http://127.0.0.1:$PORT/metrics" | awk '/^dco_operator_reconciles_total\{/ {
    match($0, /controller="[^"]*"/); print substr($0, RSTART + 12, RLENGTH - 13), $NF }' | sort
}
# The difference of two "key count" listings, keys with a non-zero difference only.
diff_counts() {
  join -a1 -a2 -e0 -o0,1.2,2.2 <(echo "$1") <(echo "$2") | awk '$3 - $2 != 0 { print "  " $1, $3 - $2 }'
}

before=$(watches)
"$OPERATOR" --namespace "$NS" --selector "$SEL" --webhook-listen '$(POD_IP):9443' \
  --webhook-arg=--drain-period=5s --webhook-arg=--lease-renew-interval=5s --webhook-arg=--lease-duration=20s \
  --metrics-listen "127.0.0.1:$PORT" --resync 300s >"$LOG" 2>&1 &
op_pid=$!
wait_ready "http://127.0.0.1:$PORT/readyz" "$op_pid" "$LOG"
# The controllers open their watches once the caches synced (readyz); give them a moment.
sleep 3
echo "operator: $OPERATOR (log $LOG)"
echo "WATCH streams the operator opened (apiserver_longrunning_requests, after - before):"
w=$(diff_counts "$before" "$(watches)")
echo "$w"
echo "  total $(echo "$w" | awk '{ s += $2 } END { print s }')"

for s in $(seq 0 $((SERVERS - 1))); do
  kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: conversion.dco.rs/v1alpha1
kind: ConversionWebhookServer
metadata: {name: $NS-s$s, labels: {$SEL_KEY: $NS}}
spec: {namespace: $NS, replicas: 1}
EOF
done
config() { # config INDEX [EXTRA_RULE]
  cat <<EOF
apiVersion: conversion.dco.rs/v1alpha1
kind: CRDConversionConfig
metadata: {name: $NS-c$1, labels: {$SEL_KEY: $NS}}
spec:
  targetCRD: {name: widgets.g$1.$NS.bench.dco.rs}
  hubVersion: v2
  webhookServerRef: {name: $NS-s$(($1 % SERVERS))}
  spokes:
  - version: v1
    rules:
    - {strategy: FieldRename, fieldRename: {hubPath: spec.sizeGB, spokePath: spec.size}}
${2:-}
EOF
}
for i in $(seq 0 $((CONFIGS - 1))); do
  kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.g$i.$NS.bench.dco.rs, labels: {$SEL_KEY: $NS}}
spec:
  group: g$i.$NS.bench.dco.rs
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - {name: v1, served: true, storage: false, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}, owner: {type: string}}}}}}}
  - {name: v2, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {sizeGB: {type: integer}, owner: {type: string}}}}}}}
EOF
  config "$i" | kubectl apply --server-side -f - >/dev/null
done

settled() {
  kubectl get crdconversionconfigs -l "$SEL" \
    -o jsonpath='{range .items[*]}{.status.phase}/{.status.handover.state}{"\n"}{end}' | grep -c '^Applied/SourceDropped$' || true
}
start=$SECONDS
until [ "$(settled)" -eq "$CONFIGS" ]; do
  if [ $((SECONDS - start)) -gt "$SETTLE_TIMEOUT" ]; then
    echo "not settled within ${SETTLE_TIMEOUT}s:" >&2
    kubectl get crdconversionconfigs -l "$SEL" >&2
    exit 1
  fi
  sleep 2
done
echo "$SERVERS servers, $CONFIGS configs settled after $((SECONDS - start))s; quiet for $WINDOW s"
sleep "$WINDOW"

window() { # window LABEL [COMMAND...]: reconciles over WINDOW seconds from just before COMMAND
  local label=$1 a b
  shift
  a=$(reconciles)
  "$@"
  sleep "$WINDOW"
  b=$(reconciles)
  echo "reconciles in ${WINDOW}s, $label:"
  diff_counts "$a" "$b"
}
touch_c0() { kubectl annotate crdconversionconfig "$NS-c0" "bench.dco.rs/touch=$(date +%s%N)" --overwrite >/dev/null; }
rule_c0() { config 0 '    - {strategy: FieldRename, fieldRename: {hubPath: spec.owner, spokePath: spec.owner}}' | kubectl apply --server-side -f - >/dev/null; }
# A rule that does not compile: c0's phase goes Applied → Invalid, which its server lists in
# status.assignedConfigs (the feedback loop docs/performance.md describes under "Operator: work per
# config change" ran through that write); then back.
broken_c0() { config 0 '    - {strategy: FieldRename, fieldRename: {hubPath: spec.nowhere, spokePath: spec.owner}}' | kubectl apply --server-side -f - >/dev/null; }
fixed_c0() { config 0 | kubectl apply --server-side -f - >/dev/null; }
window "idle (noise floor)" true
window "after an annotation on config c0" touch_c0
window "after a rule change of config c0" rule_c0
window "after a rule of c0 that does not compile (phase -> Invalid)" broken_c0
window "after fixing it (phase -> Applied)" fixed_c0
