# Latch: two commands.  `make check` runs every test; `make demo` runs the main job.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: check demo demo-ptx test-py test-lit venv clean

check: $(STAMP)
	$(PY) -m pytest -q tests/py
	$(VENV)/bin/lit -sv tests/lit

test-py: $(STAMP)
	$(PY) -m pytest -q tests/py

test-lit: $(STAMP)
	$(VENV)/bin/lit -sv tests/lit

demo: $(STAMP)
	$(PY) examples/char_lm.py

demo-ptx: $(STAMP)
	$(PY) examples/ptx_demo.py

venv: $(STAMP)

# torch 2.13.0 first: it comes from local disk as a CPU build; anything else may pull CUDA.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info
