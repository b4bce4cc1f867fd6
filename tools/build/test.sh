#!/usr/bin/env bash
# The whole test command (run via `make test`; CI runs it through .ci/run). Every
# chapter notebook is executed ONCE, by nbval, whose outputs fill the execution cache
# that the strict site build then reads (tools/build/nbval_cache.py); its student
# edition, a different notebook, once more, on a GPU (a real one, else the fake CUDA
# device of tools/testing/fake_cuda.py). Two lanes, one per core:
#
#   lane 1: every chapter of _toc.yml under nbval (on the device pl.book.setup() picks)
#           -> the strict site build from that cache (render only; -m build reports
#           it notebook by notebook) -> the PDF -> the site in headless Chromium
#   lane 2: unit tests of posenc_lib and notebook hygiene -> every student notebook,
#           solutions pasted back and planted wrong answers fed to the checks ->
#           fresh installs of the package (the library alone; with the course)
#           -> CONTRIBUTING's recipe for a chapter, followed in a copy of the repository
# (the stages are split so that the lanes take about as long: ~1000 s each here)
#
# NBVAL_WORKERS (default 1) runs nbval on that many pytest-xdist workers
# (--dist loadfile: one kernel per notebook); make test-gpu sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
LOGS=_build/logs
mkdir -p "$LOGS"
start=$(date +%s)
mapfile -t CHAPTERS < <("$PY" -m tools.authoring.colab_cell --list)
XDIST=()
if [ "${NBVAL_WORKERS:-1}" -gt 1 ]; then XDIST=(-n "$NBVAL_WORKERS" --dist loadfile); fi

lane1() {
  echo "== lane 1: ${#CHAPTERS[@]} chapters under nbval, filling the execution cache"
  rm -rf _build/.jupyter_cache _build/.cache-library-hash  # an empty cache: every
  # chapter is executed by this run
  "$PY" -m pytest -p tools.build.nbval_cache --nbval-lax --nbval-current-env \
    -o addopts="" -p no:cacheprovider -q -rfE --junitxml="$LOGS/nbval.xml" \
    --nbval-cell-timeout=300 \
    "${XDIST[@]}" "${CHAPTERS[@]}" || return 1
  echo "== lane 1: the strict site build, every page from the execution cache"
  POSENC_EXPECT_CACHED=1 "$PY" -m pytest tests/test_notebooks.py \
    tests/test_colab_edition.py tests/test_student_edition.py tests/test_exercises.py \
    -m build -q -rs || return 1
  echo "== lane 1: the book as one PDF, from the same cache"
  "$PY" -m tools.build.pdf > "$LOGS/pdf.log" 2>&1 || { tail -40 "$LOGS/pdf.log"; return 1; }
  "$PY" -m pytest tests/test_pdf.py -m build -q -rs || return 1
  echo "== lane 1: the built site in headless Chromium"
  "$PY" -m pytest tests -m browser -q -rs || return 1
}

lane1 > "$LOGS/lane1.log" 2>&1 &
lane1_pid=$!

echo "== lane 2: unit and hygiene tests (lane 1 runs beside them: $LOGS/lane1.log)"
lane2_status=0
"$PY" -m pytest tests -m "not browser and not build" -q || lane2_status=$?
echo "== lane 2: every student notebook, on a GPU (a real one, else the fake device)"
"$PY" -m pytest tests/test_student_notebooks.py -m build -q -rs || lane2_status=$?
echo "== lane 2: fresh installs: the library alone, then with the course extra"
"$PY" -m pytest tests/test_package.py -m build -q -rs || lane2_status=$?
echo "== lane 2: CONTRIBUTING's chapter recipe, end to end, in a copy of the repository"
"$PY" -m pytest tests/test_contributing.py -m build -q -rs || lane2_status=$?

lane1_status=0
wait "$lane1_pid" || lane1_status=$?
cat "$LOGS/lane1.log"
echo "-- time to execute each chapter under nbval (s, kernel start included):"
"$PY" - "$LOGS/nbval.xml" <<'PY' || true
import collections, sys, xml.etree.ElementTree as ET
seconds = collections.Counter()
for case in ET.parse(sys.argv[1]).iter("testcase"):
    name = case.get("classname", "").removesuffix(".ipynb").replace(".", "/")
    seconds[name + ".ipynb"] += float(case.get("time", 0))
for name, s in seconds.most_common():
    print(f"  {s:6.1f} s  {name}")
PY
[ "$lane2_status" -eq 0 ] || { echo "!! lane 2 failed (unit, hygiene, student notebooks, the fresh installs or the chapter recipe)"; exit "$lane2_status"; }
[ "$lane1_status" -eq 0 ] || { echo "!! lane 1 failed (nbval, the site build, the PDF or the browser; see above)"; exit "$lane1_status"; }
echo "== all tests passed in $(( $(date +%s) - start )) s"
