#!/usr/bin/env bash
# Build the operator image without a container engine daemon, then run its entry point's --help.
#
#   bash images/build-oci.sh            # needs root, buildah and debootstrap (Debian: apt-get install buildah debootstrap)
#
# - base: Debian bookworm made by debootstrap (oci-base.sh: minbase + python3.11, python3-venv, python-is-python3,
#   ca-certificates; kept in SPX_OCI_CACHE for build-bench-oci.sh), imported into buildah and tagged docker.io/library/python:3.11-slim-bookworm in
#   a private storage, so images/operator/Dockerfile builds unchanged with --pull-never. It stands in
#   for the official python image (Python from Debian's packages in /usr/bin, not /usr/local), which
#   cannot be pulled here;
# - buildah with chroot isolation and the vfs storage driver: no daemon, no overlay or user namespaces;
# - the image's own ENTRYPOINT and USER are read back and run with --help (and `operator --help`).
# Everything lives under one work folder (SPX_OCI_WORK, default a new /tmp/spx-oci.*), removed at the
# end unless SPX_OCI_KEEP=1. Measured on a 2-core CI machine: about 1.5 min for the base, 1 min for
# the image (the pip install of the operator's dependencies from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=images/oci-base.sh
source images/oci-base.sh
oci_preamble spx-oci  # buildah, debootstrap and root checked; WORK (made) and MIRROR set
B=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)
export BUILDAH_ISOLATION=chroot
cleanup() { if [ "${SPX_OCI_KEEP:-0}" != 1 ]; then "${B[@]}" rm -a >/dev/null 2>&1 || true; rm -rf "$WORK"; fi; }
trap cleanup EXIT
t0=$(date +%s)

oci_base
"${B[@]}" tag localhost/spx-base:bookworm docker.io/library/python:3.11-slim-bookworm
t1=$(date +%s)
echo "   base ready in $((t1 - t0)) s"

echo "== build images/operator/Dockerfile (buildah, chroot isolation, vfs)"
"${B[@]}" bud --isolation chroot --pull-never --layers=false -q -f images/operator/Dockerfile \
  -t localhost/spx-operator:test . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; exit 1; }
t2=$(date +%s)
echo "   image built in $((t2 - t1)) s"

echo "== run the image's entry point with --help, as the image's user"
config=$("${B[@]}" inspect --type image localhost/spx-operator:test)
read -r -a entrypoint < <(python3 -c 'import json,sys; c=json.load(sys.stdin)["OCIv1"]["config"]; print(" ".join(c["Entrypoint"]))' <<<"$config")
user=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["OCIv1"]["config"]["User"])' <<<"$config")
echo "   ENTRYPOINT ${entrypoint[*]}, USER $user"
ctr=$("${B[@]}" from localhost/spx-operator:test)
"${B[@]}" run --user "$user" "$ctr" -- "${entrypoint[@]}" --help
"${B[@]}" run --user "$user" "$ctr" -- "${entrypoint[@]}" operator --help | head -3
"${B[@]}" run --user "$user" "$ctr" -- id
"${B[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep spx-operator
echo "== done in $(( $(date +%s) - t0 )) s"
