"""The unit tests' compile cache (tools/testing/compile_cache.py): a kernel's key does
not depend on the folder torch is installed in, does depend on everything else (the
source, the command, torch's version), and a cached source file that names another
environment's folder is rewritten before a compile reads it."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch

from tools.testing import compile_cache

codecache = pytest.importorskip("torch._inductor.codecache")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_tests_run_with_it():
    assert compile_cache.apply()  # tests/conftest.py applied it: no second wrapper
    assert getattr(codecache.code_hash, compile_cache._MARK)


def test_a_kernels_key_ignores_torchs_folder_only():
    here = compile_cache.folder()
    source = '#include "{}/torch/_inductor/codegen/cpp_prefix.h"\nint k;'
    command = "g++ -I{}/torch/include -O3"
    key = codecache.get_hash(source.format(here), command.format(here))
    # torch's folder hashes as torch's version and build, as it does in another
    # environment with this torch; any other folder stays part of the key
    name = compile_cache.tag()
    assert key == codecache.get_hash(source.format(name), command.format(name))
    elsewhere = "/tmp/another-clone/.venv/lib/python3.11/site-packages"
    assert key != codecache.get_hash(source.format(elsewhere), command.format(here))
    assert key != codecache.get_hash(source.format(here), command.format(here) + "x")
    assert torch.__version__ in name


def test_a_cached_source_from_another_environment_is_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(codecache, "cache_dir", lambda: str(tmp_path))
    here = compile_cache.folder()
    ours = f'#include "{here}/torch/x.h"\n'
    _, path = codecache.write(ours, "cpp")
    with open(path, "w") as f:  # as another environment wrote it, under the same key
        f.write(ours.replace(here, "/gone/site-packages"))
    assert codecache.write(ours, "cpp")[1] == path
    assert open(path).read() == ours


def test_applied_when_torchs_compiler_is_first_imported():
    """conftest.py imports neither torch nor its compiler (a stage that runs notebooks
    in their kernels needs neither); the patch is made when a test imports them."""
    script = (
        "import sys\n"
        "import tests.conftest\n"
        "assert 'torch' not in sys.modules, 'conftest imported torch'\n"
        "from torch._inductor import codecache\n"
        "from tools.testing import compile_cache\n"
        "assert getattr(codecache.code_hash, compile_cache._MARK, False)\n"
        "hooks = [f for f in sys.meta_path if isinstance(f, compile_cache._OnImport)]\n"
        "assert not hooks\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_cache_folder_is_torchs_own(tmp_path, monkeypatch):
    """The folder whose kernels the test command counts is the one torch compiles
    into, named or by default, and its kernels are the shared libraries under it."""
    from torch._inductor.runtime import cache_dir_utils

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    default = cache_dir_utils.default_cache_dir()
    assert compile_cache.directory() == pathlib.Path(default)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert compile_cache.directory() == tmp_path
    assert compile_cache.kernels() == 0
    (tmp_path / "xy").mkdir()
    for name in ("a.so", "a.cpp", "b.so"):
        (tmp_path / "xy" / name).touch()
    assert compile_cache.kernels() == 2
    assert compile_cache.kernels(tmp_path / "missing") == 0
