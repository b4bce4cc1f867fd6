"""torch.compile's kernel cache keyed without the folder torch is installed in, for the
unit tests.

torch caches each C++ kernel it compiles under a hash of the kernel's source and
compile command, and both name the folder torch is installed in (the source includes
``<site-packages>/torch/_inductor/codegen/cpp_prefix.h``, the command its headers'
folder). A clean clone makes a new ``.venv``, so every clean run of the test command
compiled again every kernel the unit tests compile: about 450 s of this 2-core
machine's CPU (measured: 45.6 s against 10.5 s for eight FlexAttention tests in a new
environment with the cache of another).

``apply()`` hashes the source and the command with that folder replaced by torch's
version and build (``torch.__version__``, ``torch.version.git_version``): a kernel
compiled in one environment serves another with the same torch, the same source, the
same headers and the same flags; a different torch never shares a kernel. The source
file a compile reads is rewritten with this environment's paths when the cached one
names another's. A torch without these internals is left as it is (its cache then
keyed as torch keys it).

tests/conftest.py calls ``apply_on_import()``: the patch is made when a test first
imports torch's compiler (``torch._inductor.codecache``), not before, so a pytest
process that compiles nothing (a stage that runs notebooks in their kernels, the
browser tests) does not import torch's compiler, about 3 s of CPU each.

``kernels()`` counts the kernels the cache holds, without importing torch: the test
command reports the count at its start and end (tools/build/schedule.py).
"""

from __future__ import annotations

import getpass
import importlib.abc
import importlib.util
import os
import pathlib
import re
import sys
import tempfile

_MARK = "_posenc_folder_free"
CODECACHE = "torch._inductor.codecache"


def directory() -> pathlib.Path:
    """The folder torch's compiler keeps its cache in, named as torch names it
    (``TORCHINDUCTOR_CACHE_DIR``, else ``<temp>/torchinductor_<user>``), without
    importing torch or creating the folder."""
    named = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if named:
        return pathlib.Path(named).absolute()
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    user = re.sub(r'[\\/:*?"<>|]', "_", user)
    return pathlib.Path(tempfile.gettempdir()) / f"torchinductor_{user}"


def kernels(where: pathlib.Path | None = None) -> int:
    """How many compiled C++ kernels (shared libraries) the cache holds, 0 without
    one: the test command reports it at its start and end, since a machine whose cache
    is empty compiles each of them in the unit stages (tools/README.md)."""
    where = directory() if where is None else where
    return sum(1 for _ in where.rglob("*.so")) if where.is_dir() else 0


def folder() -> str:
    """The folder torch is installed in (site-packages, or a source checkout)."""
    import torch

    return os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


def tag() -> str:
    import torch

    return f"<torch {torch.__version__} {torch.version.git_version}>"


def _without_folder(text, root: str, name: str):
    if isinstance(text, str):
        return text.replace(root, name)
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).replace(root.encode(), name.encode())
    return text


def apply() -> bool:
    """Key torch's code cache without torch's folder (see the module); whether it
    could (False: this torch has no such cache functions)."""
    try:
        from torch._inductor import codecache
    except ImportError:
        return False
    code_hash, write = (
        getattr(codecache, "code_hash", None),
        getattr(codecache, "write", None),
    )
    if code_hash is None or write is None:
        return False
    if getattr(code_hash, _MARK, False):
        return True
    root, name = folder(), tag()

    def folder_free_hash(code, extra=""):
        return code_hash(
            _without_folder(code, root, name), _without_folder(extra, root, name)
        )

    def refreshing_write(content, extension, extra="", *args, **kwargs):
        basename, path = write(content, extension, extra, *args, **kwargs)
        mode = "rb" if isinstance(content, bytes) else "r"
        try:
            with open(path, mode) as f:
                stale = f.read() != content  # written by another environment
        except OSError:
            stale = False
        if stale:
            codecache.write_atomic(path, content, make_dirs=True)
        return basename, path

    setattr(folder_free_hash, _MARK, True)
    codecache.code_hash = folder_free_hash
    codecache.write = refreshing_write
    return True


class _OnImport(importlib.abc.MetaPathFinder):
    """Finds ``torch._inductor.codecache`` as Python would, and applies the patch once
    the module has run (then takes itself off ``sys.meta_path``)."""

    def find_spec(self, name, path, target=None):
        if name != CODECACHE:
            return None
        # the search below, and every later import, without this finder
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            apply()

        spec.loader.exec_module = exec_module
        return spec


def apply_on_import() -> bool:
    """``apply()`` now if torch's compiler is imported, else when it first is; whether
    it was applied now."""
    if CODECACHE in sys.modules:
        return apply()
    if not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())
    return False
