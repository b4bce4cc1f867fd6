# Two commands (see README):  make site   builds the website and its PDF;  make test   runs
# every test. Quick loops (CONTRIBUTING.md): make test-quick (unit and hygiene tests),
# make test-chapter CHAPTER=book/part3/alibi (one chapter: nbval, student notebook, page).
# Both create the virtual environment .venv from the pinned requirements on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: site html test test-quick test-chapter test-gpu env clean pdf

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # first, so nothing pulls a CUDA build of torch
	$(PY) -m pip install -q -r requirements.txt
	@touch $(STAMP)

env: $(STAMP)

# The whole site: the pages, then the book as one PDF, which the site serves (its front
# page links it). Chromium prints the PDF: look for it before the long build.
site: $(STAMP)
	$(PY) -m tools.build.pdf --check-chromium
	$(PY) -m tools.build.site
	$(PY) -m tools.build.pdf

# The pages alone (a quicker loop while writing): the front page's PDF link serves the
# PDF printed last, if any (_build/extra), until the next `make site` or `make pdf`.
html: $(STAMP)
	$(PY) -m tools.build.site

# The PDF alone, _build/pdf/positional-encoding-course.pdf (tools/build/pdf.py), into
# the built site: reuses the site build's executed notebooks (builds the site first if
# it is stale).
pdf: $(STAMP)
	$(PY) -m tools.build.pdf

test: $(STAMP)
	PY=$(PY) bash tools/build/test.sh

# The unit and hygiene tests alone (the test command's `unit` stage): about a minute on
# 2 cores, four when torch compiles its kernels afresh (its cache: /tmp/torchinductor_*).
test-quick: $(STAMP)
	$(PY) -m pytest tests -m "not browser and not build" -q

# One chapter end to end: under nbval, then its student notebook on the (fake) GPU
# reusing nbval's trainings, beside its page built strictly from nbval's execution
# (_build/chapter/pages/_build/html); a table of the three at the end.
test-chapter: $(STAMP)
	@test -n "$(CHAPTER)" || { echo "usage: make test-chapter CHAPTER=book/part3/alibi" >&2; exit 2; }
	PY=$(PY) bash tools/build/test.sh --chapter $(CHAPTER)

# On a machine with CUDA: every chapter under nbval on the GPU, in parallel, then the
# attention benchmark there; writes tools/results/timings/gpu.json and
# posenc_lib/data/attention_cuda.* (commit them). See tools/build/test_gpu.sh.
test-gpu: $(STAMP)
	PY=$(PY) bash tools/build/test_gpu.sh

clean:
	rm -rf _build
