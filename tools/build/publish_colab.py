"""Commit the Colab edition to the branch the Colab launch buttons open.

    python -m tools.build.publish_colab            # after `make site`
    git push origin colab                           # with the repository's credentials
    python -m tools.build.publish_colab --push origin   # both, on the remote's branch

The site's Colab buttons open ``.../blob/colab/book/<part>/<chapter>.ipynb``
(``tools/build/colab_launch.py``, enabled in ``_config.yml``): the Colab edition,
which renders in Colab as the page does. This writes the notebooks of
``_build/colab`` (made by the site build) and its README, and nothing else (not the
instructor edition's zip beside them: the answer key is not published), as one
commit on the local branch ``colab`` — its parent the branch's
previous commit, its message the ``main`` commit it was built from — with git's own
plumbing (a temporary index, ``write-tree``, ``commit-tree``, ``update-ref``), so the
working tree, the index and the checked-out branch are never touched. An edition
identical to the branch's last one adds no commit.

``--push REMOTE`` publishes it: the new commit's parent is the remote's branch (fetched
first; none when the remote has no such branch yet), so the push always fast-forwards
it, whatever the local branch holds. The publishing workflow
(``.github/workflows/publish.yml``) runs it on every push to ``main``; until the branch
is on GitHub the button opens a page that does not exist.
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
README = "README.md"  # the branch holds the notebooks and this, never the answer key


def _git(repo: pathlib.Path, *args: str, env: dict | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return out.stdout.strip()


def _tip(repo: pathlib.Path, ref: str) -> str:
    """The commit ``ref`` names in ``repo``; '' when there is none."""
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "-q", "--verify", ref],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def remote_tip(repo: pathlib.Path, remote: str, branch: str) -> str | None:
    """The commit ``branch`` names on ``remote`` (fetched), None when it has none."""
    if not _git(repo, "ls-remote", "--heads", remote, f"refs/heads/{branch}"):
        return None
    _git(repo, "fetch", "-q", "--no-tags", remote, f"refs/heads/{branch}")
    return _git(repo, "rev-parse", "FETCH_HEAD")


def publish(
    edition: pathlib.Path = EDITION,
    repo: pathlib.Path = ROOT,
    branch: str = BRANCH,
    parent: str | None = None,
) -> str:
    """Commit ``edition`` (a folder) as the tip of ``branch`` in ``repo``, on top of
    ``parent`` (default: the branch's tip); return the branch's new tip, the parent
    itself when the edition is unchanged."""
    notebooks = sorted(edition.rglob("*.ipynb"))
    if not notebooks:
        raise SystemExit(
            f"no Colab edition in {edition}: build the site first (make site)"
        )
    source = _git(repo, "rev-parse", "--short", "HEAD")
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(pathlib.Path(tmp) / "index")}
        readme = [edition / README] if (edition / README).is_file() else []
        names = [p.relative_to(edition).as_posix() for p in notebooks + readme]
        _git(repo, f"--work-tree={edition}", "add", "--", *names, env=env)
        tree = _git(repo, "write-tree", env=env)
    if parent is None:
        parent = _tip(repo, f"refs/heads/{branch}")
    if parent and _git(repo, "rev-parse", f"{parent}^{{tree}}") == tree:
        _git(repo, "update-ref", f"refs/heads/{branch}", parent)
        return parent
    message = f"Colab edition of {source} ({len(notebooks)} notebooks)"
    commit = _git(
        repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message
    )
    _git(repo, "update-ref", f"refs/heads/{branch}", commit)
    return commit


def push(
    edition: pathlib.Path, repo: pathlib.Path, remote: str, branch: str = BRANCH
) -> str:
    """Commit ``edition`` on top of ``remote``'s ``branch`` and push it there; say
    what happened."""
    parent = remote_tip(repo, remote, branch)
    commit = publish(edition, repo, branch, parent=parent or "")
    if commit == parent:
        return f"{remote}/{branch} already holds this edition ({commit[:12]})"
    _git(repo, "push", "-q", remote, f"{commit}:refs/heads/{branch}")
    return f"{remote}/{branch} -> {commit[:12]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edition", type=pathlib.Path, default=EDITION)
    parser.add_argument("--branch", default=BRANCH)
    parser.add_argument(
        "--push",
        metavar="REMOTE",
        help="commit on top of REMOTE's branch and push it there",
    )
    args = parser.parse_args()
    if args.push:
        print(push(args.edition, ROOT, args.push, args.branch))
        return 0
    commit = publish(args.edition, ROOT, args.branch)
    print(f"{args.branch} -> {commit[:12]}; publish: git push origin {args.branch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
