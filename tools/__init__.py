"""The course's own tools (not part of ``posenc_lib``); see tools/README.md.

Run them as modules from the repository root, e.g. ``python -m tools.build.site``.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tools" / "results"  # what the measurement tools write (committed)
