"""Developer sessions: `nox -s tests|lint|typecheck|protos|sandbox|bench`.

Every session installs from `requirements/constraints.txt`, the exact versions CI ran with.
"""

from __future__ import annotations

import pathlib

import nox

ROOT = pathlib.Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
CONSTRAINTS = ("-c", str(ROOT / "requirements" / "constraints.txt"))
GENERATED = ROOT / "src" / "kopf_csi" / "csi" / "_generated"
PROTOS = ROOT / "protos"

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True


def install(session: nox.Session, *groups: str, extras: str = "sandbox") -> None:
    session.install(*CONSTRAINTS, "-e", f".[{extras}]" if extras else ".")
    for group in groups:
        session.install(*CONSTRAINTS, *nox.project.dependency_groups(PYPROJECT, group))


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """Run the test suite: unit, emulator and end-to-end (kind tests skip without Docker)."""
    install(session, "test", "protos")
    session.run("pytest", *(session.posargs or ["-q"]))


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    install(session, "lint", extras="")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src and handlers."""
    install(session, "typecheck")
    session.run("mypy")


@nox.session(python="3.11")
def protos(session: nox.Session) -> None:
    """Regenerate the betterproto2 stubs for grpclib from protos/ into kopf_csi.csi._generated."""
    install(session, "protos", extras="")
    session.run("python", "tools/protogen.py", str(PROTOS), str(GENERATED))


@nox.session(python="3.11")
def sandbox(session: nox.Session) -> None:
    """Start the emulated cluster, the reference driver and the operator, and show them working."""
    install(session)
    session.run("python", "-m", "kopf_csi.sandbox", *session.posargs)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """Benchmark: 1,000 claims end to end, the RSS with 10,000 PVs, 1,000 attaches and detaches.

    Arguments replace the default runs: `nox -s bench -- --claims 200 --class wffc`.
    """
    install(session)
    if session.posargs:
        session.run("python", "-m", "kopf_csi.bench", *session.posargs)
        return
    session.run("python", "-m", "kopf_csi.bench", "--claims", "1000")
    session.run("python", "-m", "kopf_csi.bench", "--scale", "10000")
    session.run("python", "-m", "kopf_csi.bench", "--attach", "1000")
