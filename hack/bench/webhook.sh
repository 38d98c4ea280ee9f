#!/usr/bin/env bash
# Load benchmark of dco-webhook (static mode) on loopback: ConversionReviews of 1500 objects
# x 10 KB, the server pinned to one core, the load generator on another. Bounded: at most
# REQUESTS measured requests per run and MAX_SECONDS each.
#
#   hack/bench/webhook.sh            # defaults below
#   REQUESTS=50 hack/bench/webhook.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh

REQUESTS=${REQUESTS:-200}
OBJECTS=${OBJECTS:-1500}
OBJECT_BYTES=${OBJECT_BYTES:-10240}
MAX_SECONDS=${MAX_SECONDS:-180}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT=${PORT:-19443}
ADMIN_PORT=${ADMIN_PORT:-19080}

cargo build --release -q -p dco-webhook -p dco-webhook-load
bin=target/release
work=$(mktemp -d)
trap 'kill "${server_pid:-}" 2>/dev/null || true; wait "${server_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/dco-webhook-load" cert "$work"
taskset -c "$SERVER_CPU" "$bin/dco-webhook" --static-dir hack/bench/webhook-fixtures \
  --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" --tls-cert-file "$work/tls.crt" --tls-key-file "$work/tls.key" \
  --shutdown-delay 0s >"$work/server.log" 2>&1 &
server_pid=$!
wait_ready "https://127.0.0.1:$PORT/readyz" "$server_pid" "$work/server.log" 10

echo "server: dco-webhook --static-dir, pinned to CPU $SERVER_CPU; client pinned to CPU $CLIENT_CPU"
# CPU time the hypervisor gave to other guests (steal, the 8th number on /proc/stat's cpu line), as
# a share of all CPU time: on a shared VM it is what moves p99 from one run to the next.
cpu_ticks() { awk '/^cpu /{t=0; for (i=2; i<=9; i++) t+=$i; print $9, t}' /proc/stat 2>/dev/null || echo "0 0"; }
# The server's user + system time (ticks): on one core its CPU per request is the floor under
# its latency.
server_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat" 2>/dev/null || echo 0; }
tick_ms=$((1000 / $(getconf CLK_TCK)))
for conc in 1 2; do
  read -r steal0 total0 < <(cpu_ticks)
  busy0=$(server_ticks)
  out=$(taskset -c "$CLIENT_CPU" "$bin/dco-webhook-load" run \
    --url "https://127.0.0.1:$PORT/convert/widgets.bench.dco.rs" --ca "$work/tls.crt" \
    --objects "$OBJECTS" --object-bytes "$OBJECT_BYTES" --requests "$REQUESTS" \
    --concurrency "$conc" --max-seconds "$MAX_SECONDS")
  busy1=$(server_ticks)
  read -r steal1 total1 < <(cpu_ticks)
  echo "$out"
  # The load generator's 5 warm-up requests are in the server's time too.
  done_requests=$(sed -n 's/.* requests=\([0-9]*\) .*/\1/p' <<<"$out")
  awk -v s=$((steal1 - steal0)) -v t=$((total1 - total0)) -v b=$(((busy1 - busy0) * tick_ms)) -v n="$((${done_requests:-0} + 5))" \
    'BEGIN { if (t > 0) printf "steal during the run: %.1f%% of CPU time; server CPU per request: %.1f ms\n", 100 * s / t, b / n }'
done
# The server's own view of the same requests.
curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^dco_webhook_(requests_total|objects_converted_total)' || true
