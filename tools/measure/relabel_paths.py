"""Relabel the committed benchmark runs with the path names of this release.

``path=`` named what runs from 2026-11-29: "reference" (was "slow") and "fused" (was
"fast"); the old names stay aliases for one release. The runs measured before keep
every value; only the labels (the ``path`` column and the refusal notes, which quote
the path) change, and each file's ``meta`` records the relabelling.

    python -m tools.measure.relabel_paths          # rewrites posenc_lib/data/*
    python -m tools.measure.relabel_paths --check  # exit 1 if an old label is left
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parents[2] / "posenc_lib" / "data"
NEW = {"fast": "fused", "slow": "reference"}
NOTE = (
    "paths relabelled 2026-11-29: fast -> fused, slow -> reference (values unchanged)"
)


def note(text: str) -> str:
    """A refusal or skip note, with the path it quotes renamed."""
    for old, new in NEW.items():
        text = text.replace(f"path='{old}'", f"path='{new}'")
        text = text.replace(f"{old} path above --slow-max-n", f"{new} path above n_max")
    return text


def relabel_rows(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        row = dict(row)
        row["path"] = NEW.get(row.get("path"), row.get("path"))
        if row.get("note"):
            row["note"] = note(row["note"])
        for key in ("paths",):
            if key in row:
                row[key] = [NEW.get(p, p) for p in row[key]]
        out.append(row)
    return out


def relabel_json(path: pathlib.Path) -> str:
    data = json.loads(path.read_text())
    data["rows"] = relabel_rows(data["rows"])
    for merged in data["meta"].get("merged", []):
        if "paths" in merged:
            merged["paths"] = [NEW.get(p, p) for p in merged["paths"]]
    if NOTE not in data["meta"].get("notes", []):
        data["meta"]["notes"] = [*data["meta"].get("notes", []), NOTE]
    return json.dumps(data, indent=1) + "\n"


def relabel_csv(path: pathlib.Path) -> str:
    rows = list(csv.DictReader(io.StringIO(path.read_text(), newline="")))
    fields = list(rows[0])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fields)  # "\r\n", as the benchmark writes
    writer.writeheader()
    writer.writerows(relabel_rows(rows))
    return buf.getvalue()


def relabel_md(path: pathlib.Path) -> str:
    lines = []
    for line in path.read_text().splitlines(keepends=True):
        cells = line.split("|")
        if len(cells) > 3:
            cells = [f" {NEW[c.strip()]} " if c.strip() in NEW else c for c in cells]
        lines.append("|".join(cells))
    return "".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    writers = {".json": relabel_json, ".csv": relabel_csv, ".md": relabel_md}
    stale = []
    for path in sorted(DATA.glob("*_cpu.*")) + sorted(DATA.glob("*_cuda.*")):
        if path.suffix not in writers or not path.stem.startswith(
            ("attention", "model")
        ):
            continue
        text = writers[path.suffix](path)
        if text != path.read_bytes().decode():
            stale.append(path.name)
            if not args.check:
                path.write_bytes(text.encode())
    if args.check and stale:
        print("old path names in:", ", ".join(stale))
        return 1
    print("relabelled:" if stale else "up to date", ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
