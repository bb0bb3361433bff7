# Fresh-machine entry points: `make demo` and `make test` each create .venv and install what they need.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned to the local CPU build so pip never pulls a multi-GB CUDA wheel.
TORCH := torch==2.13.0

.PHONY: venv demo test test-vllm lint clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[test,plot]" $(TORCH)
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/python -m eqsat.tools.demo

test: venv
	$(BIN)/ruff check eqsat rewrites extract tests benchmarks
	$(BIN)/python -m pytest tests

# The real vLLM in its own venv (~6-8 min, ~10 GB: vllm 0.33.0 brings torch 2.14.0+cu130); see docs/vllm.md.
VVENV := .venv-vllm
VBIN := $(VVENV)/bin

$(VBIN)/.installed: pyproject.toml
	$(PY) -m venv $(VVENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q vllm==0.33.0 "egglog==13.2.*" networkx scipy hypothesis pytest
	$(VBIN)/pip install -q --no-deps -e .
	touch $@

# -p vllm.ir: vLLM registers its real vllm_ir ops before tests/conftest.py registers eqsat's stand-ins.
test-vllm: $(VBIN)/.installed
	$(VBIN)/python -m pytest -p vllm.ir -rsx tests/vllm

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
