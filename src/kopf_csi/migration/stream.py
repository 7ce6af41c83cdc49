"""A manifest stream as its documents, each with its exact text, so that what is not rewritten
is written back byte for byte.

A stream is what `helm template`, `kustomize build` or `kubectl get -o yaml` print: YAML
documents separated by `---` lines (JSON is YAML too). Each `Document` keeps its text from
its `---` line (included) up to the next one, so joining the documents' texts gives the input
again exactly; `objects` are the Kubernetes objects in it (the items of a `kind: List`, or the
document's one object). Only a document whose objects changed is written anew
(`Document.rewritten`), keeping its separator line and its leading comment lines (Helm's
`# Source: ...`).

This module is the migration's only importer of PyYAML.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

__all__ = ["Document", "StreamError", "dump", "join", "split"]

_SEPARATOR = re.compile(r"^---(?=[ \t]|$)", re.MULTILINE)


class StreamError(ValueError):
    """The input is not a YAML stream of Kubernetes objects; the message says where."""


@dataclasses.dataclass
class Document:
    """One document of the stream: its exact text, and what it holds."""

    text: str
    body: Any  # the parsed document: an object, a `kind: List`, or None (comments only)

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The Kubernetes objects in it, which callers may change in place."""
        if not isinstance(self.body, dict):
            return []
        if self.body.get("kind") == "List" or (
            str(self.body.get("kind", "")).endswith("List") and "items" in self.body
        ):
            return [item for item in self.body.get("items") or [] if isinstance(item, dict)]
        return [self.body] if "kind" in self.body else []

    def rewritten(self) -> str:
        """The document's text for its current body: its separator and leading comments
        kept, the body serialised anew."""
        head: list[str] = []
        for line in self.text.splitlines(keepends=True):
            first = bool(_SEPARATOR.match(line)) and not head
            if not (first or line.startswith("#") or not line.strip()):
                break
            head.append(line if line.endswith("\n") else line + "\n")
        return "".join(head) + dump(self.body)


def dump(body: Any) -> str:
    """Block-style YAML in the objects' own key order, long strings unfolded."""
    text: str = yaml.dump(
        body, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000
    )
    return text


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    """Multi-line strings (the annotation holding the original text) as `|` blocks."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    if "\n" in text and not any(line != line.rstrip() for line in text.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", text)


_Dumper.add_representer(str, _represent_text)


def split(text: str, *, source: str = "<stdin>") -> list[Document]:
    """The documents of `text`, whose texts joined are `text` again."""
    starts = [match.start() for match in _SEPARATOR.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    documents = []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        chunk = text[start:end]
        try:
            body = yaml.safe_load(chunk)
        except yaml.YAMLError as exc:
            line = text.count("\n", 0, start) + 1
            raise StreamError(f"{source}: the document at line {line} is not YAML: {exc}") from None
        documents.append(Document(text=chunk, body=body))
    return documents


def join(documents: Sequence[Document]) -> str:
    return "".join(document.text for document in documents)


def walk(documents: Sequence[Document]) -> Iterator[tuple[Document, dict[str, Any]]]:
    """Every object with the document it is in."""
    for document in documents:
        for obj in document.objects:
            yield document, obj
