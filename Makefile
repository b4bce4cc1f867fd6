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

# INSTALLER=uv installs the same pins with uv instead of pip (15-21 s, not 96-154 s,
# here; .ci/run uses it): uv comes into the venv from pip and is given the local wheels
# pip is given (UV_FIND_LINKS, which .ci/run sets from pip's). uv compiles no bytecode:
# the test command's processes write it as they first import a module (test.sh).
INSTALLER ?= pip
ifeq ($(INSTALLER),uv)
INSTALL := $(PY) -m uv pip install -q --python $(PY)
else
INSTALL := $(PY) -m pip install -q
endif

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip $(if $(filter uv,$(INSTALLER)),uv)
	$(INSTALL) torch==2.13.0   # first, so nothing pulls a CUDA build of torch
	$(INSTALL) -r requirements.txt
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
# the built site: its single-page build (_build/singlehtml) writes from the site build's
# Sphinx environment, reading no page again (it builds the site first if that is
# stale or a page was edited since).
pdf: $(STAMP)
	$(PY) -m tools.build.pdf

test: $(STAMP)
	PY=$(PY) bash tools/build/test.sh

# The unit and hygiene tests alone (the test command's stages unit:rest and
# unit:registry), on every core
# (pytest-xdist): under three minutes on this 2-core machine with torch's compile cache
# (/tmp/torchinductor_*) from an earlier run, about seven when it compiles afresh.
test-quick: $(STAMP)
	$(PY) -m pytest tests -m "not browser and not build" -q -n auto --dist load

# One chapter end to end: under nbval, then its student notebook on the (fake) GPU
# reusing nbval's trainings, beside its page built strictly from nbval's execution
# (_build/chapter/pages/_build/html); a table of the three at the end.
test-chapter: $(STAMP)
	@test -n "$(CHAPTER)" || { echo "usage: make test-chapter CHAPTER=book/part3/alibi" >&2; exit 2; }
	PY=$(PY) bash tools/build/test.sh --chapter $(CHAPTER)

# On a machine with CUDA, in one command of at most BUDGET_S seconds (9 minutes): every
# chapter under nbval on the GPU, several at a time, the CUDA half of the device,
# half-precision and registry tests, then the attention and model benchmarks in the
# time left; every log and result goes into RESULTS as it is produced (collect them
# with python -m tools.build.gpu_run collect RESULTS, and commit). On a box with its
# own Python and torch and no package registry:
#   make wheels                                # here, where PyPI is reachable
#   make test-gpu PY=python3 WHEELS=_build/wheels RESULTS=DIR  # there: offline
# FAKE_CUDA=1 rehearses it on a machine without a card. See tools/build/test_gpu.sh.
RESULTS ?= _build/gpu-results
WHEELS ?=
WHEELS_DIR ?= _build/wheels
WHEELS_PYTHON ?= 3.12
BUDGET_S ?= 540
# a Python given on the command line (PY=python3) is used as it is: no venv
GPU_ENV := $(if $(filter command line,$(origin PY)),,$(STAMP))

test-gpu: $(GPU_ENV)
	PY=$(PY) WHEELS=$(WHEELS) RESULTS=$(RESULTS) BUDGET_S=$(BUDGET_S) \
	  bash tools/build/test_gpu.sh

# The course's wheelhouse for such a box (tools/build/wheels.py): what the GPU run needs
# beside torch, numpy, matplotlib, sympy and tqdm, for its Python, into WHEELS_DIR
# (at most 40 MiB); copy the folder there and give it as WHEELS=.
.PHONY: wheels
wheels: $(STAMP)
	$(PY) -m tools.build.wheels download $(WHEELS_DIR) --python $(WHEELS_PYTHON)

clean:
	rm -rf _build
