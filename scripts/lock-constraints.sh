#!/usr/bin/env bash
# Regenerate constraints.txt (the pins the image and `make install` use) from the working .venv:
# `pip install -U ...` what you mean to upgrade in .venv, run the tests, then run this and commit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
{
  echo "# Pins for what the image (Containerfile) and the development venv (make install) install: generated"
  echo "# from a working venv by scripts/lock-constraints.sh (pip freeze, gpuledger itself left out). Edit by"
  echo "# regenerating after a deliberate upgrade; two builds a week apart then resolve the same versions."
  "$repo/.venv/bin/pip" freeze --exclude-editable 2>/dev/null | grep -v " @ " | sort -f
} > "$repo/constraints.txt"
echo "constraints.txt: $(grep -vc '^#' "$repo/constraints.txt") pins"
