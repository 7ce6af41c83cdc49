"""Fault injection: latency, errors and hangs per RPC, changeable while the driver runs.

Two sources of rules, consulted in this order on every call:

- in-process: `driver.faults.fail("CreateVolume", Code.UNAVAILABLE, times=2)`, `.delay(...)`,
  `.hang(...)`, `.add(FaultRule(...))`, `.clear()`; plus `.set_ready(False)` (Probe answers not
  ready), `.mark_abnormal(volume_id, "message")` (the volume's condition turns abnormal) and
  `.respond("CreateVolume", mutate, times=1)` (a nonsense answer: `mutate` gets the response
  message the driver built, after the work was done, and returns the one to send instead);
- a JSON file (`--faults-file`), re-read whenever its mtime, size or inode changes (checked at
  each call, one stat). Write it atomically (write elsewhere, then rename) so that the driver
  never reads half a file; an invalid file is logged and ignored, the previous rules stay::

    {
      "rules": [
        {"method": "CreateVolume", "latency": 0.2},
        {"method": "CreateVolume", "code": "RESOURCE_EXHAUSTED", "times": 2, "message": "full"},
        {"method": "Node*", "code": "UNAVAILABLE", "fraction": 0.1},
        {"method": "ControllerPublishVolume", "hang": true, "times": 1}
      ],
      "ready": true,
      "abnormal": {"<volume_id>": "disk on fire"}
    }

A rule matches a method by name or glob (`*`, `Node*`). For each call, every matching rule
fires with probability `fraction` while it has `times` left (None: forever); a firing rule
spends one of its times and adds its `latency`. The first firing rule with a `code` or `hang`
decides the outcome; later error rules are not consulted and keep their times. A hang lasts
until the call's deadline (the client's timeout), or until the driver stops. Rewriting the
file replaces the file's rules (and their counts); the in-process rules are untouched.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import pathlib
import random
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import structlog

from kopf_csi.csi.codes import Code

__all__ = ["FaultRule", "Faults", "Plan", "ResponseRule", "parse_faults"]

logger = structlog.get_logger("kopf_csi.driver")
_T = TypeVar("_T")

RULE_KEYS = frozenset({"method", "latency", "code", "message", "hang", "times", "fraction"})
FILE_KEYS = frozenset({"rules", "ready", "abnormal"})


@dataclasses.dataclass(kw_only=True, eq=False)
class FaultRule:
    """One rule; mutable only in `times`, which counts down as it fires."""

    method: str = "*"
    """An RPC name (`CreateVolume`) or a glob over them (`*`, `Node*`)."""
    latency: float = 0.0
    """Seconds added before the call is handled (or fails)."""
    code: Code | None = None
    """Fail the call with this code."""
    message: str = "injected fault"
    hang: bool = False
    """Never answer: the call ends at its deadline."""
    times: int | None = None
    """How many more calls this rule fires for; None: all of them."""
    fraction: float = 1.0
    """The probability that the rule fires for a matching call."""

    def __post_init__(self) -> None:
        if self.latency < 0:
            raise ValueError("latency must not be negative")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError("fraction must be within [0, 1]")
        if self.times is not None and self.times < 1:
            raise ValueError("times must be at least 1 (or None for every call)")
        if self.code is Code.OK:
            raise ValueError("code OK is not a fault")

    def matches(self, method: str) -> bool:
        return fnmatch.fnmatchcase(method, self.method)


@dataclasses.dataclass(kw_only=True, eq=False)
class ResponseRule:
    """Replace a successful answer: `mutate(response)` is sent instead (in-process only)."""

    method: str
    mutate: Callable[[Any], Any]
    times: int | None = None
    """How many more answers this rule changes; None: all of them."""

    def __post_init__(self) -> None:
        if self.times is not None and self.times < 1:
            raise ValueError("times must be at least 1 (or None for every call)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """What to do to one call."""

    latency: float = 0.0
    code: Code | None = None
    message: str = ""
    hang: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileFaults:
    """The content of a faults file."""

    rules: list[FaultRule]
    ready: bool = True
    abnormal: Mapping[str, str] = dataclasses.field(default_factory=dict)


class Faults:
    """The fault rules of one running driver (see the module docstring)."""

    def __init__(self, *, path: pathlib.Path | None = None, seed: int | None = None) -> None:
        self.path = path
        self._random = random.Random(seed)
        self._rules: list[FaultRule] = []
        self._responders: list[ResponseRule] = []
        self._ready = True
        self._abnormal: dict[str, str] = {}
        self._file = FileFaults(rules=[])
        self._file_key: tuple[int, int, int] | None = None
        self.refresh()

    # The in-process API.

    def add(self, rule: FaultRule) -> FaultRule:
        self._rules.append(rule)
        return rule

    def delay(
        self, method: str = "*", *, seconds: float, times: int | None = None, fraction: float = 1.0
    ) -> FaultRule:
        return self.add(FaultRule(method=method, latency=seconds, times=times, fraction=fraction))

    def fail(
        self,
        method: str,
        code: Code,
        *,
        times: int | None = None,
        fraction: float = 1.0,
        message: str = "injected fault",
    ) -> FaultRule:
        rule = FaultRule(method=method, code=code, times=times, fraction=fraction, message=message)
        return self.add(rule)

    def hang(self, method: str, *, times: int | None = None, fraction: float = 1.0) -> FaultRule:
        return self.add(FaultRule(method=method, hang=True, times=times, fraction=fraction))

    def respond(
        self, method: str, mutate: Callable[[Any], Any], *, times: int | None = None
    ) -> ResponseRule:
        rule = ResponseRule(method=method, mutate=mutate, times=times)
        self._responders.append(rule)
        return rule

    def remove(self, rule: FaultRule | ResponseRule) -> None:
        for rules in (self._rules, self._responders):
            if rule in rules:
                rules.remove(rule)  # type: ignore[arg-type]

    def clear(self) -> None:
        """Forget the in-process rules, readiness and conditions (not the file's)."""
        self._rules.clear()
        self._responders.clear()
        self._ready = True
        self._abnormal.clear()

    def set_ready(self, ready: bool) -> None:
        self._ready = ready

    def mark_abnormal(self, volume_id: str, message: str = "marked abnormal") -> None:
        self._abnormal[volume_id] = message

    def mark_normal(self, volume_id: str) -> None:
        self._abnormal.pop(volume_id, None)

    @property
    def rules(self) -> list[FaultRule]:
        """The live rules, in-process ones first."""
        return [*self._rules, *self._file.rules]

    @property
    def ready(self) -> bool:
        self.refresh()
        return self._ready and self._file.ready

    def abnormal(self, volume_id: str) -> str | None:
        """The injected abnormal condition of a volume, if any."""
        self.refresh()
        return self._abnormal.get(volume_id) or self._file.abnormal.get(volume_id)

    # Per call.

    def plan(self, method: str) -> Plan:
        """Decide what happens to one call of `method`, spending the rules that fire."""
        self.refresh()
        latency = 0.0
        outcome: FaultRule | None = None
        for rules in (self._rules, self._file.rules):
            for rule in list(rules):
                if not rule.matches(method):
                    continue
                decisive = rule.code is not None or rule.hang
                if decisive and outcome is not None:
                    continue  # the outcome is decided; keep this rule's times for later calls
                if rule.fraction < 1.0 and self._random.random() >= rule.fraction:
                    continue
                latency += rule.latency
                if decisive:
                    outcome = rule
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        rules.remove(rule)
        if outcome is None:
            return Plan(latency=latency)
        return Plan(latency=latency, code=outcome.code, message=outcome.message, hang=outcome.hang)

    def response(self, method: str, response: _T) -> _T:
        """The answer to send for a successful call: mutated by each matching rule, in order."""
        for rule in list(self._responders):
            if fnmatch.fnmatchcase(method, rule.method):
                response = typing.cast(_T, rule.mutate(response))
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self._responders.remove(rule)
        return response

    def refresh(self) -> None:
        """Re-read the faults file if it changed since the last look."""
        if self.path is None:
            return
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self._file_key is not None:
                logger.info("faults_file_removed", path=str(self.path))
            self._file_key = None
            self._file = FileFaults(rules=[])
            return
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if key == self._file_key:
            return
        self._file_key = key  # even if invalid: log once per version, not once per call
        try:
            self._file = parse_faults(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("faults_file_invalid", path=str(self.path), error=str(exc))
            return
        logger.info("faults_file_loaded", path=str(self.path), rules=len(self._file.rules))


def parse_faults(raw: Any) -> FileFaults:
    """The faults file's JSON → rules; ValueError or TypeError when it is malformed."""
    if not isinstance(raw, dict):
        raise TypeError("a faults file holds a JSON object")
    unknown = set(raw) - FILE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; known: {sorted(FILE_KEYS)}")
    rules = [_parse_rule(item) for item in raw.get("rules", [])]
    abnormal = raw.get("abnormal", {})
    if not isinstance(abnormal, dict):
        raise TypeError("abnormal maps volume ids to messages")
    return FileFaults(
        rules=rules,
        ready=bool(raw.get("ready", True)),
        abnormal={str(k): str(v) for k, v in abnormal.items()},
    )


def _parse_rule(raw: Any) -> FaultRule:
    if not isinstance(raw, dict):
        raise TypeError("each rule is a JSON object")
    unknown = set(raw) - RULE_KEYS
    if unknown:
        raise ValueError(f"unknown rule keys {sorted(unknown)}; known: {sorted(RULE_KEYS)}")
    code = raw.get("code")
    return FaultRule(
        method=str(raw.get("method", "*")),
        latency=float(raw.get("latency", 0.0)),
        code=None if code is None else _parse_code(code),
        message=str(raw.get("message", "injected fault")),
        hang=bool(raw.get("hang", False)),
        times=None if raw.get("times") is None else int(raw["times"]),
        fraction=float(raw.get("fraction", 1.0)),
    )


def _parse_code(raw: Any) -> Code:
    if isinstance(raw, bool):
        raise TypeError(f"invalid code {raw!r}")
    if isinstance(raw, int):
        return Code(raw)
    try:
        return Code[str(raw).upper()]
    except KeyError:
        raise ValueError(f"unknown code {raw!r}") from None
