#!/usr/bin/env bash
# The whole test command (`make test`; CI runs it through .ci/run on a clean clone):
# the stages of tools/build/schedule.py on every core (nproc; TEST_JOBS=N for N), each
# started as soon as the stages it needs have passed, the longest expected path first:
#
#   nbval:<group>    chapters under nbval, on the device pl.book.setup() picks: their
#                    executed notebooks staged for the cache, every pl.train recorded
#   student:<group>  the same chapters' student notebooks, solutions pasted back, on a
#                    GPU (real, else the fake device), nbval's trainings reused after
#                    their first steps on the device                (after its nbval)
#   cache            the staged notebooks into the site's execution cache (after all)
#   build            the strict site build from that cache (it executes nothing)
#   pdf              the book as one PDF, from the same cache       (after build)
#   browser:pages    every page in headless Chromium, at two widths (after build)
#   browser:rest     the other browser tests: slides, figures, ...  (after build)
#   browser-pdf      the PDF the site serves                  (after pdf and browser)
#   unit:rest        unit and hygiene tests (make test-quick) but the registry's
#   unit:registry    the registry's: every encoding on every path (its compiles)
#   train-once       the reuse of trainings hides no tensor on the wrong device
#   installs         fresh installs: the library alone, then with the course extra
#   recipe           CONTRIBUTING's chapter recipe, in a copy of the repository
#
# The chapters' kernels (nbval's and the student run's) are forked from one warm
# process that imported torch (tools/testing/kernel_forks.py; POSENC_NO_KERNEL_FORKS=1
# starts ordinary kernels). At the end: a table of the stages (start, seconds, CPU seconds), also written to
# _build/logs/stages.json (the times the next run schedules by) and stages.tsv; each
# stage's output is _build/logs/<stage>.log. `make test-chapter CHAPTER=...` runs
# one chapter's nbval, student notebook and page the same way (--chapter).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PY=${PY:-.venv/bin/python}
# Each module's bytecode is written by the first process that imports it and read by
# the others (Python writes it atomically). With PYTHONDONTWRITEBYTECODE (set on some
# machines, this one included) every process would compile every module it imports:
# the library's and tools' own always, and all of torch's in a virtual environment
# built by uv, which compiles nothing at install (.ci/run: INSTALLER=uv).
unset PYTHONDONTWRITEBYTECODE
exec "$PY" -m tools.build.schedule --jobs "${TEST_JOBS:-$(nproc)}" "$@"
