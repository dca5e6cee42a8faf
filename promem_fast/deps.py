"""Lazy imports of heavy optional libraries, with the exact install command in the error."""

from __future__ import annotations

import importlib
from types import ModuleType

from promem_fast.errors import MissingDependency


def require(module: str, extra: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"the {module!r} module is needed here but could not be imported ({exc}). "
            f"Install it with: pip install 'promem-fast[{extra}]'"
            + (f"  (or: pip install {package})" if package else "")
        ) from exc
