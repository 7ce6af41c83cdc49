"""kubernetes-asyncio without its 800 generated classes loaded up front (about 35 MiB per process).

`kubernetes_asyncio.client` (and its `models` and `api` subpackages) import every generated
model and API class when first imported, and kopf imports it at start-up only to recognise two
model classes. We use none of them: `kopf_csi.kube` sends plain dicts. `install()` puts lazy
stand-ins for those three packages into `sys.modules` before anything imports them. Each
stand-in is the real package directory, with the real package's names resolved on first use
from the `from X import Y` lines of its own `__init__.py`, so `client.CoreV1Api`,
`client.models.V1Pod` and `import kubernetes_asyncio.client.rest` work as before.

Installed by `kopf_csi/__init__.py`, hence before kopf when the operator starts through
`kopf-csi run`. Where kubernetes-asyncio was imported earlier (e.g. under `kopf run`), it does
nothing and everything is as usual, only bigger. Everything here runs at import time only.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import pathlib
import re
import sys
import types
from typing import Any

__all__ = ["LAZY_PACKAGES", "install"]

LAZY_PACKAGES = ("kubernetes_asyncio.client", "kubernetes_asyncio.client.models",
                 "kubernetes_asyncio.client.api")  # fmt: skip
_IMPORT_LINE = re.compile(r"^from ([\w.]+) import (\w+)\s*(?:#.*)?$", re.MULTILINE)
_VERSION_LINE = re.compile(r"^__version__ = \"([^\"]+)\"", re.MULTILINE)


class _LazyPackage(types.ModuleType):
    """A package whose `__init__` is not run: its names are imported when first asked for."""

    def __init__(self, name: str, directory: pathlib.Path) -> None:
        super().__init__(name)
        init = directory / "__init__.py"
        self.__file__ = str(init)
        self.__path__ = [str(directory)]
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        self.__spec__.submodule_search_locations = [str(directory)]
        text = init.read_text(encoding="utf-8")
        self._sources = {attr: module for module, attr in _IMPORT_LINE.findall(text)}
        self.__all__ = list(self._sources)
        version = _VERSION_LINE.search(text)
        if version:
            self.__version__ = version.group(1)

    def __getattr__(self, attr: str) -> Any:
        source = self.__dict__.get("_sources", {}).get(attr)
        if source is not None:
            value = getattr(importlib.import_module(source), attr)
        elif not attr.startswith("_") and self._has_submodule(attr):
            value = importlib.import_module(f"{self.__name__}.{attr}")
        else:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        setattr(self, attr, value)
        return value

    def _has_submodule(self, attr: str) -> bool:
        directory = pathlib.Path(self.__path__[0])
        return (directory / f"{attr}.py").is_file() or (directory / attr / "__init__.py").is_file()

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._sources))


def install() -> bool:
    """Install the lazy packages; False (and nothing done) if they are imported already."""
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return False
    spec = importlib.util.find_spec("kubernetes_asyncio")  # top level: finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return False
    root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    for name in LAZY_PACKAGES:
        directory = root.joinpath(*name.split(".")[1:])
        if not (directory / "__init__.py").is_file():
            return False
    for name in LAZY_PACKAGES:
        sys.modules[name] = _LazyPackage(name, root.joinpath(*name.split(".")[1:]))
    return True
