"""The verdict as text for a person, or as JSON; both carry the same content.

Text: the verdict first, in one line; then the evidence, one line per fact read; then what to
do. JSON: the same fields, plus the exit code.
"""

from __future__ import annotations

import json
from typing import Any

from kopf_csi.explain.observed import Diagnosis, State

__all__ = ["as_json", "as_text", "error_json"]

_HEADINGS = {State.HEALTHY: "OK", State.BLOCKED: "BLOCKED", State.PROGRESSING: "WAITING"}


def as_text(diagnosis: Diagnosis) -> str:
    lines = [f"{_HEADINGS[diagnosis.state]}: {diagnosis.target}: {diagnosis.summary}"]
    lines += ["Evidence:"] + [f"  {fact}" for fact in diagnosis.evidence]
    if diagnosis.next_steps:
        lines += ["Next:"] + [f"  {step}" for step in diagnosis.next_steps]
    return "\n".join(lines) + "\n"


def as_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    target = diagnosis.target
    return {
        "target": str(target),
        "kind": target.kind,
        "namespace": target.namespace,
        "name": target.name,
        "state": diagnosis.state.value,
        "summary": diagnosis.summary,
        "blocker": diagnosis.blocker,
        "evidence": list(diagnosis.evidence),
        "next": list(diagnosis.next_steps),
        "exit_code": diagnosis.exit_code,
    }


def as_json(diagnosis: Diagnosis) -> str:
    return json.dumps(as_dict(diagnosis), indent=2) + "\n"


def error_json(message: str) -> str:
    return json.dumps({"state": "error", "error": message, "exit_code": 2}, indent=2) + "\n"
