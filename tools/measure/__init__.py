"""On-demand measurements; results go to tools/results/ (or posenc_lib/data/)."""

import importlib.metadata


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None (recorded in a benchmark's
    meta where the library's path depends on it: numba for CoPE's scan on a CPU)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
