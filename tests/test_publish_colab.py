"""``publish_colab --push``, as the publishing workflow runs it: each publication is one
commit on top of the remote's branch colab (a fresh clone has no local one), pushed
as a fast-forward; an unchanged edition pushes nothing; the instructor edition's zip
(the answer key) beside the notebooks is never pushed."""

from __future__ import annotations

import subprocess

from tools.build import publish_colab
from tools.build.colab_edition import INSTRUCTOR_ZIP


def test_push_publishes_the_edition_on_top_of_the_remotes_branch(tmp_path):
    def git(repo, *args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    clones = []
    for name in ("first", "second"):  # two runs of the workflow: two fresh clones
        repo = tmp_path / name
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "ci@example.org")
        git(repo, "config", "user.name", "ci")
        git(repo, "remote", "add", "origin", str(remote))
        (repo / "README.md").write_text(f"{name}\n")
        git(repo, "add", "README.md")
        git(repo, "commit", "-qm", name)
        clones.append(repo)
    edition = tmp_path / "colab"
    (edition / "book" / "part3").mkdir(parents=True)
    notebook = edition / "book" / "part3" / "alibi.ipynb"
    notebook.write_text("{}\n")
    (edition / "README.md").write_text("# The Colab edition\n")
    # the instructor edition (the answer key) lies beside it: never published
    (edition / INSTRUCTOR_ZIP).write_bytes(b"PK\x05\x06" + bytes(18))

    said = publish_colab.push(edition, clones[0], "origin")
    first = git(remote, "rev-parse", "colab")
    assert said.startswith("origin/colab -> ") and first.startswith(said.split()[-1])
    assert git(remote, "ls-tree", "-r", "--name-only", "colab").split() == [
        "README.md",
        "book/part3/alibi.ipynb",
    ]
    # the second clone has no branch colab: it builds on the remote's
    notebook.write_text('{"v": 2}\n')
    publish_colab.push(edition, clones[1], "origin")
    assert git(remote, "rev-parse", "colab^") == first
    second = git(remote, "rev-parse", "colab")
    # the same edition again: no new commit
    said = publish_colab.push(edition, clones[0], "origin")
    assert "already holds this edition" in said
    assert git(remote, "rev-parse", "colab") == second
    # the clones' checked-out branch and files are untouched
    for repo in clones:
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        assert git(repo, "status", "--porcelain") == ""
