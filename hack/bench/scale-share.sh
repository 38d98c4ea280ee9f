#!/usr/bin/env bash
# What a webhook replica costs against its share (docs/performance.md, "Scale: a replica's
# share"): TARGETS targets with unpinned configs (LARGE of them provider-sized, the rest
# ordinary) over POOL sharded servers of 2 replicas, one dco-operator (a local process; the
# replicas Pods of a local cluster of the bench's own, target/testenv-share, one apiserver,
# Pod IPs 127.0.9.x: the shared cluster is neither slowed nor restarted under it). Reports,
# per replica, its resident memory (VmRSS) once settled against the bytes of its server's share (the CRDs and configs the
# status assigns to that server, as the apiserver returns them) and against the replicas'
# baseline before any config existed; then, per server, a new replica's time from its process
# start to /readyz 200 (one replica Pod deleted, its replacement timed).
#
#   hack/bench/scale-share.sh                    # TARGETS=1000 LARGE=100 POOL=5 (debug builds)
#   PROFILE=release hack/bench/scale-share.sh    # dco-operator and dco-webhook built --release
#   TARGETS=200 LARGE=20 SETTLE=10 hack/bench/scale-share.sh    # the run in docs/performance.md
#   WRAP="env MALLOC_ARENA_MAX=2" ...   # a prefix to the replicas' command
#   HEAPTRACK=1 ...   # the first replica to start runs under heaptrack (left out of the
#                     # tables); its live heap by call site, once settled, is printed
#
# Everything of the run, the cluster included, is deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh

TARGETS=${TARGETS:-1000}
LARGE=${LARGE:-100}
SMALL_BYTES=${SMALL_BYTES:-8000}
LARGE_BYTES=${LARGE_BYTES:-93000}
POOL=${POOL:-5}
SETTLE=${SETTLE:-20}
SERVE_TIMEOUT=${SERVE_TIMEOUT:-1800}
PORT=${METRICS_PORT:-19183}
WRAP=${WRAP:-}
HEAPTRACK=${HEAPTRACK:-0}

PROFILE=${PROFILE:-debug}
case $PROFILE in
  debug) cargo build -q -p dco-operator -p dco-webhook -p dco-scale ;;
  release) cargo build -q -p dco-scale && cargo build -q --release -p dco-operator -p dco-webhook ;;
  *) echo "scale-share.sh: PROFILE is debug or release, not '$PROFILE'" >&2; exit 2 ;;
esac
bin=$PWD/target/$PROFILE
tool=$PWD/target/debug
DIR=$PWD/target/testenv-share
own_cluster_up "$DIR" 127.0.9.2-127.0.9.254
rm -rf "$DIR/heaptrack.lock" "$DIR"/heaptrack-data* "$DIR/heaptrack.txt"
cat >"$DIR/dco-webhook-wrapped" <<EOF
#!/bin/sh
if [ "$HEAPTRACK" = 1 ] && mkdir "$DIR/heaptrack.lock" 2>/dev/null; then
  exec heaptrack -o "$DIR/heaptrack-data" $WRAP "$bin/dco-webhook" "\$@"
fi
exec $WRAP "$bin/dco-webhook" "\$@"
EOF
chmod +x "$DIR/dco-webhook-wrapped"
hack/testenv image "dco-webhook-share=$DIR/dco-webhook-wrapped" >/dev/null

RUN=share-$(date +%s)
SEL_KEY=dco-scale
SEL="$SEL_KEY=$RUN"
SUFFIX=$RUN.bench.dco.rs
LOG=$DIR/logs/dco-operator_$RUN.log
work=$(mktemp -d)
op_pid=
cleanup() {
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null && wait "$op_pid" 2>/dev/null
  own_cluster_stop "$DIR"
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT TERM
echo "conditions: $PROFILE builds${WRAP:+, replicas run as: $WRAP}; $(nproc) cores shared with other work, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2

kubectl apply --server-side --force-conflicts -f charts/dco/crds/ >/dev/null
kubectl create ns "$RUN" >/dev/null
"$bin/dco-operator" --namespace "$RUN" --selector "$SEL" --webhook-image dco-webhook-share:bench \
  --webhook-listen '$(POD_IP):9443' --metrics-listen "127.0.0.1:$PORT" >"$LOG" 2>&1 &
op_pid=$!
wait_ready "http://127.0.0.1:$PORT/readyz" "$op_pid" "$LOG" 60
servers=()
for i in $(seq 0 $((POOL - 1))); do
  servers+=("$RUN-p$i")
  kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: conversion.dco.rs/v1alpha1
kind: ConversionWebhookServer
metadata: {name: $RUN-p$i, labels: {$SEL_KEY: $RUN}}
spec: {namespace: $RUN, replicas: 2, sharding: {enabled: true}}
EOF
done
for s in "${servers[@]}"; do
  kubectl wait --for=condition=Available --timeout=300s "conversionwebhookserver/$s" >/dev/null
done

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# "server pod pid ip" of every running replica; the kubelet writes each container's pid under pods/.
replicas() {
  kubectl get pods -n "$RUN" -o jsonpath='{range .items[*]}{.metadata.labels.conversion\.dco\.rs/instance} {.metadata.name} {.metadata.uid} {.status.podIP} {.metadata.deletionTimestamp}{"\n"}{end}' |
    while read -r s pod uid ip deleting; do
      [ -z "$deleting" ] || continue
      f=$DIR/pods/${RUN}_${pod}_${uid:0:8}/webhook.pid
      # The replica under heaptrack is its wrapper's child: left out.
      [ -e "$f" ] && [ "$(cat "/proc/$(cat "$f")/comm" 2>/dev/null)" = dco-webhook ] && echo "$s $pod $(cat "$f") $ip"
    done | sort
}
metric() { curl -fs "http://$1:8080/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }

# Where each replica's memory goes: its mappings' resident bytes by kind (/proc/PID/smaps) and
# glibc malloc's own count (malloc_stats(), called through gdb, printed to the Pod's log).
profile() { # reads "server pod pid ip" lines
  echo "| replica | VmRSS | binary (file) | libraries | [heap] (malloc's main arena) | anonymous (other arenas, stacks, large buffers) | malloc arenas | malloc in use | malloc free, kept |"
  echo "|---|---|---|---|---|---|---|---|---|"
  while read -r s pod pid ip; do
    read -r bin_kb lib_kb heap_kb anon_kb < <(awk '
      /^[0-9a-f]+-[0-9a-f]+ / { path = $6; kind = (path == "" ? "anon" : path == "[heap]" ? "heap" : path ~ /dco-webhook/ ? "bin" : path ~ /^\// ? "lib" : "anon") }
      /^Rss:/ { kb[kind] += $2 }
      END { printf "%d %d %d %d\n", kb["bin"], kb["lib"], kb["heap"], kb["anon"] }' "/proc/$pid/smaps")
    log=$DIR/logs/${RUN}_${pod}_webhook.log
    lines=$(wc -l <"$log")
    gdb -nx -batch -p "$pid" -ex 'set auto-solib-add off' -ex 'sharedlibrary libc' -ex 'call (void) malloc_stats()' </dev/null >/dev/null 2>&1 || true
    sleep 0.5
    read -r arenas sys use < <(tail -n +"$((lines + 1))" "$log" | awk '
      /^Arena / { n++ } /^Total/ { t = 1 } t && /^system bytes/ { s = $4 } t && /^in use bytes/ { u = $5 }
      END { printf "%d %d %d\n", n, s, u }')
    awk -v pod="$pod" -v r="$(rss_kb "$pid")" -v b="$bin_kb" -v l="$lib_kb" -v h="$heap_kb" -v a="$anon_kb" -v n="$arenas" -v s="$sys" -v u="$use" 'BEGIN {
      printf "| %s | %.1f MB | %.1f MB | %.1f MB | %.1f MB | %.1f MB | %d | %.1f MB | %.1f MB |\n", pod, r / 1024, b / 1024, l / 1024, h / 1024, a / 1024, n, u / 1e6, (s - u) / 1e6 }'
  done
}

sleep "$SETTLE"
replicas >"$work/empty"
[ "$(wc -l <"$work/empty")" -eq $((POOL * 2 - HEAPTRACK)) ] || { echo "expected $((POOL * 2)) replicas:" >&2; cat "$work/empty" >&2; exit 1; }
baseline=$(while read -r _ _ pid _; do rss_kb "$pid"; done <"$work/empty" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "empty replicas: median VmRSS $baseline kB" >&2
echo "where the memory goes, empty:"
profile <"$work/empty"

gen() { # gen FROM COUNT BYTES: targets with unpinned configs (the pool decides)
  "$tool/dco-scale" targets --from "$1" --count "$2" --bytes "$3" --suffix "$SUFFIX" --label "$SEL" --server none \
    2>>"$work/sizes.txt" | jq 'del(.items[].spec.webhookServerRef)'
}
{ gen 0 $((TARGETS - LARGE)) "$SMALL_BYTES"; gen $((TARGETS - LARGE)) "$LARGE" "$LARGE_BYTES"; } | jq -s '{apiVersion: "v1", kind: "List", items: (map(.items) | add)}' >"$work/targets.json"
cat "$work/sizes.txt" >&2
t0=$(date +%s)
kubectl apply --server-side -f "$work/targets.json" >/dev/null
settled() {
  kubectl get crdconversionconfigs -l "$SEL" \
    -o jsonpath='{range .items[*]}{.status.phase}/{.status.handover.state}{"\n"}{end}' | grep -c '^Applied/SourceDropped$' || true
}
until [ "$(settled)" -ge "$TARGETS" ]; do
  [ $(($(date +%s) - t0)) -le "$SERVE_TIMEOUT" ] || { echo "not settled within ${SERVE_TIMEOUT}s ($(settled) of $TARGETS)" >&2; exit 1; }
  sleep 2
done
echo "all $TARGETS settled $(($(date +%s) - t0)) s after the apply began" >&2
sleep "$SETTLE"

# The share of each server: the CRD and config bytes (as the apiserver returns them) of the
# configs whose status assigns them there.
kubectl get crd -l "$SEL" -o json >"$work/crds.json"
kubectl get crdconversionconfigs -l "$SEL" -o json >"$work/configs.json"
python3 - "$work/crds.json" "$work/configs.json" >"$work/shares" <<'PY'
import json, sys
crds = {c["metadata"]["name"]: len(json.dumps(c, separators=(",", ":"))) for c in json.load(open(sys.argv[1]))["items"]}
share = {}
for c in json.load(open(sys.argv[2]))["items"]:
    s = c.get("status", {}).get("assignedWebhookServer", "?")
    n, b = share.get(s, (0, 0))
    share[s] = (n + 1, b + crds.get(c["spec"]["targetCRD"]["name"], 0) + len(json.dumps(c, separators=(",", ":"))))
for s, (n, b) in sorted(share.items()):
    print(s, n, b)
PY
echo
echo "| replica | targets in its share | share's CRD + config bytes | held (targets, bytes of JSON) | VmRSS | (VmRSS − baseline) / share | goal ≤ 1.3 |"
echo "|---|---|---|---|---|---|---|"
replicas | while read -r s pod pid ip; do
  read -r _ n bytes < <(grep "^$s " "$work/shares" || echo "$s 0 0")
  held=$(metric "$ip" dco_webhook_targets_held)
  held_bytes=$(metric "$ip" dco_webhook_targets_held_bytes)
  awk -v pod="$pod" -v n="$n" -v b="$bytes" -v h="$held" -v hb="$held_bytes" -v r="$(rss_kb "$pid")" -v base="$baseline" 'BEGIN {
    ratio = (r - base) * 1024 / b
    printf "| %s | %d | %.2f MB | %d, %.2f MB | %.1f MB | %.2f | %s |\n", pod, n, b / 1e6, h, hb / 1e6, r / 1024, ratio, (ratio <= 1.3 ? "met" : "missed") }'
done
echo "(baseline: the median VmRSS of the $((POOL * 2 - HEAPTRACK)) replicas before any config, $(awk -v b="$baseline" 'BEGIN { printf "%.1f MB", b / 1024 }'))"
cp "$work/configs.json" "$DIR/configs.json" # a sample of what the config watches return, kept for a look

echo
echo "where the memory goes, settled:"
replicas | profile

if [ "$HEAPTRACK" = 1 ]; then
  # Its live heap now: SIGKILL (no teardown frees anything), then what was never freed.
  for p in $(pgrep -x dco-webhook); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q "^DCO_TESTENV_POD_DIR=$DIR/" && tr '\0' '\n' <"/proc/$p/environ" | grep -q '^LD_PRELOAD=.*heaptrack'; then kill -KILL "$p"; fi
  done
  for _ in $(seq 1 600); do ls "$DIR"/heaptrack-data* >/dev/null 2>&1 && ! pgrep -f heaptrack_interpret >/dev/null && break; sleep 0.5; done
  heaptrack_print -f "$(ls "$DIR"/heaptrack-data* | head -1)" --print-leaks 1 --print-peaks 0 --print-allocators 0 \
    --print-temporary 0 --peak-limit 40 --sub-peak-limit 4 >"$DIR/heaptrack.txt" 2>&1 || true
  echo
  echo "heaptrack, the settled replica's live heap by call site: $DIR/heaptrack.txt"
  grep -i "leaked" "$DIR/heaptrack.txt" | tail -3 || true
fi

# A new replica of each server: one Pod deleted, its replacement timed from its process's
# start to /readyz 200.
echo
echo "| server | new replica: process start → Ready | goal ≤ 3 s |"
echo "|---|---|---|"
hz=$(getconf CLK_TCK)
for s in "${servers[@]}"; do
  replicas | awk -v s="$s" '$1 == s { print $2 }' | sort >"$work/before"
  kubectl delete pod -n "$RUN" "$(head -1 "$work/before")" --wait=false >/dev/null
  new=
  for _ in $(seq 1 600); do
    # Its IP may not be in the Pod's status yet: wait for it.
    new=$(replicas | awk -v s="$s" '$1 == s && NF == 4 { print $2, $3, $4 }' | while read -r pod pid ip; do
      grep -qx "$pod" "$work/before" || echo "$pod $pid $ip"
    done | head -1)
    [ -n "$new" ] && break
    sleep 0.05
  done
  read -r pod pid ip <<<"$new"
  # Its start: now minus its age (uptime − its start in clock ticks since boot).
  start=$(awk -v hz="$hz" -v now="$(date +%s.%N)" -v up="$(cut -d' ' -f1 /proc/uptime)" '{ printf "%.3f", now - (up - $22 / hz) }' "/proc/$pid/stat")
  [ -n "$new" ] || { echo "no replacement replica of $s found" >&2; exit 1; }
  for _ in $(seq 1 3000); do curl -fs "http://$ip:8080/readyz" >/dev/null 2>&1 && break; sleep 0.02; done
  ready=$(date +%s.%N)
  awk -v s="$s" -v a="$start" -v b="$ready" 'BEGIN { d = b - a; printf "| %s | %.2f s | %s |\n", s, d, (d <= 3 ? "met" : "missed") }'
  sleep 3
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
