#!/bin/sh
# Fleet CI for dco conversion configs (docs/convctl.md, "Fleet CI"): before a merge, every
# config of the repository is linted offline, then tested against and compared with every
# cluster of the fleet.
#
#   fleet-ci.sh CONFIG_DIR FLEET_DIR
#
# CONFIG_DIR  the tree holding the configs (and, for lint, their CRDs/XRDs).
# FLEET_DIR   one kubeconfig file per cluster (its current context is used); hidden files,
#             READMEs and *.md are skipped.
#
# Environment: CONVCTL (the binary, default convctl), REPORT_DIR (JUnit reports, default
# ./convctl-reports), MAX_SAMPLES (objects per served version per cluster, default 100).
#
# Exit: 0 every check is clean on every cluster; 1 a finding somewhere (a lint error, a round
# trip that loses data, a config that differs from the deployed one, a cluster that cannot be
# reached); 2 a usage or input error (a flag, an unreadable file). The worst code wins.
set -u

configs=${1:?usage: fleet-ci.sh CONFIG_DIR FLEET_DIR}
fleet=${2:?usage: fleet-ci.sh CONFIG_DIR FLEET_DIR}
convctl=${CONVCTL:-convctl}
reports=${REPORT_DIR:-convctl-reports}
samples=${MAX_SAMPLES:-100}
mkdir -p "$reports" || exit 2

worst=0
# Records a step's exit code: 2 beats 1 beats 0.
record() {
    if [ "$1" -gt "$worst" ]; then worst=$1; fi
    if [ "$1" -ne 0 ]; then echo "fleet-ci: $2 exited $1" >&2; fi
}

"$convctl" lint "$configs" -o junit --output-file "$reports/lint.xml"
record $? "convctl lint $configs"

# Every YAML file whose top-level kind is a dco config; its target's name from targetCRD/targetXRD.
found=0
for cfg in $(grep -rlE --include='*.yaml' --include='*.yml' '^kind: *(CRD|XRD)ConversionConfig' "$configs" | sort); do
    found=1
    kind=$(sed -n 's/^kind: *\([A-Z]*\)ConversionConfig.*/\1/p' "$cfg" | head -n 1)
    target=$(awk '/^ *target(CRD|XRD): *$/ {t = 1; next} t && /name:/ {print $2; exit}' "$cfg")
    flag=--crd
    if [ "$kind" = XRD ]; then flag=--xrd; fi
    if [ -z "$target" ]; then
        echo "fleet-ci: $cfg: no spec.targetCRD.name or spec.targetXRD.name found" >&2
        record 2 "reading $cfg"
        continue
    fi
    base=$(basename "$cfg" | sed 's/\.ya\{0,1\}ml$//')

    "$convctl" test --live -c "$cfg" "$flag" "$target" --kubeconfig-dir "$fleet" \
        --max-samples "$samples" --quiet -o junit --output-file "$reports/test-$base.xml"
    record $? "convctl test --live -c $cfg"

    "$convctl" diff --live -c "$cfg" --kubeconfig-dir "$fleet"
    record $? "convctl diff --live -c $cfg"
done
if [ "$found" -eq 0 ]; then
    echo "fleet-ci: no CRDConversionConfig or XRDConversionConfig under $configs" >&2
    record 2 "finding configs"
fi
exit "$worst"
