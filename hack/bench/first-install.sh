#!/usr/bin/env bash
# hack/bench/first-install.sh [RUNS] — first installs of charts/dco into freshly restarted local
# clusters, as a new user's `helm install` (docs/installation.md, "Install"): each run restarts
# hack/testenv (an empty cluster), installs the chart with its default values (bindPodIP, which
# the local cluster needs, and the workspace's binaries as the images), and waits for the
# default server to be Available. Prints one line per run and a summary; exits non-zero if any
# install failed. Restarting the cluster stops everything running on it: run it alone.
# Environment: DCO_BENCH_HELM (a helm binary, default the local cluster's helm 3).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS="${1:-10}"
OUT="${DCO_TESTENV_DIR:-$PWD/target/testenv}"
export KUBECONFIG="$OUT/kubeconfig"
K="$OUT/bin/kubectl"
HELM="${DCO_BENCH_HELM:-$OUT/bin/helm}"
NS=dco-system
TAG=first-install
WORK="$OUT/tmp/first-install"
mkdir -p "$WORK"

cargo build -q -p dco-operator -p dco-webhook
cat >"$WORK/values.yaml" <<EOF
bindPodIP: true
image: {tag: $TAG}
webhookImage: {tag: $TAG}
EOF

failed=0
printf '%-4s %-8s %-12s %-14s %s\n' run result "helm (s)" "available (s)" note
for i in $(seq 1 "$RUNS"); do
  hack/testenv restart >"$WORK/testenv-$i.log" 2>&1
  for bin in dco-operator dco-webhook; do hack/testenv image "$bin:$TAG=$PWD/target/debug/$bin" >/dev/null; done
  t0=$(date +%s.%N)
  if "$HELM" install dco charts/dco --namespace "$NS" --create-namespace --values "$WORK/values.yaml" \
    --wait --timeout 5m >"$WORK/helm-$i.log" 2>&1; then
    t1=$(date +%s.%N)
    result=ok note=""
    until [ "$("$K" get cws default -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]; do
      if awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { exit !(a - b > 180) }'; then result=FAILED note="default server not Available"; break; fi
      sleep 0.2
    done
    t2=$(date +%s.%N)
    grep -q '^Warning' "$WORK/helm-$i.log" && note="$note helm warned: $(grep '^Warning' "$WORK/helm-$i.log" | head -n 1)"
  else
    t1=$(date +%s.%N) t2=$t1 result=FAILED note="$(tr '\n' ' ' <"$WORK/helm-$i.log" | cut -c1-200)"
  fi
  [ "$result" = ok ] || failed=$((failed + 1))
  printf '%-4s %-8s %-12.1f %-14.1f %s\n' "$i" "$result" "$(awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }')" "$(awk -v a="$t2" -v b="$t0" 'BEGIN { print a - b }')" "$note"
done
echo "$((RUNS - failed)) of $RUNS first installs succeeded"
[ "$failed" -eq 0 ]
