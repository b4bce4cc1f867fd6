#!/usr/bin/env bash
# The GPU check for teachers and maintainers (`make test-gpu`, on a machine with CUDA):
#   1. every chapter of _toc.yml under nbval on the GPU, NBVAL_WORKERS at a time
#      (pytest-xdist, one kernel per notebook; default: the cores, at most 8);
#   2. each chapter's run time from that run, into tools/results/timings/gpu.json
#      (the card is named; the chapters table grows a GPU column from it);
#   3. the attention benchmark on CUDA, into posenc_lib/data/attention_cuda.{csv,json}
#      (the cost chapter shows it beside the CPU's);
#   4. the registry contract on CUDA (every path, gradients included: FlexAttention's
#      backward runs on a GPU only) and the device tests;
#   5. the model-level benchmark on CUDA, into posenc_lib/data/model_bench_cuda.*.
# Commit what 2, 3 and 5 wrote. On a GPU box without a package registry, install the
# wheels first (see tools/README.md, "A GPU box without a registry") and run it with
# PY=python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
LOGS=_build/logs
mkdir -p "$LOGS"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "make test-gpu needs CUDA: torch.cuda.is_available() is False here" >&2
  exit 2
}
cores=$(nproc)
WORKERS=${NBVAL_WORKERS:-$(( cores < 8 ? cores : 8 ))}
mapfile -t CHAPTERS < <("$PY" -m tools.authoring.colab_cell --list)
echo "== ${#CHAPTERS[@]} chapters under nbval on $("$PY" -c \
  'import torch; print(torch.cuda.get_device_name(0))'), $WORKERS at a time"
status=0
SECONDS=0
POSENC_NBVAL_WORKERS=$WORKERS "$PY" -m pytest -p tools.build.nbval_cache --nbval-lax \
  --nbval-current-env -o addopts="" -p no:cacheprovider -q -rfE -n "$WORKERS" \
  --dist loadfile --nbval-cell-timeout=300 --junitxml="$LOGS/nbval_gpu.xml" \
  "${CHAPTERS[@]}" || status=$?
echo "== nbval on the GPU: ${SECONDS} s (exit $status)"
POSENC_NBVAL_WORKERS=$WORKERS "$PY" -m tools.measure.time_notebooks || status=$?
echo "== the attention benchmark on CUDA"
"$PY" -m tools.measure.bench_attention || status=$?
echo "== the registry contract and the device tests on CUDA"
"$PY" -m pytest -q -rfE tests/test_registry.py tests/test_device.py \
  tests/test_half_precision.py || status=$?
echo "== the model-level benchmark on CUDA"
"$PY" -m tools.measure.bench_model --device cuda || status=$?
exit "$status"
