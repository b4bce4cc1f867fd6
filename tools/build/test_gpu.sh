#!/usr/bin/env bash
# The GPU run (`make test-gpu`; README, tools/README.md): one command, on a machine with
# CUDA, that fits BUDGET_S seconds (default 540, nine minutes) and writes every log
# and result into RESULTS as it is produced, so that a run stopped at a time limit
# still leaves what it had.
#   setup  PY: the Python (default .venv/bin/python; `make test-gpu PY=python3` uses
#          that one and makes no venv). WHEELS=DIR: what it lacks, from the course's
#          wheelhouse (`make wheels`), offline, into _build/gpu-site. The repository
#          and that folder go on PYTHONPATH: nbval starts each chapter's kernel in the
#          chapter's folder, and every kernel must import posenc_lib.
#   1.     every chapter of _toc.yml (or CHAPTERS) under nbval on CUDA, NBVAL_WORKERS
#          at a time (default: one per core), longest first (their logged CPU times):
#          RESULTS/gpu.json gets each chapter's time as it ends; RESULTS/nbval.xml
#   2.     the CUDA half of the device, half-precision and registry tests (-m cuda)
#   3.     the attention benchmark, its `gpu` profile, in the time left (FlexAttention
#          compiles counted and capped): RESULTS/attention_cuda.{json,csv}, rewritten
#          after each row
#   4.     the model benchmark in the time left: RESULTS/model_bench_cuda.{json,md},
#          rewritten after each round
#   RESULTS/run.log holds everything printed (7 files in all). Then, in a clone:
#   python -m tools.build.gpu_run collect RESULTS copies them into place: commit them.
# FAKE_CUDA=1 rehearses the run on a machine without a card: every process on the
# fake CUDA device of tools/testing/fake_cuda.py (gpu_run collect refuses its results).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=${PY:-.venv/bin/python}
BUDGET_S=${BUDGET_S:-540}
RESULTS=${RESULTS:-_build/gpu-results}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
exec > >(tee -a "$RESULTS/run.log") 2>&1  # every line, as it is printed
SECONDS=0
left() { echo $(( BUDGET_S - SECONDS )); }
status=0
fail() { echo "!! $1"; status=1; }

echo "== the GPU run, $(date -u '+%Y-%m-%d %H:%M UTC'): budget ${BUDGET_S} s, results in $RESULTS"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
if [ -n "${WHEELS:-}" ]; then
  echo "== installing from the wheelhouse $WHEELS (no index)"
  "$PY" -m tools.build.wheels install "$WHEELS" _build/gpu-site || exit 3
  export PYTHONPATH="$ROOT/_build/gpu-site:$PYTHONPATH"
fi
if [ "${FAKE_CUDA:-0}" = 1 ]; then  # a rehearsal: every Python process on the fake card
  export PYTHONPATH="$ROOT/tools/testing/fake_cuda_site:$PYTHONPATH" POSENC_FAKE_CUDA=1
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "make test-gpu needs CUDA: torch.cuda.is_available() is False for $PY (the" \
    "project's .venv holds a CPU build of torch: give a Python whose torch has" \
    "CUDA, make test-gpu PY=python3; FAKE_CUDA=1 rehearses without a card)" >&2
  exit 2
}
"$PY" - <<'PY' || exit 4
import nbval, plotly, torch, xdist, yaml  # what the run needs beside torch
import posenc_lib as pl
card = torch.cuda.get_device_properties(0)
print(f"{card.name}, {card.total_memory / 2**30:.0f} GiB; torch {torch.__version__}; "
      f"posenc_lib from {pl.__file__}")
PY

# seconds kept for each phase after the chapters (tools/build/gpu_run.py, PHASES)
read -r _ TESTS_S ATTENTION_S MODEL_S < <("$PY" -m tools.build.gpu_run phases)
phase() {  # phase SECONDS NAME COMMAND...: run it for at most SECONDS, say how long
  local limit=$1 name=$2 start=$SECONDS code=0
  shift 2
  if [ "$limit" -lt 20 ]; then fail "$name: not run, ${limit} s left"; return; fi
  timeout -k 10 "$limit" "$@" || code=$?
  [ "$code" -eq 0 ] || fail "$name: exit $code$( [ "$code" -eq 124 ] && echo ', stopped at its time limit')"
  echo "== $name: $(( SECONDS - start )) s"
}

if [ -n "${CHAPTERS:-}" ]; then read -ra GIVEN <<< "$CHAPTERS"; else GIVEN=(); fi
mapfile -t ORDER < <("$PY" -m tools.build.gpu_run order "${GIVEN[@]}")
cores=$(nproc)
WORKERS=${NBVAL_WORKERS:-$(( cores < ${#ORDER[@]} ? cores : ${#ORDER[@]} ))}
"$PY" -m tools.build.gpu_run schedule --workers "$WORKERS" --budget "$BUDGET_S" "${GIVEN[@]}"
XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)  # next longest first
[ "$WORKERS" -gt 1 ] || XDIST=()
slot=$(( $(left) - TESTS_S - ATTENTION_S - MODEL_S ))
echo "== 1. ${#ORDER[@]} chapters under nbval on CUDA, $WORKERS at a time (at most ${slot} s)"
phase "$slot" "1. chapters" "$PY" -m pytest -p tools.build.nbval_times \
  --nbval-times "$RESULTS/gpu.json" --nbval-lax --nbval-current-env \
  --nbval-cell-timeout=300 -o addopts="" -p no:cacheprovider -q -rfE \
  --junitxml="$RESULTS/nbval.xml" "${XDIST[@]}" "${ORDER[@]}"

slot=$(( $(left) - ATTENTION_S - MODEL_S ))
echo "== 2. the CUDA half of the device, half-precision and registry tests (at most ${slot} s)"
phase "$slot" "2. tests" "$PY" -m pytest -m cuda -o addopts="" -p no:cacheprovider \
  -q -rfE -n "$WORKERS" tests/test_device.py tests/test_half_precision.py \
  tests/test_registry.py

slot=$(( $(left) - MODEL_S ))
echo "== 3. the attention benchmark on CUDA, profile gpu (at most ${slot} s)"
phase "$slot" "3. attention benchmark" "$PY" -m tools.measure.bench_attention \
  --profile gpu --deadline-s $(( slot - 30 )) --out "$RESULTS/attention_cuda.csv"

slot=$(( $(left) - 10 ))
echo "== 4. the model benchmark on CUDA (at most ${slot} s)"
phase "$slot" "4. model benchmark" "$PY" -m tools.measure.bench_model --device cuda \
  --deadline-s $(( slot - 20 )) --out "$RESULTS/model_bench_cuda.json"

echo "== the GPU run: ${SECONDS} s of ${BUDGET_S}, exit $status; in $RESULTS:"
ls -l "$RESULTS"
echo "in a clone: python -m tools.build.gpu_run collect $RESULTS, then commit"
exit "$status"
