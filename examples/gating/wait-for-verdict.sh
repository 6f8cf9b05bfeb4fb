#!/usr/bin/env bash
# Gate a rollout on a ShardedProjectionExperiment with kubectl only.
#
#   examples/gating/wait-for-verdict.sh NAME [NAMESPACE] [TIMEOUT]
#
# Waits for the terminal `Decided` condition (the operator sets it on every outcome: Pass, Fail,
# Inconclusive, and also InvalidSpec / BenchmarkFailed / InfraFailed), checks that it describes the
# current spec (observedGeneration), then reads .status.verdict. Exit codes, the same as `spx gate`:
#   0  Pass
#   1  Fail
#   2  Inconclusive, decided without a verdict, not decided within TIMEOUT, or unreadable (a usage
#      error, the API server unreachable, no such experiment): never the Fail code
# Environment: KUBECTL (default kubectl), and kubectl's own (KUBECONFIG, ...).
set -uo pipefail

if [[ $# -lt 1 || $# -gt 3 || -z "${1:-}" || "${1:-}" == -* ]]; then
  echo "usage: $0 NAME [NAMESPACE] [TIMEOUT]   (exit 0 Pass, 1 Fail, 2 anything else)" >&2
  exit 2
fi
name=$1
namespace=${2:-default}
timeout=${3:-2h}
kubectl=${KUBECTL:-kubectl}
resource="shardedprojectionexperiments.bench.spx.dev/${name}"

# `kubectl wait` waits for one condition only and would hang on one that never comes
# (kubernetes#100248): Decided is set on every terminal outcome, so it always comes.
if ! out=$("$kubectl" wait --namespace "$namespace" --for=condition=Decided --timeout="$timeout" "$resource" 2>&1); then
  if [[ "$out" == *"timed out waiting for the condition"* ]]; then
    echo "Undecided: ${namespace}/${name} not decided within ${timeout}" >&2
  else
    echo "Unreadable: cannot read ${namespace}/${name}: ${out}" >&2
  fi
  exit 2
fi

get() { "$kubectl" get --namespace "$namespace" "$resource" -o "jsonpath=$1"; }
generation=$(get '{.metadata.generation}') || exit 2
observed=$(get '{.status.observedGeneration}') || exit 2
if [[ -n "$generation" && -n "$observed" && "$observed" -lt "$generation" ]]; then
  echo "Undecided: ${namespace}/${name} status is for generation ${observed}, the spec is at ${generation}" >&2
  exit 2
fi
verdict=$(get '{.status.verdict}') || exit 2
reason=$(get '{.status.conditions[?(@.type=="Decided")].reason}') || exit 2
reasons=$(get '{.status.verdictReasons}') || true

case "$verdict" in
  Pass) echo "Pass: ${namespace}/${name} ${reasons}"; exit 0 ;;
  Fail) echo "Fail: ${namespace}/${name} ${reasons}"; exit 1 ;;
  Inconclusive) echo "Inconclusive: ${namespace}/${name} ${reasons}"; exit 2 ;;
  *) echo "No verdict (${reason:-unknown}): ${namespace}/${name}" >&2; exit 2 ;;
esac
