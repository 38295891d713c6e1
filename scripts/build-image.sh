#!/usr/bin/env bash
# Build the gpuledger image without a container daemon: buildah, chroot isolation (what `make test`
# runs: tests/deploy/test_image_build.py). Storage and the locally made base live in .cache/image/
# (git-ignored), so a second run reuses the base. The storage driver is overlay where buildah can
# mount an overlay container in the cache (a layer or a container is then a mount, not a copy:
# `buildah from` of the image takes 0.7 CPU-s instead of ~57 with vfs, the build ~190 CPU-s instead
# of ~266), else vfs; GPULEDGER_IMAGE_STORAGE=overlay|vfs chooses. A cache keeps the driver it was
# made with (.cache/image/storage/driver): a storage root cannot change driver.
#
#   bash scripts/build-image.sh [TAG]        default TAG: localhost/gpuledger:dev
#
# The base: $PYTHON_IMAGE when set; else the registry's python:3.11-slim-bookworm when it can be
# pulled; else a Debian bookworm made here with debootstrap (python3, venv, pip, CA certificates;
# kept as .cache/image/pybase-bookworm.tar.gz). When package access goes through a proxy with its
# own CA (the public roots cannot verify the index, the host's bundle can), the host's bundle is
# handed to the build as the secret `pip-ca` (mounted for the pip steps only, never in a layer).
# Records, in build/image/: resolved-versions.txt (pip freeze inside the image) and image.json
# (tag, image id, manifest digest, base, CA secret used or not).
# Any failure ends with one line on stderr saying which step and why.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-localhost/gpuledger:dev}
cache=${GPULEDGER_IMAGE_CACHE:-$repo/.cache/image}
records=${GPULEDGER_IMAGE_RECORDS:-$repo/build/image}
index=${PIP_INDEX_URL:-https://pypi.org/simple}
host_ca=${GPULEDGER_HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
python=$repo/.venv/bin/python
[ -x "$python" ] || python=python3
mkdir -p "$cache" "$records"
log=$cache/build.log
: >"$log"
fail() { echo "build-image: $*" >&2; exit 1; }
command -v buildah >/dev/null || fail "buildah is not installed (make test-deps installs it)"

# 0. the storage driver: the cache's own; else the one asked for; else overlay if buildah can mount
# an overlay container here (tried in a throwaway storage root: a root cannot change driver after)
overlay_mounts() {
  local d ok=1 ctr
  d=$(mktemp -d "$cache/overlay-probe.XXXXXX") || return 1
  local P=(buildah --root "$d/root" --runroot "$d/run" --storage-driver overlay)
  if ctr=$("${P[@]}" from scratch 2>/dev/null) && "${P[@]}" mount "$ctr" >/dev/null 2>&1; then
    ok=0
  fi
  [ -n "${ctr:-}" ] && "${P[@]}" rm "$ctr" >/dev/null 2>&1
  rm -rf "$d" 2>/dev/null
  return $ok
}
mkdir -p "$cache/storage"
recorded=""
if [ -s "$cache/storage/driver" ]; then
  recorded=$(cat "$cache/storage/driver")
elif [ -d "$cache/storage/root" ]; then
  recorded=vfs  # a cache made before the driver was recorded
fi
wanted=${GPULEDGER_IMAGE_STORAGE:-}
case $wanted in ''|overlay|vfs) ;; *) fail "GPULEDGER_IMAGE_STORAGE=$wanted: choose overlay or vfs" ;; esac
if [ -n "$recorded" ]; then
  [ -z "$wanted" ] || [ "$wanted" = "$recorded" ] \
    || fail "GPULEDGER_IMAGE_STORAGE=$wanted, but $cache/storage holds $recorded storage (a storage root cannot change driver): remove $cache/storage or set GPULEDGER_IMAGE_CACHE to another folder"
  driver=$recorded
elif [ -n "$wanted" ]; then
  driver=$wanted
elif overlay_mounts; then
  driver=overlay
else
  driver=vfs
fi
echo "$driver" >"$cache/storage/driver"
B=(buildah --root "$cache/storage/root" --runroot "$cache/storage/run" --storage-driver "$driver")

# 1. the package index answers (one line instead of a build that hangs on it)
why=$("$python" - "$index" "$host_ca" <<'PY' 2>&1
import ssl, sys, urllib.request
index, ca = sys.argv[1], sys.argv[2]
try:
    ctx = ssl.create_default_context(cafile=ca) if index.startswith("https") else None
    urllib.request.urlopen(index.rstrip("/") + "/pip/", timeout=20, context=ctx).read(64)
except Exception as exc:  # noqa: BLE001 - the reason is the message
    print(f"{type(exc).__name__}: {exc}"[:200])
    sys.exit(1)
PY
) || fail "cannot reach the package index $index ($why): the image installs its dependencies from it; set PIP_INDEX_URL to a mirror"

# 2. does the index need the host's CA (a proxy's own)? The public roots (certifi) fail, the host's pass.
secret=()
needs_ca=$("$python" - "$index" <<'PY' 2>/dev/null || echo unknown
import ssl, sys, urllib.request
index = sys.argv[1]
if not index.startswith("https"):
    print("no"); sys.exit()
try:
    import certifi
except ImportError:
    print("unknown"); sys.exit()
try:
    urllib.request.urlopen(index.rstrip("/") + "/pip/", timeout=20,
                           context=ssl.create_default_context(cafile=certifi.where())).read(64)
    print("no")
except ssl.SSLCertVerificationError:
    print("yes")
except OSError as exc:
    print("yes" if isinstance(getattr(exc, "reason", None), ssl.SSLCertVerificationError) else "unknown")
PY
)
if [ "$needs_ca" != no ]; then secret=(--secret "id=pip-ca,src=$host_ca"); fi

# 3. the base image
base=${PYTHON_IMAGE:-}
local_base=localhost/gpuledger-pybase:bookworm
if [ -z "$base" ]; then
  if "${B[@]}" inspect --type image "$local_base" >/dev/null 2>&1; then
    base=$local_base
  elif timeout 60 "${B[@]}" pull -q docker.io/library/python:3.11-slim-bookworm >>"$log" 2>&1; then
    base=docker.io/library/python:3.11-slim-bookworm
  else
    tarball=$cache/pybase-bookworm.tar.gz
    if [ ! -s "$tarball" ]; then
      command -v debootstrap >/dev/null || fail "no registry base can be pulled and debootstrap is not installed (make test-deps)"
      rm -rf "$cache/rootfs"
      timeout 1200 debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
        bookworm "$cache/rootfs" http://deb.debian.org/debian >>"$log" 2>&1 \
        || fail "debootstrap of the bookworm base failed (see $log: $(tail -n1 "$log"))"
      rm -f "$cache"/rootfs/usr/lib/python3*/EXTERNALLY-MANAGED  # as the slim images: pip may install
      rm -rf "$cache"/rootfs/var/cache/apt/archives/*.deb "$cache"/rootfs/var/lib/apt/lists/*
      tar -C "$cache/rootfs" -c . | gzip -1 >"$tarball.partial" && mv "$tarball.partial" "$tarball"
      rm -rf "$cache/rootfs"
    fi
    ctr=$("${B[@]}" from scratch)
    "${B[@]}" add "$ctr" "$tarball" / >>"$log" 2>&1 || fail "importing $tarball failed (see $log)"
    "${B[@]}" commit -q "$ctr" "$local_base" >>"$log" 2>&1
    "${B[@]}" rm "$ctr" >/dev/null
    base=$local_base
  fi
fi

# 4. the build
echo "build-image: building $tag on $base ($driver storage; CA secret: $([ ${#secret[@]} -gt 0 ] && echo host bundle || echo none))" >&2
"${B[@]}" bud --isolation chroot --layers=false --build-arg "PYTHON_IMAGE=$base" \
  --build-arg "PIP_INDEX_URL=$index" "${secret[@]}" -f "$repo/Containerfile" -t "$tag" "$repo" >>"$log" 2>&1 \
  || fail "buildah bud failed: $(grep -E 'ERROR|Error|error:' "$log" | tail -n1 | cut -c1-300) (whole log: $log)"

# the previous build of this tag is left dangling: drop it (a vfs image is ~1.5 GB)
"${B[@]}" rmi --prune >/dev/null 2>&1 || true

# 5. records: what was resolved, and the image's identity
ctr=$("${B[@]}" from "$tag")
mnt=$("${B[@]}" mount "$ctr")
cp "$mnt/opt/gpuledger/resolved-versions.txt" "$records/resolved-versions.txt"
"${B[@]}" umount "$ctr" >/dev/null
"${B[@]}" rm "$ctr" >/dev/null
image_id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$tag")
digest=$("${B[@]}" inspect --type image --format '{{.FromImageDigest}}' "$tag")
"$python" - "$records/image.json" "$tag" "$image_id" "$digest" "$base" "${#secret[@]}" "$driver" <<'PY'
import json, sys, datetime
out, tag, image_id, digest, base, secret, driver = sys.argv[1:]
json.dump({"tag": tag, "image_id": image_id, "digest": digest, "base": base, "storage_driver": driver,
           "ca_secret": secret != "0", "built_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")},
          open(out, "w"), indent=2)
PY
echo "build-image: $tag $digest; resolved versions in $records/resolved-versions.txt" >&2
