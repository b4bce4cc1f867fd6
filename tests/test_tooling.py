"""The pipeline's own guarantees: the site's execution cache is keyed on the library."""

import importlib.util
import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_build_site(root: pathlib.Path):
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT = root
    return module


def test_cache_key_changes_when_the_library_or_the_pins_change(tmp_path):
    for name in ("posenc_lib", "requirements.txt", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    build_site = load_build_site(tmp_path)
    before = build_site.library_hash()
    assert build_site.library_hash() == before                      # deterministic
    (tmp_path / "posenc_lib" / "encodings" / "nope.py").write_text("# changed\n", encoding="utf-8")
    after_lib = build_site.library_hash()
    assert after_lib != before                                       # a library edit drops the cache
    with open(tmp_path / "requirements.txt", "a") as f:
        f.write("# changed pin\n")
    assert build_site.library_hash() != after_lib                    # so does a change of pins
