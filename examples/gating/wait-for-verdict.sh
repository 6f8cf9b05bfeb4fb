#!/usr/bin/env bash
# Gate a rollout on a ShardedProjectionExperiment with kubectl only.
#
#   examples/gating/wait-for-verdict.sh NAME [NAMESPACE] [TIMEOUT]
#
# Waits for the terminal `Decided` condition (the operator sets it on every outcome: Pass, Fail,
# Inconclusive, and also InvalidSpec / BenchmarkFailed / InfraFailed), checks that it describes the
# current spec (observedGeneration), then reads the Decided reason (the verdict field alone is not
# trusted). Exit codes, the same table as `spx gate` (docs/cli.md):
#   0  Pass
#   1  Fail
#   2  Inconclusive, decided without a verdict (InvalidSpec, BenchmarkFailed, InfraFailed), or not
#      decided within TIMEOUT
#   3  usage: no NAME, too many arguments, or no such experiment
#   4  unreachable: kubectl cannot reach the cluster or is refused access
# Environment: KUBECTL (default kubectl), and kubectl's own (KUBECONFIG, ...).
set -uo pipefail

EXIT_UNDECIDED=2 EXIT_USAGE=3 EXIT_UNREACHABLE=4
if [[ $# -lt 1 || $# -gt 3 || -z "${1:-}" || "${1:-}" == -* ]]; then
  echo "usage: $0 NAME [NAMESPACE] [TIMEOUT]" >&2
  exit "$EXIT_USAGE"
fi
name=$1
namespace=${2:-default}
timeout=${3:-2h}
kubectl=${KUBECTL:-kubectl}
resource="shardedprojectionexperiments.bench.spx.dev/${name}"

# Reachable, and does it exist? (NotFound is a usage error: a typo; anything else: unreachable.)
if ! err=$("$kubectl" get --namespace "$namespace" "$resource" -o name 2>&1 >/dev/null); then
  err=${err##*$'\n'}  # kubectl's last line says what happened
  if [[ "$err" == *NotFound* || "$err" == *"not found"* || "$err" == *"Not Found"* ]]; then
    echo "No such experiment: ${namespace}/${name}: ${err}" >&2
    exit "$EXIT_USAGE"
  fi
  echo "Unreachable: cannot read ${namespace}/${name}: ${err}" >&2
  exit "$EXIT_UNREACHABLE"
fi

# `kubectl wait` waits for one condition only and would hang on one that never comes
# (kubernetes#100248): Decided is set on every terminal outcome, so it always comes.
if ! "$kubectl" wait --namespace "$namespace" --for=condition=Decided --timeout="$timeout" "$resource" >&2; then
  echo "Undecided: ${namespace}/${name} not decided within ${timeout}" >&2
  exit "$EXIT_UNDECIDED"
fi

get() { "$kubectl" get --namespace "$namespace" "$resource" -o "jsonpath=$1"; }
generation=$(get '{.metadata.generation}') || exit "$EXIT_UNREACHABLE"
observed=$(get '{.status.observedGeneration}') || exit "$EXIT_UNREACHABLE"
if [[ -n "$generation" && -n "$observed" && "$observed" -lt "$generation" ]]; then
  echo "Undecided: ${namespace}/${name} status is for generation ${observed}, the spec is at ${generation}" >&2
  exit "$EXIT_UNDECIDED"
fi
phase=$(get '{.status.phase}') || exit "$EXIT_UNREACHABLE"
reason=$(get '{.status.conditions[?(@.type=="Decided")].reason}') || exit "$EXIT_UNREACHABLE"
reasons=$(get '{.status.verdictReasons}') || true
if [[ "$phase" != Succeeded && "$phase" != Failed ]]; then
  echo "Undecided: ${namespace}/${name} Decided is set but the phase is ${phase:-unset}" >&2
  exit "$EXIT_UNDECIDED"
fi

case "$reason" in
  Pass) echo "Pass: ${namespace}/${name} ${reasons}"; exit 0 ;;
  Fail) echo "Fail: ${namespace}/${name} ${reasons}"; exit 1 ;;
  Inconclusive) echo "Inconclusive: ${namespace}/${name} ${reasons}"; exit "$EXIT_UNDECIDED" ;;
  *) echo "No verdict (${reason:-unknown}): ${namespace}/${name}" >&2; exit "$EXIT_UNDECIDED" ;;
esac
