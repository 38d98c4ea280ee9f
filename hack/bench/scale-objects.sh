#!/usr/bin/env bash
# A move of one target with 100,000 objects (docs/performance.md, "Scale: a move of a target
# with 100,000 objects"):
#
#   hack/bench/scale-objects.sh                  # OBJECTS=100000 JOBS=8
#   OBJECTS=20000 hack/bench/scale-objects.sh
#
# On a local cluster of its own (target/testenv-scale-objects, one apiserver, Pod IPs
# 127.0.9.x; the shared cluster is not touched), with debug builds of dco-operator and
# dco-webhook: one operator, servers A and B of 2 replicas; the target (pinned to A) gets
# OBJECTS objects at its storage version from JOBS parallel `kubectl create` (as
# hack/bench/convctl-live.sh does), then its pin moves to B under a load on the target, while
# full and first-page LISTs at the spoke and the storage version are timed
# (tests/examples/scale_objects.rs prints the tables). Everything of the run, the cluster
# included, is deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. hack/bench/lib.sh
DIR=$PWD/target/testenv-scale-objects
cargo build -q -p dco-operator -p dco-webhook -p dco-tests --example scale_objects
trap 'own_cluster_stop "$DIR"' EXIT
trap "exit 130" INT TERM
own_cluster_up "$DIR" 127.0.9.2-127.0.9.254
echo "conditions: debug builds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
target/debug/examples/scale_objects
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
