#!/usr/bin/env bash
# hack/bench/convctl-live.sh [OBJECTS] — `convctl test --live` over one target with many objects
# (docs/performance.md, "convctl test --live over 100,000 objects"): creates a two-version CRD
# (v1 and v2, v2 stored) and OBJECTS (default 100000) objects of it, in parallel batches of
# `kubectl create`, then runs the release `convctl test --live --max-samples 1000` once per
# sample strategy under /usr/bin/time -v and prints wall time, peak RSS and what was listed and
# sampled. Deletes the CRD (and so every object) at the end.
#
# It runs on a small cluster of its own (DCO_TESTENV_DIR=target/testenv-bench, one apiserver,
# its own etcd) so the load does not slow the shared local cluster, and stops that cluster by
# its own pid (only when the process is `testenv serve --state-dir` of that directory).
# BENCH_KUBECONFIG=FILE runs on an existing cluster instead (then only the CRD is deleted).
# Environment: OBJECTS, MAX_SAMPLES (1000), JOBS (parallel kubectl processes, 8).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OBJECTS="${1:-${OBJECTS:-100000}}"
MAX_SAMPLES="${MAX_SAMPLES:-1000}"
JOBS="${JOBS:-8}"
GROUP="bench-live.example.org"
CRD="widgets.$GROUP"
NS=convctl-live-bench
DIR="$ROOT/target/testenv-bench"
WORK="$ROOT/target/bench-convctl-live"
K="$ROOT/target/testenv/bin/kubectl"
mkdir -p "$WORK"

# stop_own DIR: the testenv server of DIR only (its ready/pid files, checked against its
# command line), never another instance.
stop_own() {
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

if [ -n "${BENCH_KUBECONFIG:-}" ]; then
  export KUBECONFIG="$BENCH_KUBECONFIG"
  OWN=0
else
  OWN=1
  stop_own "$DIR"
  DCO_TESTENV_DIR="$DIR" DCO_TESTENV_APISERVERS=1 DCO_TESTENV_HELM=0 \
    DCO_TESTENV_POD_IP_RANGE=127.0.4.2-127.0.4.254 hack/testenv up >"$WORK/testenv.log" 2>&1
  export KUBECONFIG="$DIR/kubeconfig"
fi

cleanup() {
  "$K" delete crd "$CRD" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  "$K" delete ns "$NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  if [ "$OWN" = 1 ]; then stop_own "$DIR"; fi
  rm -f "$WORK"/chunk-*.yaml
}
trap cleanup EXIT

cargo build -q --release -p convctl
CONVCTL="$ROOT/target/release/convctl"

"$K" create ns "$NS" >/dev/null
"$K" apply -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $CRD}
spec:
  group: $GROUP
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {
      size: {type: string}, replicas: {type: integer}, owner: {type: string}, tags: {type: array, items: {type: string}}}}}}}
  - name: v2
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {
      size: {type: string}, replicas: {type: integer}, owner: {type: string}, tags: {type: array, items: {type: string}}}}}}}
EOF
"$K" wait --for condition=established "crd/$CRD" --timeout=60s >/dev/null
cat >"$WORK/config.yaml" <<EOF
apiVersion: conversion.dco.rs/v1alpha1
kind: CRDConversionConfig
metadata: {name: bench-live}
spec:
  targetCRD: {name: $CRD}
  hubVersion: v2
  spokes: [{version: v1, rules: []}]
EOF

# The objects: JOBS files of YAML documents, created by JOBS kubectl processes at once.
rm -f "$WORK"/chunk-*.yaml
per=$(( (OBJECTS + JOBS - 1) / JOBS ))
awk -v n="$OBJECTS" -v per="$per" -v ns="$NS" -v g="$GROUP" -v dir="$WORK" 'BEGIN {
  for (i = 0; i < n; i++) {
    f = sprintf("%s/chunk-%02d.yaml", dir, int(i / per))
    printf "apiVersion: %s/v2\nkind: Widget\nmetadata: {name: w%06d, namespace: %s, labels: {bench: live}}\nspec: {size: \"%dGi\", replicas: %d, owner: team-%d, tags: [a, b%d]}\n---\n", g, i, ns, i % 500, i % 7, i % 40, i % 3 > f
  }
}'
t0=$(date +%s.%N)
ls "$WORK"/chunk-*.yaml | xargs -P "$JOBS" -I{} sh -c "'$K' create -f {} >/dev/null"
t1=$(date +%s.%N)
count=$("$K" get widgets."$GROUP" -n "$NS" --chunk-size=5000 -o name | wc -l)
printf 'created %d objects in %.1f s (%d kubectl processes)\n' "$count" "$(echo "$t1 - $t0" | bc)" "$JOBS"

printf '%-8s %-10s %-14s %-10s %s\n' strategy wall_s peak_rss_kb exit "listed/sampled per version"
for strategy in first random newest; do
  log="$WORK/time-$strategy.log"
  set +e
  /usr/bin/time -v "$CONVCTL" test --live -c "$WORK/config.yaml" --crd "$CRD" --kubeconfig "$KUBECONFIG" \
    --max-samples "$MAX_SAMPLES" --sample-strategy "$strategy" --seed 1 --quiet -o json \
    --output-file "$WORK/report-$strategy.json" >/dev/null 2>"$log"
  rc=$?
  set -e
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
  listed=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join("%s:%s/%s" % (l["version"], l["listed"], l["sampled"]) for c in r["summary"]["contexts"] for l in c.get("listings", [])))' "$WORK/report-$strategy.json" 2>/dev/null || echo "?")
  printf '%-8s %-10s %-14s %-10s %s\n' "$strategy" "$wall" "$rss" "$rc" "$listed"
done
