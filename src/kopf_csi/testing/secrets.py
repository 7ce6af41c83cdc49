"""Find secret values where they must never be: logs, events, statuses, metrics, exception texts.

A reusable checker for tests and chaos runs. Give it the secret values (or the Secret objects
they come from), feed it every output there is, and ask for leaks::

    checker = LeakChecker()
    checker.add_secret_object(secret_body)          # its decoded data values are secrets
    with capture_logs() as logs:                    # every stdlib and structlog record
        ...                                         # run the operator
    checker.scan("logs", logs.text)
    checker.scan_cluster(cluster)                   # every object but the Secrets themselves
    checker.scan_exception("error", exc)            # str, repr, causes and traceback
    checker.assert_clean()

A value is searched for in each form it may take in text: as it is, base64-encoded (as a
Secret's `data` holds it, and a truncated body would show it), JSON-escaped and repr-escaped.
Values shorter than `MIN_LENGTH` are refused: "a" would be found everywhere and prove nothing.
`scan_paths` does the same over files (a chaos run's logs and dumps).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import logging
import pathlib
import traceback
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import structlog

from kopf_csi import logs

__all__ = [
    "MIN_LENGTH",
    "CapturedLogs",
    "Leak",
    "LeakChecker",
    "capture_logs",
    "exception_text",
    "variants",
]

MIN_LENGTH = 6


@dataclasses.dataclass(frozen=True)
class Leak:
    """Where a secret was found: the source's name, the form, and the text around it."""

    source: str
    form: str
    context: str

    def __str__(self) -> str:
        return f"{self.source}: a secret ({self.form}) in …{self.context}…"


def variants(value: str) -> dict[str, str]:
    """The forms a secret value may take in text, by name (only the distinct ones)."""
    forms = {
        "plain": value,
        "base64": base64.b64encode(value.encode()).decode(),
        "json-escaped": json.dumps(value)[1:-1],
        "repr-escaped": repr(value)[1:-1],
    }
    unique: dict[str, str] = {}
    for name, text in forms.items():
        if text not in unique.values():
            unique[name] = text
    return unique


def exception_text(exc: BaseException) -> str:
    """Everything an exception may show: its traceback, and str/repr/args of every exception
    in its chain (`__cause__` and `__context__`, even where a traceback would hide them)."""
    parts = list(traceback.format_exception(exc))
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parts.extend([str(current), repr(current), *(repr(arg) for arg in current.args)])
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return "\n".join(parts)


class LeakChecker:
    """Secret values, and the leaks found so far in the texts scanned."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        self.leaks: list[Leak] = []
        self.scanned: dict[str, int] = {}
        """Characters scanned per source: proof that a source was not empty by mistake."""
        for value in values:
            self.add(value)

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(self._values)

    def add(self, *values: str) -> None:
        for value in values:
            if len(value) < MIN_LENGTH:
                raise ValueError(
                    f"secret values of fewer than {MIN_LENGTH} characters prove nothing"
                )
            if value not in self._values:
                self._values.append(value)

    def add_secret_object(self, secret: Mapping[str, Any]) -> None:
        """Every value of a Secret object (`data` base64-decoded, and `stringData`)."""
        for value in (secret.get("data") or {}).values():
            self.add(base64.b64decode(value).decode("utf-8", "replace"))
        for value in (secret.get("stringData") or {}).values():
            self.add(str(value))

    def find(self, source: str, text: str) -> list[Leak]:
        """The leaks in one text (also remembered in `leaks`)."""
        found = []
        for value in self._values:
            for form, needle in variants(value).items():
                at = text.find(needle)
                if at >= 0:
                    start, end = max(0, at - 40), at + len(needle) + 40
                    context = text[start:at] + "<SECRET>" + text[at + len(needle) : end]
                    found.append(Leak(source, form, context))
        self.leaks.extend(found)
        return found

    def scan(self, source: str, text: str) -> list[Leak]:
        self.scanned[source] = self.scanned.get(source, 0) + len(text)
        return self.find(source, text)

    def scan_exception(self, source: str, exc: BaseException) -> list[Leak]:
        return self.scan(source, exception_text(exc))

    def scan_objects(self, source: str, objects: Iterable[Mapping[str, Any]]) -> list[Leak]:
        """Objects as JSON, each under `source/<kind>/<namespace>/<name>`."""
        found = []
        for obj in objects:
            meta = obj.get("metadata") or {}
            where = f"{source}/{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"
            found.extend(self.scan(where, json.dumps(obj, sort_keys=True, default=str)))
        return found

    def scan_cluster(self, cluster: Any, *, resources: Iterable[str] | None = None) -> list[Leak]:
        """Every object of an `EmulatedCluster` (events, statuses, annotations, ...).

        Secrets are skipped: they are where the values belong. `resources` limits the scan.
        """
        found = []
        for resource in resources if resources is not None else _plurals(cluster):
            if resource == "secrets":
                continue
            found.extend(self.scan_objects("cluster", cluster.objects(resource)))
        return found

    def scan_paths(self, paths: Iterable[pathlib.Path | str]) -> list[Leak]:
        """Files (a chaos run's logs and dumps), read as UTF-8 with replacement."""
        found = []
        for path in paths:
            text = pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
            found.extend(self.scan(str(path), text))
        return found

    def assert_clean(self) -> None:
        if self.leaks:
            listed = "\n".join(f"- {leak}" for leak in self.leaks)
            raise AssertionError(f"{len(self.leaks)} secret leak(s):\n{listed}")


def _plurals(cluster: Any) -> list[str]:
    kinds = getattr(cluster, "_kinds", {})
    return sorted({kind.plural for kind in kinds.values()})


@dataclasses.dataclass
class CapturedLogs:
    """Every record rendered as one JSON line, exception tracebacks included."""

    stream: io.StringIO = dataclasses.field(default_factory=io.StringIO)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    @property
    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text.splitlines() if line.startswith("{")]


@contextlib.contextmanager
def capture_logs(
    *, level: int = logging.DEBUG, exclude: Iterable[str] = ()
) -> Iterator[CapturedLogs]:
    """Route every structlog and stdlib record (kopf's, aiohttp's, ours) into one buffer.

    Exactly as `kopf_csi.logs.configure` does in production, as JSON lines at the most
    verbose level; `exclude` names loggers to leave out (e.g. the in-process reference driver,
    which stands for the other side of the socket). The previous configuration is restored.
    """
    captured = CapturedLogs()
    skipped = tuple(exclude)
    root = logging.getLogger()
    previous_handlers, previous_level = list(root.handlers), root.level
    previous_levels = {name: logging.getLogger(name).level for name in _TOUCHED}
    previous_config = structlog.get_config()
    logs.configure(level=level, format="json", stream=captured.stream, cache_loggers=False)
    if skipped:
        root.handlers[0].addFilter(lambda record: not record.name.startswith(skipped))
    try:
        yield captured
    finally:
        root.handlers[:] = previous_handlers
        root.setLevel(previous_level)
        for name, previous in previous_levels.items():
            logging.getLogger(name).setLevel(previous)
        structlog.configure(**previous_config)


_TOUCHED = ("hpack",)  # the loggers `logs.configure` sets a level on, besides the root
