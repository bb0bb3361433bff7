# Fresh-machine entry points: `make demo` and `make test` each create .venv and install what they need.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned to the local CPU build so pip never pulls a multi-GB CUDA wheel.
TORCH := torch==2.13.0

.PHONY: venv demo test lint clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[test,plot]" $(TORCH)
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/python -m eqsat.demo

test: venv
	$(BIN)/ruff check eqsat rewrites extract tests benchmarks
	$(BIN)/python -m pytest tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
