"""The Colab install cell every notebook starts with, derived from the ONE
repository URL.

    python -m tools.authoring.colab_cell         # print the canonical cell
    python -m tools.authoring.colab_cell --fix   # rewrite the first cell of every
                                                 # notebook in _toc.yml
    python -m tools.authoring.colab_cell --list  # the notebooks of _toc.yml, in order

The URL and branch live in ``_config.yml`` (``repository.url``, ``repository.branch``),
which also drives the website's launch buttons; ``tests/test_notebooks.py`` checks
every notebook.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

from tools import toc

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAG = "remove-cell"


def _config_value(key: str) -> str:
    """Read ``repository.<key>`` from _config.yml without needing PyYAML's
    full schema."""
    text = (ROOT / "_config.yml").read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n?)+)", text, re.M)
    if not block:
        raise SystemExit("_config.yml has no repository: block")
    found = re.search(rf"^\s+{key}:\s*(\S+)", block.group(1), re.M)
    if not found:
        raise SystemExit(f"_config.yml has no repository.{key}")
    return found.group(1).strip("\"'")


def canonical_source() -> str:
    url, branch = _config_value("url"), _config_value("branch")
    return (
        "# Colab only: install the course library "
        "(this cell is hidden on the website).\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    repo = "{url}"\n'
        f'    url = f"posenc_lib[course] @ git+{{repo}}@{branch}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", url], '
        "check=True)"
    )


def toc_notebooks() -> list[pathlib.Path]:
    """Every notebook of _toc.yml, in order (``tools.toc.notebooks``)."""
    return toc.notebooks()


def fix(path: pathlib.Path) -> bool:
    nb = json.loads(path.read_text())
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "id": "colab-setup",
        "metadata": {"tags": [TAG]},
        "outputs": [],
        "source": canonical_source().splitlines(True),
    }
    first = nb["cells"][0]
    if first["cell_type"] == "code" and "google.colab" in "".join(first["source"]):
        if "".join(first["source"]) == canonical_source() and first["metadata"].get(
            "tags"
        ) == [TAG]:
            return False
        nb["cells"][0] = cell
    else:
        nb["cells"].insert(0, cell)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


if __name__ == "__main__":
    if "--list" in sys.argv:
        print("\n".join(p.relative_to(ROOT).as_posix() for p in toc_notebooks()))
    elif "--fix" in sys.argv:
        for nb_path in toc_notebooks():
            if fix(nb_path):
                print("fixed", nb_path.relative_to(ROOT))
    else:
        print(canonical_source())
