#!/usr/bin/env bash
# The whole test command (run via `make test`; CI runs it through .ci/run). Every
# chapter notebook is executed ONCE, by the strict site build (its student edition,
# a different notebook, once more, by test_student_notebooks.py):
#   1. unit tests of posenc_lib and notebook hygiene         } side by side on the
#   2. the strict website build from an empty cache: every   } machine's two cores
#      notebook of _toc.yml executed, any cell error fails   }
#      it (pytest -m build reports it notebook by notebook)  }
#   3. the built site in headless Chromium                   (pytest -m browser)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
mkdir -p _build/logs
start=$(date +%s)

echo "== 1/3 unit and hygiene tests (the site build runs beside them, see 2/3)"
"$PY" -m pytest tests/test_notebooks.py tests/test_colab_edition.py -m build -q -rs \
  > _build/logs/notebooks.log 2>&1 &
build_pid=$!
unit_status=0
"$PY" -m pytest tests -m "not browser and not build" -q || unit_status=$?
# the student edition, run: every notebook with the solutions pasted back (each check
# says "right") and with every planted wrong answer (each gets its own message); on the
# core the unit tests leave free while the site build runs
"$PY" -m pytest tests/test_student_notebooks.py -m build -q -rs || unit_status=$?
build_status=0
wait "$build_pid" || build_status=$?

echo "== 2/3 every notebook executed once, by the strict site build from an empty cache"
echo "-- time to execute each notebook in the site build:"
sed -nE 's#^.*/(book/[^:]*\.ipynb): Executed notebook in ([0-9.]+) seconds.*#  \2 s  \1#p' \
  _build/logs/build.log || true
cat _build/logs/notebooks.log
[ "$unit_status" -eq 0 ] || { echo "!! unit and hygiene tests failed"; exit "$unit_status"; }
if [ "$build_status" -ne 0 ]; then
  echo "!! the site build failed (full log: _build/logs/build.log)"
  exit "$build_status"
fi

echo "== the book as one PDF, from the site build's execution cache"
"$PY" -m tools.build.pdf > _build/logs/pdf.log 2>&1 || { tail -40 _build/logs/pdf.log; exit 1; }
"$PY" -m pytest tests/test_pdf.py -m build -q -rs

echo "== 3/3 the built site in headless Chromium"
"$PY" -m pytest tests -m browser -q -rs

echo "== all tests passed in $(( $(date +%s) - start )) s"
