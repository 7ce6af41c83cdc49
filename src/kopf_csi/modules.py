"""Which handler modules the operator runs, and loading them into a kopf registry.

`DEFAULT_MODULES` is the canonical list: `kopf-csi run` loads it (unless told not to) plus the
user's own modules; the test and benchmark runners load it too. Each module is either a dotted
name (`kopf_csi_handlers.provisioner`, `mypkg.handlers`) or a path to a Python file
(`./my_handlers.py`). Dotted names are found from the current directory too, as `python -m`
finds them, wherever the modules are loaded from: `kopf-csi run`, the sandbox, the testing kit.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import pathlib
import sys
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import kopf

    from kopf_csi import rbac

# kopf, `rbac` and `runtime` (kopf again, aiohttp, kubernetes-asyncio) are imported by the
# functions that load modules, not here: `kopf_csi.cli` imports this module for the list alone,
# and `kopf-csi explain`, `docs` and `--help` would pay kopf's import (0.2-0.4 s) for nothing.

__all__ = ["DEFAULT_MODULES", "ModuleLoadError", "declared_rbac", "failure", "is_path", "load"]

DEFAULT_MODULES = (
    # Metrics and probes first: before anything waits (driver, leadership).
    "kopf_csi_handlers.observability",
    "kopf_csi_handlers.lifecycle",
    "kopf_csi_handlers.caches",
    "kopf_csi_handlers.provisioner",
    "kopf_csi_handlers.capacity",
    "kopf_csi_handlers.attacher",
    "kopf_csi_handlers.health",
    "kopf_csi_handlers.snapshotter",
    "kopf_csi_handlers.groupsnapshotter",
    "kopf_csi_handlers.resizer",
)
"""Start-up first (it fills the memo the others wait for), then the caches, then controllers."""


class ModuleLoadError(Exception):
    """A module named by the user does not exist (its own import errors are not this)."""


def is_path(module: str) -> bool:
    """A file path (`handlers/mine.py`, `./x.py`) rather than a dotted module name."""
    return module.endswith(".py") or "/" in module or "\\" in module


def load(modules: Iterable[str], *, registry: kopf.OperatorRegistry) -> None:
    """Import `modules` in order with `registry` as kopf's default, so their handlers land in it.

    A module imported before (by an earlier run in this process) is re-executed: its decorators
    must register into this registry too. A file is executed under a name of its own. Last, a
    start-up handler that tells the others when every start-up handler has run
    (`runtime.mark_started`: our own watches start then, as kopf's do).
    """
    import kopf

    from kopf_csi import rbac, runtime

    modules = tuple(modules)
    if not all(is_path(module) for module in modules):
        _importable_from_here()
    previous = kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        for module in modules:
            before = {id(handler) for handler in _startup_handlers(registry)}
            declared = rbac.mark()
            try:
                if is_path(module):
                    _load_file(pathlib.Path(module))
                else:
                    _load_module(module)
            except Exception as exc:
                exc.handler_module = module  # type: ignore[attr-defined]  # for `failure()`
                raise
            _watch_startup(registry, module, known=before)
            rbac.assign(registry, module, rbac.since(declared))  # its RBAC (`kopf-csi rbac`)
    finally:
        kopf.set_default_registry(previous)
    kopf.on.startup(registry=registry, id=runtime.STARTED_HANDLER_ID)(runtime.mark_started)


def _startup_handlers(registry: kopf.OperatorRegistry) -> list[Any]:
    handlers = registry._activities._handlers  # kopf private API (kopf is pinned exactly)
    return [h for h in handlers if getattr(h.activity, "value", None) == "startup"]


def _watch_startup(registry: kopf.OperatorRegistry, module: str, *, known: set[int]) -> None:
    """The start-up handlers `module` added keep their failures in the memo, naming the module
    (`runtime.watch_startup`): for `/readyz` and the testing kit, which raises the first."""
    handlers = registry._activities._handlers  # kopf private API, as above
    for index, handler in enumerate(handlers):
        if id(handler) in known or getattr(handler.activity, "value", None) != "startup":
            continue
        from kopf_csi import runtime

        watched = runtime.watch_startup(handler.fn, module=module, handler=str(handler.id))
        handlers[index] = dataclasses.replace(handler, fn=watched)


def failure(exc: BaseException) -> dict[str, str]:
    """What to say first about a module that failed on import: its file, line and error, and
    the module (for `module_failed_to_load`, before the traceback: under JSON logs, the
    traceback is one long line, and a SyntaxError's file was only at its end)."""
    if isinstance(exc, SyntaxError):
        where, text = (exc.filename, exc.lineno), f"SyntaxError: {exc.msg}"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1] if frames else None
        where = (last.filename, last.lineno) if last else (None, None)
        text = f"{type(exc).__name__}: {exc}"
    file, line = where
    place = f"{file}, line {line}: " if file else ""
    return {"error": f"{place}{text}", "module": str(getattr(exc, "handler_module", "?"))}


def declared_rbac(modules: Iterable[str]) -> dict[str, tuple[rbac.Rule, ...]]:
    """The RBAC each of `modules` declares (`kopf-csi rbac`): loaded into a registry of their
    own, as `load` loads them, with the same errors."""
    import kopf

    from kopf_csi import rbac

    registry = kopf.OperatorRegistry()
    load(modules, registry=registry)
    return rbac.declared(registry)


def _importable_from_here() -> None:
    """The current directory on the import path, as `python -m` puts it there (a console
    script's path, `kopf-csi` or `pytest`, starts with its own bin directory instead)."""
    here = os.getcwd()
    if not {"", ".", here} & set(sys.path):
        sys.path.insert(0, here)


def _load_module(name: str) -> None:
    if name in sys.modules:
        importlib.reload(sys.modules[name])
        return
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only when the named module itself (or its package) is missing; a module that is there
        # but fails on a missing import of its own is the user's bug, shown with its traceback.
        if exc.name is not None and (name == exc.name or name.startswith(f"{exc.name}.")):
            raise ModuleLoadError(f"no module named {name!r}") from None
        raise


def _load_file(path: pathlib.Path) -> None:
    if not path.is_file():
        hint = ""
        if path.suffix != ".py" and path.with_name(path.name + ".py").is_file():
            hint = f" (did you mean {str(path) + '.py'!r}?)"
        elif path.suffix != ".py" and "/" in str(path):
            dotted = ".".join(path.parts)
            hint = f" (a file needs its .py; a module is dotted: {dotted!r})"
        raise ModuleLoadError(f"no such handler file: {str(path)!r}{hint}")
    path = path.resolve()
    # As `kopf run file.py` and `python file.py` do: the file's directory is importable, so the
    # file can import its siblings.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = f"kopf_csi_user_{path.stem}_{abs(hash(str(path))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleLoadError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
