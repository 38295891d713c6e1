#!/usr/bin/env bash
# Regenerate the kubelet PodResources v1 stubs from the committed api.proto (copied from
# kubernetes/kubelet). The stubs are committed so a node agent needs only the grpcio and protobuf
# runtimes (the `podresources` extra), never a compiler; grpcio-tools (dev extra) is only for this
# script and for tests/ingest/test_pod_resources.py, which checks the committed stubs still match.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. \
  gpuledger/ingest/holdings/podresources/api.proto
echo "regenerated gpuledger/ingest/holdings/podresources/api_pb2{,_grpc}.py"
