"""Regenerate the betterproto2 stubs for grpclib from `protos/`.

Usage: python tools/protogen.py [PROTOS_DIR [OUT_DIR]]

The output directory is replaced as a whole, so a stub for a removed message cannot linger.
Runs protoc from grpcio-tools with the betterproto2 compiler plugin; both are pinned in the
`protos` dependency group. `tests/test_protos.py` regenerates into a temporary directory and
fails when the committed stubs differ.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_PROTOS = ROOT / "protos"
DEFAULT_OUT = ROOT / "src" / "kopf_csi" / "csi" / "_generated"
OPTIONS = "client_generation=async,server_generation=async"


def generate(protos: pathlib.Path, out: pathlib.Path) -> None:
    sources = sorted(str(p.relative_to(protos)) for p in protos.rglob("*.proto"))
    bindir = str(pathlib.Path(sys.executable).parent)
    plugin = shutil.which("protoc-gen-python_betterproto2", path=bindir)
    if not plugin:
        raise SystemExit("protoc-gen-python_betterproto2 not found: install the `protos` group")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{protos}",
                f"--plugin=protoc-gen-python_betterproto2={plugin}",
                f"--python_betterproto2_out={tmp}",
                f"--python_betterproto2_opt={OPTIONS}",
                *sources,
            ],
            check=True,
            cwd=protos,
            stdout=subprocess.DEVNULL,
            # The plugin formats its output with `ruff`: find the pinned one beside this Python.
            env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"},
        )
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)


def main(argv: list[str]) -> None:
    protos = pathlib.Path(argv[0]) if argv else DEFAULT_PROTOS
    out = pathlib.Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    generate(protos.resolve(), out.resolve())


if __name__ == "__main__":
    main(sys.argv[1:])
