"""Fixtures of `kopf-csi migrate`'s tests: the four shapes real drivers ship (`fixtures/`).

Each fixture is written after a real driver's controller workload, not copied from it:
`hostpath.yaml` (csi-driver-host-path's deploy YAML, named after the sandbox's driver),
`cloud-block.yaml` (a cloud block driver's Helm chart: six sidecars, leader election,
per-sidecar `--timeout`, metrics ports, resources), `file-driver.yaml` (a file driver's chart:
provisioner and resizer only), `rook-ceph.yaml` (a Rook-style ceph-csi provisioner Deployment:
two drivers' sidecars side by side in one pod).
"""

from __future__ import annotations

import io
import pathlib
from collections.abc import Sequence
from typing import Any

import yaml

from kopf_csi.migration import command, transform

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SHAPES = ("hostpath", "cloud-block", "file-driver", "rook-ceph")


def text_of(shape: str) -> str:
    return (FIXTURES / f"{shape}.yaml").read_text()


def objects(text: str) -> list[dict[str, Any]]:
    return [obj for obj in yaml.safe_load_all(text) if obj]


def workload(text: str, kind: str = "") -> dict[str, Any]:
    kinds = (kind,) if kind else ("Deployment", "StatefulSet")
    [found] = [obj for obj in objects(text) if obj["kind"] in kinds]
    return found


def containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def migrated(shape: str, **options: Any) -> transform.Result:
    result = transform.migrate(text_of(shape), **options)
    assert not result.refusals, "\n".join(map(str, result.refusals))
    return result


def run(argv: Sequence[str], stdin: str = "") -> tuple[int, str, str]:
    """`kopf-csi migrate ARGV` in-process: (exit code, stdout, stderr)."""
    import argparse

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = command.run(
        parser.parse_args(list(argv)), stdin=io.StringIO(stdin), stdout=out, stderr=err
    )
    return code, out.getvalue(), err.getvalue()
