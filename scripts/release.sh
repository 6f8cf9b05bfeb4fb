#!/usr/bin/env bash
# Release spx VERSION: one version for the Python package, the chart (version and appVersion), both
# images and the runbook links; base images pinned by the digests committed in images/base-images.lock,
# Python dependencies by the committed lock files (scripts/lock.sh: images/operator/requirements.lock,
# images/bench/requirements.lock); OCI labels, SBOM and provenance; the bench image's spx layer checked
# inside it (`spx validate` and the vLLM plugin load); both images and the chart signed with cosign
# (keyless: the workflow's OIDC identity, `id-token: write`); the chart packaged with both image
# digests. Run by .github/workflows/release.yml on a tag v<VERSION>, or by hand:
#
#   scripts/release.sh --help            # this text
#   scripts/release.sh --lock-bases      # resolve the base tags to digests into images/base-images.lock
#   scripts/release.sh 0.2.0 --bump      # set VERSION everywhere, commit nothing (review, commit, tag)
#   scripts/release.sh 0.2.0             # build, check, sign and push (REGISTRY=ghcr.io/spx-dev, PUSH=1, SIGN=1)
#
# Needs: docker with buildx (BuildKit: --sbom, --provenance), helm >= 3.8 (OCI push), cosign >= 2
# (SIGN=1; keyless signing needs an OIDC identity: GitHub Actions' id-token, or a browser login by
# hand), and for --lock-bases crane or `docker buildx imagetools`. The vLLM base image (~10 GB, CUDA
# 13) is pulled by the CI runner; it cannot be pulled in the development sandbox, where only --help,
# --bump and the static tests (tests/unit/test_release_versions.py, tests/chart/test_release_static.py) run.
# Exit codes: 0 done, 2 usage or a precondition (dirty tree, stale lock, unresolved base digest).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^# Exit codes/p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
BASES_LOCK=images/base-images.lock
digest_of() {
  if command -v crane >/dev/null; then crane digest "$1"
  else docker buildx imagetools inspect "$1" --format '{{json .Manifest}}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["digest"])'
  fi
}
# the base image of NAME (PYTHON_BASE, VLLM_BASE) from the lock: <tag>@sha256:<64 hex>, or exit 2
locked_base() {
  local ref
  ref=$(sed -n "s/^$1=//p" "$BASES_LOCK")
  [[ $ref =~ ^[^@[:space:]]+@sha256:[0-9a-f]{64}$ ]] \
    || { echo "$BASES_LOCK: $1 is not pinned by digest ('${ref:-missing}'): run scripts/release.sh --lock-bases and commit" >&2; exit 2; }
  echo "$ref"
}
if [ "$1" = --lock-bases ]; then
  tmp=$(mktemp)
  while IFS= read -r line; do
    if [[ $line =~ ^([A-Z_]+)=([^@[:space:]]+) ]]; then
      echo "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}@$(digest_of "${BASH_REMATCH[2]}")"
    else echo "$line"; fi
  done < "$BASES_LOCK" > "$tmp"
  mv "$tmp" "$BASES_LOCK"; cat "$BASES_LOCK"; exit 0
fi
VERSION=$1
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || { echo "VERSION must be semver, got $VERSION" >&2; exit 2; }
REGISTRY=${REGISTRY:-ghcr.io/spx-dev}
PUSH=${PUSH:-1}
SIGN=${SIGN:-$PUSH}
OUT=${RELEASE_OUT:-dist/release-$VERSION}

bump() {
  sed -i -E "s/^version = \"[^\"]+\"/version = \"$VERSION\"/" pyproject.toml
  sed -i -E "s/^__version__ = \"[^\"]+\"/__version__ = \"$VERSION\"/" operator/spx/__init__.py
  sed -i -E "s/^version: .*/version: $VERSION/; s/^appVersion: .*/appVersion: \"$VERSION\"/" charts/spx-operator/Chart.yaml
  sed -i -E "s#/blob/v[^/]+/docs/runbooks/#/blob/v$VERSION/docs/runbooks/#g" charts/spx-operator/rules/spx-rules.yaml \
    tests/observability/spx-rules.test.yaml
  sed -i -E "s/^ARG VERSION=.*/ARG VERSION=$VERSION/" images/operator/Dockerfile images/bench/Dockerfile
  echo "set $VERSION in pyproject.toml, spx/__init__.py, Chart.yaml, the rules' runbook links and both Dockerfiles"
}

if [ "${2:-}" = --bump ]; then bump; exit 0; fi

# 1. one version everywhere (the same check as tests/unit/test_release_versions.py)
python3 - "$VERSION" <<'PY'
import re, sys, tomllib, pathlib
v = sys.argv[1]
found = {
    "pyproject.toml": tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["version"],
    "spx.__version__": re.search(r'__version__ = "([^"]+)"', pathlib.Path("operator/spx/__init__.py").read_text())[1],
    "Chart.yaml version": re.search(r"^version: (\S+)", pathlib.Path("charts/spx-operator/Chart.yaml").read_text(), re.M)[1],
    "Chart.yaml appVersion": re.search(r'^appVersion: "?([^"\n]+)', pathlib.Path("charts/spx-operator/Chart.yaml").read_text(), re.M)[1],
}
bad = {k: x for k, x in found.items() if x != v}
sys.exit(f"not at {v}: {bad}; run scripts/release.sh {v} --bump and commit" if bad else 0)
PY
[ -z "$(git status --porcelain)" ] || { echo "the work tree is not clean: commit first" >&2; exit 2; }
# 2. base images by the digests committed in the lock (not resolved now: a release is rebuilt from the repo)
PYTHON_BASE=$(locked_base PYTHON_BASE)
VLLM_BASE=$(locked_base VLLM_BASE)
VLLM_BASE_TAG=${VLLM_BASE%@*}
echo "bases: $PYTHON_BASE, $VLLM_BASE"
# the Python dependencies come from the committed locks (scripts/lock.sh); the bench one must have been
# resolved with the vllm of the base released on (the bench build's `pip check` then tests it against it)
VLLM_VERSION=${VLLM_BASE_TAG##*:v}
grep -qF -- "[bench] together with vllm==$VLLM_VERSION," images/bench/requirements.lock \
  || { echo "images/bench/requirements.lock was not resolved with vllm==$VLLM_VERSION: run scripts/lock.sh and commit" >&2; exit 2; }
REVISION=$(git rev-parse HEAD)
mkdir -p "$OUT"

# 3. both images: labels from the build args, SBOM and provenance attestations (BuildKit)
build() {  # NAME DOCKERFILE BASE_ARG=VALUE
  local name=$1 dockerfile=$2 base=$3
  docker buildx build -f "$dockerfile" --build-arg "$base" --build-arg "VERSION=$VERSION" \
    --build-arg "REVISION=$REVISION" --sbom=true --provenance=mode=max \
    --metadata-file "$OUT/$name.json" -t "$REGISTRY/$name:$VERSION" \
    "$([ "$PUSH" = 1 ] && echo --push || echo --load)" .
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["containerimage.digest"])' "$OUT/$name.json"
}
OPERATOR_DIGEST=$(build spx-operator images/operator/Dockerfile "PYTHON_BASE=$PYTHON_BASE" | tail -1)
BENCH_DIGEST=$(build spx-bench images/bench/Dockerfile "VLLM_BASE=$VLLM_BASE" | tail -1)

# 3b. sign both images by digest (cosign keyless: the OIDC identity of the run, e.g. the release workflow)
sign() {  # REF@DIGEST
  [ "$SIGN" = 1 ] || return 0
  command -v cosign >/dev/null || { echo "cosign is not installed (SIGN=1): install it or set SIGN=0" >&2; exit 2; }
  cosign sign --yes "$1"
}
sign "$REGISTRY/spx-operator@$OPERATOR_DIGEST"
sign "$REGISTRY/spx-bench@$BENCH_DIGEST"

# 4. the bench image's spx layer on the real vllm==0.33.0: validate an experiment, load the plugin
BENCH="$REGISTRY/spx-bench@$BENCH_DIGEST"
docker run --rm -v "$PWD/examples:/examples:ro" "$BENCH" validate /examples/deepseek-v41-tp8.yaml
docker run --rm --entrypoint python3 -e SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=2048 "$BENCH" -c '
import importlib.metadata as md, vllm
assert vllm.__version__ == "0.33.0", vllm.__version__
(ep,) = [e for e in md.entry_points(group="vllm.general_plugins") if e.name == "spx_shard_threshold"]
ep.load()()
print("spx plugin loaded into vLLM", vllm.__version__)'
docker run --rm "$REGISTRY/spx-operator@$OPERATOR_DIGEST" operator --help >/dev/null

# 5. the chart, with both digests as its defaults
cp -r charts/spx-operator "$OUT/chart"
python3 - "$OUT/chart/values.yaml" "$OPERATOR_DIGEST" "$BENCH_DIGEST" <<'PY'
import re, sys, pathlib
p, op, bench = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
text = p.read_text()
text = re.sub(r'(^image:\n(?:  .*\n)*?  digest: )""', rf'\g<1>"{op}"', text, count=1, flags=re.M)
text = re.sub(r'(^bench:\n  image:\n(?:    .*\n)*?    digest: )""', rf'\g<1>"{bench}"', text, count=1, flags=re.M)
assert op in text and bench in text, "could not write the digests into values.yaml"
p.write_text(text)
PY
helm lint --strict "$OUT/chart"
helm package "$OUT/chart" --version "$VERSION" --app-version "$VERSION" -d "$OUT"
if [ "$PUSH" = 1 ]; then
  helm push "$OUT/spx-operator-$VERSION.tgz" "oci://$REGISTRY/charts" 2>&1 | tee "$OUT/helm-push.log"
  CHART_DIGEST=$(sed -n 's/^Digest: //p' "$OUT/helm-push.log")
  sign "$REGISTRY/charts/spx-operator@$CHART_DIGEST"
fi

# 6. the tag the runbook links point at
git rev-parse -q --verify "refs/tags/v$VERSION" >/dev/null || git tag -a "v$VERSION" -m "spx $VERSION"
echo "released $VERSION: operator $OPERATOR_DIGEST, bench $BENCH_DIGEST, chart $OUT/spx-operator-$VERSION.tgz"
