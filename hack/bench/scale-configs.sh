#!/usr/bin/env bash
# 10,000 configs on 3 operator replicas (docs/performance.md, "Scale: 10,000 configs on 3
# operator replicas"): the time until every config has a status after a cold start of all
# replicas and after one is killed, and the replicas' memory and CPU per config.
#
#   hack/bench/scale-configs.sh                  # CONFIGS=10000 REAL=20 OPERATORS=3 IDLE=60
#   CONFIGS=2000 hack/bench/scale-configs.sh
#   SKIP_BUILD=1 hack/bench/scale-configs.sh     # the binaries already built
#
# On a local cluster of its own (target/testenv-scale-configs, one apiserver, Pod IPs
# 127.0.8.x; the shared cluster is not touched), with debug builds of dco-operator and
# dco-webhook: REAL configs name CRDs that exist (one server of 2 replicas serves them), the
# rest name absent CRDs (tests/examples/scale_configs.rs prints the tables). Everything of the
# run, the cluster included, is deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh
DIR=$PWD/target/testenv-scale-configs
[ -n "${SKIP_BUILD:-}" ] || cargo build -q -p dco-operator -p dco-webhook -p dco-tests --example scale_configs
trap 'own_cluster_stop "$DIR"' EXIT
trap "exit 130" INT TERM
own_cluster_up "$DIR" 127.0.8.2-127.0.8.254
echo "conditions: debug builds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
target/debug/examples/scale_configs
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
