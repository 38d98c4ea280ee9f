#!/usr/bin/env bash
# Resident memory of dco-webhook (static mode) per held target (docs/performance.md): starts
# the server on N copies of hack/bench/webhook-fixtures (`dco-webhook-load targets`, each its
# own group) for each N in COUNTS, reads VmRSS from /proc once the directory is served and two reloads
# (5 s each) have passed, and prints the RSS per target beyond the first against the bytes of
# its input files (CRD + config). peak_kb is VmHWM: the load's parsed documents, freed since.
#
#   hack/bench/held.sh                         # COUNTS="1 100 300 1000"
#   COUNTS="1 300" BIN=target/bench hack/bench/held.sh   # another build's binaries
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh

COUNTS=${COUNTS:-1 100 300 1000}
SETTLE=${SETTLE:-11}
PORT=${PORT:-19443}
ADMIN_PORT=${ADMIN_PORT:-19080}
BIN=${BIN:-target/release}

if [ "$BIN" = target/release ]; then cargo build --release -q -p dco-webhook -p dco-webhook-load; fi
work=$(mktemp -d)
trap 'kill "${server_pid:-}" 2>/dev/null || true; wait "${server_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$BIN/dco-webhook-load" cert "$work"

kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

printf '%6s %10s %10s %14s %12s %8s\n' targets peak_kb rss_kb input_B/target rss_B/target ratio
first_n='' first_rss=''
for n in $COUNTS; do
  dir="$work/targets-$n"
  "$BIN/dco-webhook-load" targets "$dir" --count "$n"
  input=$(cat "$dir"/*.yaml | wc -c)
  "$BIN/dco-webhook" --static-dir "$dir" --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
    --tls-cert-file "$work/tls.crt" --tls-key-file "$work/tls.key" --shutdown-delay 0s >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready "https://127.0.0.1:$PORT/readyz" "$server_pid" "$work/server.log" 60
  served=$(curl -fs "http://127.0.0.1:$ADMIN_PORT/metrics" | sed -n 's/^dco_webhook_registry_entries{state="served"} //p')
  [ "$served" = "$n" ] || { echo "served $served targets of $n"; cat "$work/server.log"; exit 1; }
  sleep "$SETTLE"
  rss=$(kb "$server_pid" VmRSS) peak=$(kb "$server_pid" VmHWM)
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=''
  if [ -z "$first_n" ]; then
    first_n=$n first_rss=$rss
    printf '%6d %10d %10d %14d\n' "$n" "$peak" "$rss" $((input / n))
  else
    awk -v n="$n" -v peak="$peak" -v rss="$rss" -v in_b=$((input / n)) -v n0="$first_n" -v rss0="$first_rss" 'BEGIN {
      per = (rss - rss0) * 1024 / (n - n0)
      printf "%6d %10d %10d %14d %12d %8.1f\n", n, peak, rss, in_b, per, per / in_b }'
  fi
done
