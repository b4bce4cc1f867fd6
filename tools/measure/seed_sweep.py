"""Re-run a chapter with its seeds shifted; record what its assertions and numbers do.

    python -m tools.measure.seed_sweep book/part4/cope.ipynb --shifts 100-109
    python -m tools.measure.seed_sweep book/part3/alibi.ipynb --shifts 7 13 21

Every chapter takes its seeds from ``pl.book.chapter_seeds(...)``, which moves them by
the environment variable ``POSENC_SEED_SHIFT`` (shift s owns seeds s * 1000 .. s * 1000
+ 999, so no two runs share a seed). This tool executes the notebook once per shift (top
to bottom, as the test command does), and writes one row per shift to
``posenc_lib/data/sweeps/<notebook>.csv`` (package data, read by ``pl.book.Sweep``, so a
chapter glues the ranges it quotes, in Colab too): whether every cell passed, the
first failing assertion, and every value the notebook glued (``pl.book.glue``). Rows for
the same shift are replaced; others are kept. Run on demand (minutes per chapter), not
in the test command. Print a summary with ``--summary``.
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "posenc_lib" / "data" / "sweeps"  # package data: pl.book.Sweep reads it
GLUE_PREFIX = "application/papermill.record/"


def parse_shifts(items: list[str]) -> list[int]:
    shifts = []
    for item in items:
        if "-" in item.lstrip("-"):
            lo, hi = item.split("-", 1)
            shifts += range(int(lo), int(hi) + 1)
        else:
            shifts.append(int(item))
    return shifts


def glued_values(nb) -> dict[str, str]:
    """name -> text/plain of every glued output of an executed notebook."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if not meta or out["metadata"].get("posenc_from_sweep"):
                continue  # not glued, or read from the committed sweep (pl.book.Sweep)
            data = out.get("data", {})
            text = data.get(meta.get("mime_prefix", "") + "text/plain")
            if text is not None:
                values[meta["name"]] = str(text).strip("'\"")
    return values


def run_once(path: pathlib.Path, shift: int, timeout: int) -> dict[str, str]:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    os.environ["POSENC_SEED_SHIFT"] = str(shift)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )  # fmt: skip
    start = time.perf_counter()
    row = {"shift": str(shift), "status": "pass", "error": ""}
    try:
        client.execute()
    except CellExecutionError as err:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # drop terminal colours
        lines = [ln for ln in text.splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1])
        row.update(status="fail", error=last[:300])
    row["seconds"] = f"{time.perf_counter() - start:.1f}"
    row.update(glued_values(nb))
    return row


def write(csv_path: pathlib.Path, rows: list[dict[str, str]]) -> None:
    old = []
    if csv_path.exists():
        with csv_path.open() as f:
            old = list(csv.DictReader(f))
    new_shifts = {r["shift"] for r in rows}
    merged = [r for r in old if r["shift"] not in new_shifts] + rows
    merged.sort(key=lambda r: int(r["shift"]))
    fields = ["shift", "status", "error", "seconds"]
    for r in merged:
        fields += [k for k in r if k not in fields]
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(merged)


def summary(csv_path: pathlib.Path) -> None:
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    passed = sum(r["status"] == "pass" for r in rows)
    print(f"{csv_path.name}: {passed} of {len(rows)} shifts pass")
    for key in rows[0] if rows else []:
        if key in ("shift", "status", "error", "seconds"):
            continue
        nums = []
        for r in rows:
            try:
                nums.append(float(r.get(key) or "nan"))
            except ValueError:
                pass
        nums = [v for v in nums if v == v]
        if nums:
            print(
                f"  {key:32s} min {min(nums):.4g}  max {max(nums):.4g}  n {len(nums)}"
            )
    for r in rows:
        if r["status"] != "pass":
            print(f"  shift {r['shift']}: {r['error']}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebook")
    parser.add_argument("--shifts", nargs="+", default=["100-109"])
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--summary", action="store_true", help="only summarise the CSV")
    args = parser.parse_args()
    path = (ROOT / args.notebook).resolve()
    csv_path = OUT / f"{path.stem}.csv"
    if not args.summary:
        rows = []
        for shift in parse_shifts(args.shifts):
            row = run_once(path, shift, args.timeout)
            print(f"shift {shift}: {row['status']} ({row['seconds']} s) {row['error']}")
            rows.append(row)
            write(csv_path, rows)
    summary(csv_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
