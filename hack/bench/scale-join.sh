#!/usr/bin/env bash
# What dco asks of the apiserver when idle, and a sixth server joining a pool of five
# (docs/performance.md, "Scale: idle requests and a sixth server joining"):
#
#   hack/bench/scale-join.sh                     # TARGETS=1000 POOL=5 OPERATORS=3 QPS=50
#   TARGETS=300 IDLE=60 SAMPLE=10 hack/bench/scale-join.sh
#   PROFILE=release hack/bench/scale-join.sh     # dco-operator and dco-webhook built --release
#
# On a local cluster of its own (target/testenv-scale, one apiserver with its audit log on,
# Pod IPs 127.0.7.x; the shared cluster is not touched), with PROFILE (debug) builds of
# dco-operator and dco-webhook (OPERATORS local processes, the servers' replicas its Pods): TARGETS small
# targets with unpinned configs settle over POOL sharded servers of 2 replicas; then the
# requests dco makes over IDLE quiet seconds, counted from the audit log by client, verb and
# resource; then one more server joins while a load writes and reads SAMPLE moving and SAMPLE
# staying targets (tests/examples/scale_join.rs prints the tables). Everything of the run,
# the cluster included, is deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh
DIR=$PWD/target/testenv-scale
PROFILE=${PROFILE:-debug}
# Two builds: `--example` would narrow the first to the example and leave stale binaries.
case $PROFILE in
  debug) cargo build -q -p dco-operator -p dco-webhook ;;
  release) cargo build -q --release -p dco-operator -p dco-webhook ;;
  *) echo "scale-join.sh: PROFILE is debug or release, not '$PROFILE'" >&2; exit 2 ;;
esac
cargo build -q -p dco-tests --example scale_join
export DCO_BIN_PROFILE=$PROFILE
mkdir -p "$DIR"
cat >"$DIR/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
POLICY
trap 'own_cluster_stop "$DIR"' EXIT
trap "exit 130" INT TERM
rm -f "$DIR/audit.log"
own_cluster_up "$DIR" 127.0.7.2-127.0.7.254 "--audit-log-path=$DIR/audit.log" \
  "--audit-policy-file=$DIR/audit-policy.yaml" --audit-log-maxsize=0
echo "conditions: $PROFILE builds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
AUDIT_LOG="$DIR/audit.log" target/debug/examples/scale_join
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
