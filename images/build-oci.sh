#!/usr/bin/env bash
# Build the operator image without a container engine daemon, then run its entry point's --help.
#
#   bash images/build-oci.sh            # needs root, buildah and debootstrap (Debian: apt-get install buildah debootstrap)
#
# - base: Debian bookworm made by debootstrap (minbase + python3.11, python3-venv, python-is-python3,
#   ca-certificates), imported into buildah and tagged docker.io/library/python:3.11-slim-bookworm in
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
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install buildah debootstrap)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "needs root (debootstrap, buildah's chroot isolation)" >&2; exit 2; }
WORK=${SPX_OCI_WORK:-$(mktemp -d /tmp/spx-oci.XXXXXX)}
mkdir -p "$WORK"  # a given SPX_OCI_WORK need not exist yet
MIRROR=${SPX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
B=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)
export BUILDAH_ISOLATION=chroot
cleanup() { if [ "${SPX_OCI_KEEP:-0}" != 1 ]; then "${B[@]}" rm -a >/dev/null 2>&1 || true; rm -rf "$WORK"; fi; }
trap cleanup EXIT
t0=$(date +%s)

echo "== base: debootstrap bookworm (minbase + python3.11) into $WORK/rootfs"
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
# the host's CA bundle: pip in the build must trust what the host trusts (e.g. a TLS-inspecting proxy)
cp /etc/ssl/certs/ca-certificates.crt "$WORK/rootfs/etc/ssl/certs/ca-certificates.crt"
rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
ctr=$("${B[@]}" from scratch)
cp -a "$WORK/rootfs/." "$("${B[@]}" mount "$ctr")/"
"${B[@]}" umount "$ctr" >/dev/null
"${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
  --cmd '["python3"]' "$ctr"
"${B[@]}" commit -q --rm "$ctr" localhost/spx-base:bookworm >/dev/null
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
