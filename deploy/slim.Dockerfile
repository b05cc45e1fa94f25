# The slim image: sampler, executor, judge and monitor (no torch).
#
# Normal build (a registry and PyPI):  docker compose build
#   BASE defaults to python:3.11-slim-bookworm, packages come from PyPI.
# Offline build (no registry, no index): python -m deploy.images
#   BASE is a Debian tree made with debootstrap and imported with `docker import`, WHEELS
#   holds every package as a wheel prepared on the host, PIP_FLAGS=--no-index.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS deps
ARG WHEELS=deploy/no-wheels
ARG PIP_FLAGS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY ${WHEELS}/ /wheels/
COPY pyproject.toml /src/
# Only pyproject.toml so far: this installs the dependencies (and an empty package, removed
# again), so the layer is reused until the dependencies change.
RUN python3 -m venv /opt/whet \
 && touch /src/README.md \
 && /opt/whet/bin/pip install $PIP_FLAGS --find-links /wheels /src 'setuptools>=68' \
 && /opt/whet/bin/pip uninstall -y whetstone

FROM ${BASE}
# The executor's local backend needs bubblewrap and a system python3 at /usr/bin/python3
# (its slot spawners); a debootstrapped base has both already.
RUN if ! command -v bwrap >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends bubblewrap \
      && rm -rf /var/lib/apt/lists/*; fi \
 && if [ ! -x /usr/bin/python3 ]; then ln -s "$(command -v python3)" /usr/bin/python3; fi
ENV PATH=/opt/whet/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=deps /opt/whet /opt/whet
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
