#!/usr/bin/env bash
# Sourced by build-oci.sh and build-bench-oci.sh, which share two steps:
#   oci_preamble PREFIX: the checks and the work folder both builds start with (below);
#   oci_base (after they set the buildah command B): makes the Debian bookworm base both image builds
#   start from, and tags it localhost/spx-base:bookworm in their private storage.
#
# debootstrap --variant=minbase with python3.11, python3-venv, python-is-python3, ca-certificates (Python
# from Debian's packages in /usr/bin), plus the host's CA bundle (pip in the builds must trust what the
# host trusts, e.g. a TLS-inspecting proxy). One debootstrap serves every build: the root filesystem is
# kept as a tarball in SPX_OCI_CACHE (default ${TMPDIR:-/tmp}/spx-oci-cache), keyed by oci_base's own
# text and the mirror, so the operator build (tests/chart/test_image_build.py, main stage) makes it
# and the bench build (tests/chart/test_bench_image_build.py, vllm stage) of the same CI run reuses it.
# SPX_OCI_BASE_REBUILD=1 makes it again. ~60-90 s on a 2-core machine when not cached.

# buildah and debootstrap installed and root (else exit 2, saying what to install or do); WORK: SPX_OCI_WORK,
# made if it does not exist yet, or a new /tmp/PREFIX.XXXXXX; MIRROR: SPX_DEBIAN_MIRROR or Debian's own.
oci_preamble() {
  local tool
  for tool in buildah debootstrap; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install buildah debootstrap)" >&2; exit 2; }
  done
  [ "$(id -u)" = 0 ] || { echo "needs root (debootstrap, buildah's chroot isolation)" >&2; exit 2; }
  WORK=${SPX_OCI_WORK:-$(mktemp -d "/tmp/$1.XXXXXX")}
  mkdir -p "$WORK"  # a given SPX_OCI_WORK need not exist yet
  MIRROR=${SPX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
}

oci_base() {
  local cache key tarball rootfs ctr
  cache=${SPX_OCI_CACHE:-${TMPDIR:-/tmp}/spx-oci-cache}
  key=$( { declare -f oci_base; echo "$MIRROR"; } | sha256sum | cut -c1-16)
  tarball="$cache/bookworm-python3.11-$key.tar"
  mkdir -p "$cache"
  if [ ! -s "$tarball" ] || [ "${SPX_OCI_BASE_REBUILD:-0}" = 1 ]; then
    rootfs="$WORK/rootfs"
    echo "== base: debootstrap bookworm (minbase + python3.11) into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
      bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; return 1; }
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp.$$" . && mv "$tarball.tmp.$$" "$tarball"
    rm -rf "$rootfs"
  else
    echo "== base: reusing $tarball (debootstrap of this CI run; SPX_OCI_BASE_REBUILD=1 makes it again)"
  fi
  ctr=$("${B[@]}" from scratch)
  tar -C "$("${B[@]}" mount "$ctr")" --numeric-owner -xf "$tarball"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd '["python3"]' "$ctr"
  "${B[@]}" commit -q --rm "$ctr" localhost/spx-base:bookworm >/dev/null
}
