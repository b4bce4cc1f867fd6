"""Commit the Colab edition to the branch the Colab launch buttons open.

    python -m tools.build.publish_colab            # after `make site`
    git push origin colab                           # the deploy step, with credentials

The site's Colab buttons open ``.../blob/colab/book/<part>/<chapter>.ipynb``
(``tools/build/colab_launch.py``, enabled in ``_config.yml``): the Colab edition,
which renders in Colab as the page does. This writes ``_build/colab`` (made by the
site build) as one commit on the local branch ``colab`` — its parent the branch's
previous commit, its message the ``main`` commit it was built from — with git's own
plumbing (a temporary index, ``write-tree``, ``commit-tree``, ``update-ref``), so the
working tree, the index and the checked-out branch are never touched. Pushing is
left to the deploy step (it needs the repository's credentials); until the branch is
on GitHub the button opens a page that does not exist.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
EDITION = ROOT / "_build" / "colab"
BRANCH = "colab"


def _git(repo: pathlib.Path, *args: str, env: dict | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return out.stdout.strip()


def publish(
    edition: pathlib.Path = EDITION, repo: pathlib.Path = ROOT, branch: str = BRANCH
) -> str:
    """Commit ``edition`` (a folder) as the tip of ``branch`` in ``repo``; return the
    new commit's id."""
    notebooks = sorted(edition.rglob("*.ipynb"))
    if not notebooks:
        raise SystemExit(
            f"no Colab edition in {edition}: build the site first (make site)"
        )
    source = _git(repo, "rev-parse", "--short", "HEAD")
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(pathlib.Path(tmp) / "index")}
        _git(repo, f"--work-tree={edition}", "add", "-A", ".", env=env)
        tree = _git(repo, "write-tree", env=env)
    parent = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    message = f"Colab edition of {source} ({len(notebooks)} notebooks)"
    commit = _git(
        repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message
    )
    _git(repo, "update-ref", f"refs/heads/{branch}", commit)
    return commit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edition", type=pathlib.Path, default=EDITION)
    parser.add_argument("--branch", default=BRANCH)
    args = parser.parse_args()
    commit = publish(args.edition, ROOT, args.branch)
    print(f"{args.branch} -> {commit[:12]}; publish: git push origin {args.branch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
