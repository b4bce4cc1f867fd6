"""Every encoding lives in its own module here; importing this package registers
them all.

Modules are discovered automatically, so adding an encoding touches no shared file:
write ``posenc_lib/encodings/<name>.py`` with an ``__all__`` and a
``@register`` factory.
"""

from __future__ import annotations

import importlib
import pkgutil

__all__: list[str] = []

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("_"):
        continue
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name in getattr(_module, "__all__", []):
        if _name in globals() and globals()[_name] is not getattr(_module, _name):
            raise ImportError(
                f"posenc_lib.encodings.{_info.name} exports {_name!r}, which another "
                "module already exports"
            )
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
