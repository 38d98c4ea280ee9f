#!/usr/bin/env bash
# What a replica costs as the cluster grows, on the local cluster (docs/testenv.md; results in
# docs/performance.md, "Scale: unrelated CRDs and held targets"):
# N unrelated CRDs shaped like a Crossplane provider's (hack/bench/scale, `unrelated`), then M
# targets with a config each, one ConversionWebhookServer of 2 replicas and the operator
# (release builds; the operator a local process, the replicas Pods of the testenv). After each
# step, once quiet for SETTLE seconds, it reports every process's resident memory (VmRSS) and
# the time until every target was served (each config Applied with its handover at
# SourceDropped), for (N, M) = (0, 0), (N, 0), (N, M1), (N, M). Then the promptness probes:
# a config created for an existing CRD, and a CRD created after its config, each timed until a
# read at the unstored version comes back converted.
#
#   hack/bench/scale.sh                      # N=300 unrelated CRDs of ~100 KB, M1=100, M=300
#   UNRELATED=300 UNRELATED_BYTES=100000 TARGETS_FIRST=100 TARGETS=300 hack/bench/scale.sh
#
# The unrelated CRDs are applied with `kubectl apply` (client side), so each one's metadata
# also carries a full copy of it (last-applied-configuration) and its managedFields: the
# largest a CRD's metadata gets. Leaves the cluster up; everything of the run is deleted on
# exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh

UNRELATED=${UNRELATED:-300}
UNRELATED_BYTES=${UNRELATED_BYTES:-100000}
TARGETS_FIRST=${TARGETS_FIRST:-100}
TARGETS=${TARGETS:-300}
TARGET_BYTES=${TARGET_BYTES:-8000}
SETTLE=${SETTLE:-20}
SERVE_TIMEOUT=${SERVE_TIMEOUT:-600}
PORT=${METRICS_PORT:-19182}

cargo build --release -q -p dco-operator -p dco-webhook -p dco-scale
bin=$PWD/target/release
hack/testenv up >/dev/null
eval "$(hack/testenv env)"
# The replicas run the release build under an image name of their own.
hack/testenv image "dco-webhook-release=$bin/dco-webhook" >/dev/null
# An earlier run's CRDs may still be terminating: their events would be counted here.
echo "waiting for earlier runs' CRDs to be gone" >&2
kubectl wait --for=delete crd -l dco-scale --timeout=900s >/dev/null 2>&1 || true

RUN=scale-$(date +%s)
SEL_KEY=dco-scale
SEL="$SEL_KEY=$RUN"
SUFFIX=$RUN.bench.dco.rs
SERVER=$RUN-s
LOG=target/testenv/logs/dco-operator_$RUN.log
work=$(mktemp -d)
op_pid=
cleanup() {
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null
  delete_run "$SEL" "$RUN"
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT TERM

kubectl apply --server-side --force-conflicts -f charts/dco/crds/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s \
  crd/conversionwebhookservers.conversion.dco.rs crd/crdconversionconfigs.conversion.dco.rs \
  crd/xrdconversionconfigs.conversion.dco.rs >/dev/null
kubectl create ns "$RUN" >/dev/null

"$bin/dco-operator" --namespace "$RUN" --selector "$SEL" --webhook-image dco-webhook-release:scale \
  --webhook-listen '$(POD_IP):9443' --metrics-listen "127.0.0.1:$PORT" >"$LOG" 2>&1 &
op_pid=$!
wait_ready "http://127.0.0.1:$PORT/readyz" "$op_pid" "$LOG"
kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: conversion.dco.rs/v1alpha1
kind: ConversionWebhookServer
metadata: {name: $SERVER, labels: {$SEL_KEY: $RUN}}
spec: {namespace: $RUN, replicas: 2}
EOF
kubectl wait --for=condition=Available --timeout=180s "conversionwebhookserver/$SERVER" >/dev/null

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The replicas' processes: the testenv's kubelet writes each container's pid under pods/.
replica_pids() {
  for f in target/testenv/pods/"$RUN"_*/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -0 "$pid" 2>/dev/null && echo "$pid"
  done | sort -n
}
[ "$(replica_pids | wc -l)" -eq 2 ] || { echo "expected 2 replica processes under target/testenv/pods/${RUN}_*" >&2; exit 1; }
settled() {
  kubectl get crdconversionconfigs -l "$SEL" \
    -o jsonpath='{range .items[*]}{.status.phase}/{.status.handover.state}{"\n"}{end}' | grep -c '^Applied/SourceDropped$' || true
}
# Waits until COUNT configs are served; prints the seconds it took from START.
serve_time() { # serve_time COUNT START_NS
  until [ "$(settled)" -ge "$1" ]; do
    if [ $(( ($(date +%s%N) - $2) / 1000000000 )) -gt "$SERVE_TIMEOUT" ]; then
      echo "not served within ${SERVE_TIMEOUT}s:" >&2
      kubectl get crdconversionconfigs -l "$SEL" >&2
      exit 1
    fi
    sleep 0.5
  done
  awk -v ns=$(( $(date +%s%N) - $2 )) 'BEGIN { printf "%.1f", ns / 1e9 }'
}
rows=()
measure() { # measure N M SERVED_SECONDS
  sleep "$SETTLE"
  local r=() p
  for p in $(replica_pids); do r+=("$(rss_kb "$p")"); done
  rows+=("$1 $2 $(rss_kb "$op_pid") ${r[0]} ${r[1]} ${3// /_}")
  echo "(N=$1, M=$2): operator $(rss_kb "$op_pid") kB, replicas ${r[*]} kB, served after $3" >&2
}

measure 0 0 -

"$bin/dco-scale" unrelated --count "$UNRELATED" --bytes "$UNRELATED_BYTES" --suffix "$SUFFIX" --label "$SEL" \
  2>"$work/unrelated.txt" >"$work/unrelated.json"
cat "$work/unrelated.txt" >&2
kubectl apply -f "$work/unrelated.json" >/dev/null
kubectl wait --for=condition=Established --timeout=300s crd -l "$SEL" >/dev/null
measure "$UNRELATED" 0 -

add_targets() { # add_targets FROM COUNT
  "$bin/dco-scale" targets --from "$1" --count "$2" --bytes "$TARGET_BYTES" --suffix "$SUFFIX" --label "$SEL" \
    --server "$SERVER" 2>"$work/targets.txt" >"$work/targets.json"
  cat "$work/targets.txt" >&2
  cat "$work/targets.txt" >>"$work/all-targets.txt"
  local t0 t1 total
  t0=$(date +%s%N)
  kubectl apply --server-side -f "$work/targets.json" >/dev/null
  t1=$(date +%s%N)
  total=$(serve_time "$(($1 + $2))" "$t0")
  # "S s (A s after the apply)": kubectl applying the objects one by one is most of S.
  awk -v t="$total" -v a=$(( t1 - t0 )) 'BEGIN { printf "%s s (%.1f s after kubectl applied them)", t, t - a / 1e9 }'
}
s=$(add_targets 0 "$TARGETS_FIRST")
measure "$UNRELATED" "$TARGETS_FIRST" "$s"
s=$(add_targets "$TARGETS_FIRST" $((TARGETS - TARGETS_FIRST)))
measure "$UNRELATED" "$TARGETS" "$s"

echo
echo "| N unrelated CRDs | M targets | operator RSS | replica 1 RSS | replica 2 RSS | all M served after |"
echo "|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  read -r n m op r1 r2 t <<<"$row"
  awk -v n="$n" -v m="$m" -v op="$op" -v r1="$r1" -v r2="$r2" -v t="$t" \
    'BEGIN { gsub("_", " ", t); printf "| %d | %d | %.1f MB | %.1f MB | %.1f MB | %s |\n", n, m, op / 1024, r1 / 1024, r2 / 1024, (t == "-" ? "—" : t) }'
done
# Bytes per target CRD and config, averaged over every batch ("K × what: B bytes each").
avg_bytes() { awk -v w="$1" '$0 ~ w { n += $1; b += $1 * $(NF - 4) } END { printf "%d", b / n }' "$work/all-targets.txt"; }
target_bytes=$(avg_bytes "target CRD:")
config_bytes=$(avg_bytes "config:")
read -r _ _ op0 a0 b0 _ <<<"${rows[0]}"
read -r _ _ op1 a1 b1 _ <<<"${rows[1]}"
read -r _ _ op3 a3 b3 _ <<<"${rows[3]}"
echo
awk -v n="$UNRELATED" -v op0="$op0" -v op1="$op1" -v a0="$a0" -v a1="$a1" -v b0="$b0" -v b1="$b1" 'BEGIN {
  printf "%d unrelated CRDs added: operator %+.1f MB, replicas %+.1f MB and %+.1f MB\n", n, (op1 - op0) / 1024, (a1 - a0) / 1024, (b1 - b0) / 1024 }'
awk -v m="$TARGETS" -v a1="$a1" -v a3="$a3" -v b1="$b1" -v b3="$b3" -v tb="$target_bytes" -v cb="$config_bytes" 'BEGIN {
  pa = (a3 - a1) * 1024 / m; pb = (b3 - b1) * 1024 / m
  printf "per held target (%d targets; CRD %d + config %d bytes): replica 1 %.1f KB (%.1fx), replica 2 %.1f KB (%.1fx)\n",
    m, tb, cb, pa / 1024, pa / (tb + cb), pb / 1024, pb / (tb + cb) }'

kubectl get --raw "/api/v1/namespaces/$RUN" >/dev/null
"$bin/dco-scale" probe --suffix "$SUFFIX" --label "$SEL" --server "$SERVER" --namespace "$RUN"
