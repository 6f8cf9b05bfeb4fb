#!/usr/bin/env bash
# Build the bench image's spx layer (images/bench/Dockerfile, unchanged) without a daemon, on a base that
# holds the real vllm==0.33.0 package, then run inside the built image `spx validate` on the V4.1 example
# and vLLM's own plugin load.
#
#   bash images/build-bench-oci.sh      # needs root, buildah and debootstrap (Debian: apt-get install buildah debootstrap)
#
# THE BASE IS A STAND-IN: the real vllm/vllm-openai:v0.33.0 (~10 GB, CUDA) cannot be pulled on the
# machines CI runs on. images/bench/vllm-standin.Containerfile makes one instead: the Debian bookworm
# base of build-oci.sh (images/oci-base.sh, one debootstrap per CI run) + pip + the real vllm==0.33.0
# installed on CPU by scripts/setup_vllm.sh (CPU torch 2.13.0, vLLM's GPU-only requirements left out),
# system-wide in /usr/local as the real image has it. It is tagged docker.io/vllm/vllm-openai:v0.33.0
# in a private storage, so the bench Dockerfile's FROM resolves to it with --pull-never.
#
# pip inside the builds uses this machine's pip configuration (`pip config list`: index URLs,
# find-links, constraints; the folders of local file:// indexes and find-links are bind-mounted
# read-only at the same paths) and this machine's pip cache folder (bind-mounted, so whatever pip
# caches stays out of the image). Mounts are not part of the images. Storage: overlay where the kernel
# has it, else vfs (SPX_OCI_STORAGE_DRIVER overrides); vfs copies the ~3.7 GB tree for every layer and
# container and takes about twice as long.
#
# Checks, in the built image as its USER, with its ENTRYPOINT, scratch at /var/run/spx as the Job
# mounts it (spx.controller.manifests.pod_security) and VLLM_TARGET_DEVICE=cpu (no GPU here):
#   the installed version of every package images/bench/requirements.lock pins (printed; the test compares);
#   spx validate examples/deepseek-v41-tp8.yaml (mounted at /etc/spx/experiment.yaml; the check is its
#   "valid" line and exit status, the normalised document it prints goes to $WORK/validate.out);
#   vllm.plugins.load_general_plugins() sets vllm.models.deepseek_v41.attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS
#   from SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS (the entry point spx installs, found by vLLM);
#   `vllm serve` (vLLM's CLI, loading plugins as it starts) logs the threshold the plugin set.
# Everything lives under one work folder (SPX_OCI_WORK, default a new /tmp/spx-oci-bench.*), removed at
# the end unless SPX_OCI_KEEP=1. Each step prints its time. Measured on this 2-core machine while other
# jobs ran (load 3-8), overlay storage, base reused from the operator build: 9 min (stand-in base 6.6 min
# of which setup_vllm.sh 3 min, bench layer 1.1 min, checks 35 s); debootstrap adds 1-4 min when not cached.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=images/oci-base.sh
source images/oci-base.sh
oci_preamble spx-oci-bench  # buildah, debootstrap and root checked; WORK (made) and MIRROR set
PY=${PYTHON:-python3}
# overlay where the kernel has it (no copy of the ~3 GB vLLM tree per layer and container), else vfs
DRIVER=${SPX_OCI_STORAGE_DRIVER:-$(grep -qw overlay /proc/filesystems && echo overlay || echo vfs)}
B=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver "$DRIVER")
export BUILDAH_ISOLATION=chroot
cleanup() {
  if [ "${SPX_OCI_KEEP:-0}" != 1 ]; then
    "${B[@]}" rm -a >/dev/null 2>&1 || true
    "${B[@]}" rmi -a -f >/dev/null 2>&1 || true
    umount "$WORK/storage/overlay" 2>/dev/null || true  # containers/storage's private bind mount, if still there
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
t0=$(date +%s)
step() { local now; now=$(date +%s); echo "   $1 in $((now - t0)) s"; t0=$now; }

oci_base
step "base ready"

# this machine's pip configuration as one /etc/pip.conf, and the local paths it names
"$PY" - "$WORK/pip.conf" "$WORK/pip-paths" <<'EOF'
import os, subprocess, sys
from urllib.parse import urlparse

out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
conf: dict[str, str] = {}
for line in out.splitlines():  # "global.find-links='/opt/wheels'", ":env:.find-links='/opt/wheels'" (env wins: listed last)
    key, _, value = line.partition("=")
    conf[key.rsplit(".", 1)[1]] = value.strip("'\"")
paths = set()
for key in ("index-url", "extra-index-url", "find-links", "constraint", "requirement", "cert"):
    for item in conf.get(key, "").split():
        path = urlparse(item).path if item.startswith("file:") else item
        if key.endswith("index-url"):  # a local index's pages link to its files beside it (../../files/...)
            path = os.path.dirname(path.rstrip("/"))
        if path.startswith("/") and os.path.exists(path):
            paths.add(os.path.realpath(path))
with open(sys.argv[1], "w") as f:
    f.write("[global]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(conf.items())))
with open(sys.argv[2], "w") as f:
    f.write("".join(f"{p}\n" for p in sorted(paths)))
EOF
echo "== pip inside the builds: $(tr '\n' ' ' <"$WORK/pip.conf")"
mounts=(-v "$WORK/pip.conf:/etc/pip.conf:ro")
while read -r path; do mounts+=(-v "$path:$path:ro"); done <"$WORK/pip-paths"
cache=$("$PY" -m pip cache dir 2>/dev/null || true)
if [ -n "$cache" ]; then mkdir -p "$cache"; mounts+=(-v "$cache:/root/.cache/pip"); fi

echo "== stand-in base: images/bench/vllm-standin.Containerfile (the real vllm==0.33.0 on CPU; the vLLM image cannot be pulled here)"
"${B[@]}" bud --isolation chroot --pull-never --layers=false --format docker "${mounts[@]}" -f images/bench/vllm-standin.Containerfile \
  -t localhost/vllm-openai-standin:v0.33.0 . >"$WORK/standin.log" 2>&1 || { tail -40 "$WORK/standin.log" >&2; exit 1; }
grep -E '^setup_vllm.sh:' "$WORK/standin.log" || true
"${B[@]}" tag localhost/vllm-openai-standin:v0.33.0 docker.io/vllm/vllm-openai:v0.33.0
step "stand-in base built"

echo "== build images/bench/Dockerfile on it (buildah, chroot isolation, $DRIVER storage, --pull-never)"
"${B[@]}" bud --isolation chroot --pull-never --layers=false --format docker "${mounts[@]}" -f images/bench/Dockerfile \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -t localhost/spx-bench:test . >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; exit 1; }
step "bench image built"

echo "== inside the bench image"
config=$("${B[@]}" inspect --type image localhost/spx-bench:test)
read -r -a entrypoint < <("$PY" -c 'import json,sys; c=json.load(sys.stdin)["OCIv1"]["config"]; print(" ".join(c["Entrypoint"]))' <<<"$config")
user=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["OCIv1"]["config"]["User"])' <<<"$config")
echo "   ENTRYPOINT ${entrypoint[*]}, USER $user"
mkdir -p "$WORK/scratch"
chown "$user" "$WORK/scratch"
ctr=$("${B[@]}" from localhost/spx-bench:test)
run=("${B[@]}" run --user "$user" --env VLLM_TARGET_DEVICE=cpu --env HF_HUB_OFFLINE=1
     -v "$WORK/scratch:/var/run/spx" -v "$PWD/examples/deepseek-v41-tp8.yaml:/etc/spx/experiment.yaml:ro"
     -v "$PWD/images/bench/requirements.lock:/etc/spx/requirements.lock:ro" "$ctr" --)
"${run[@]}" python3 -c 'import importlib.metadata as m; print("   versions: " + ", ".join(f"{p} {m.version(p)}" for p in ("vllm", "torch", "numpy", "spx-operator")))'
# what is installed of each package images/bench/requirements.lock pins (the test compares it with the lock)
"${run[@]}" python3 - <<'EOF'
import importlib.metadata as m, re

names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", open("/etc/spx/requirements.lock").read(), re.M)
print("   installed of the lock: " + " ".join(f"{n}=={m.version(n)}" for n in names))
EOF
"${run[@]}" "${entrypoint[@]}" validate /etc/spx/experiment.yaml >"$WORK/validate.out"
"${run[@]}" python3 - <<'EOF'
import importlib, os
from importlib.metadata import entry_points

from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_general_plugins

found = {ep.name: ep.value for ep in entry_points(group=DEFAULT_PLUGINS_GROUP)}
print(f"   entry points in {DEFAULT_PLUGINS_GROUP}: {found}")
os.environ["SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS"] = "4096"
load_general_plugins()
attention = importlib.import_module("vllm.models.deepseek_v41.attention")
assert attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS == 4096, attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS
print(f"   load_general_plugins: _SHARD_FUSED_WQA_WKV_MIN_TOKENS = {attention._SHARD_FUSED_WQA_WKV_MIN_TOKENS}")
EOF
# vLLM's CLI loads the plugins while it builds its parser, then stops at the model that is not there
serve_rc=0
"${run[@]}" env SPX_SHARD_FUSED_WQA_WKV_MIN_TOKENS=off vllm serve /var/run/spx/no-model --port 0 >"$WORK/serve.log" 2>&1 || serve_rc=$?
line=$(grep -F "_SHARD_FUSED_WQA_WKV_MIN_TOKENS = 2147483647 (off (never split); was 2048)" "$WORK/serve.log" | head -1 || true)
if [ -z "$line" ] || ! grep -qF "non-default args" "$WORK/serve.log"; then
  echo "vllm serve did not log the plugin's threshold and go on to parse its arguments:" >&2; tail -30 "$WORK/serve.log" >&2; exit 1
fi
echo "   vllm serve: $line"
echo "   vllm serve stopped at the missing model (exit $serve_rc), as expected"
"${B[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -E 'spx-bench|standin'
step "checks ran"
echo "== done"
