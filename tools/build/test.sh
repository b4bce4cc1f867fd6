#!/usr/bin/env bash
# The whole test suite (run via `make test`; CI runs it through .ci/run):
#   1. unit tests of posenc_lib and notebook hygiene        (pytest tests)
#   2. every notebook of _toc.yml executed by nbval          } run side by side on the
#      the strict website build from an empty cache           } machine's two cores
#   3. the built site in headless Chromium                   (pytest -m browser)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p _build/logs
start=$(date +%s)

echo "== 1/3 unit and hygiene tests"
"$PY" -m pytest tests -m "not browser" -q

echo "== 2/3 notebooks (nbval) and the strict site build, in parallel"
"$PY" -m tools.build.site --fresh > _build/logs/build.log 2>&1 &
build_pid=$!
mapfile -t notebooks < <("$PY" -m tools.authoring.colab_cell --list)
nb_status=0
"$PY" -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=120 -q --durations=5 --durations-min=2 "${notebooks[@]}" || nb_status=$?
build_status=0
wait "$build_pid" || build_status=$?
grep -E "WARNING|ERROR|exited|Traceback" _build/logs/build.log | grep -v "Kernel is running over TCP" || true
echo "-- time to execute each notebook in the site build (nbval ran beside it on the other core):"
sed -nE 's#^.*/(book/[^:]*\.ipynb): Executed notebook in ([0-9.]+) seconds.*#  \2 s  \1#p' _build/logs/build.log
if [ "$build_status" -ne 0 ]; then
  echo "!! the site build failed (full log: _build/logs/build.log); last lines:"; tail -40 _build/logs/build.log
  exit "$build_status"
fi
[ "$nb_status" -eq 0 ] || { echo "!! nbval failed"; exit "$nb_status"; }

echo "== 3/3 the built site in headless Chromium"
"$PY" -m pytest tests/test_site.py -m browser -q -rs

echo "== all tests passed in $(( $(date +%s) - start )) s"
