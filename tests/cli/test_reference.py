"""The configuration reference is generated from the settings, so it cannot drift from them.

We test these aspects:
- docs/configuration.md is exactly what `kopf-csi docs` generates now (regenerate it with
  `kopf-csi docs --output docs/configuration.md` after changing a setting);
- it lists every flag, every variable, and every default that differs from Go with its reason;
- the README's Configuration section links it.
"""

from __future__ import annotations

import pathlib

from kopf_csi import cli, flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_committed_reference_is_current() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == cli.reference(), (
        "docs/configuration.md is stale: run `kopf-csi docs --output docs/configuration.md`"
    )


def test_the_reference_lists_every_flag_variable_and_go_difference() -> None:
    text = cli.reference()
    for flag in flags.table():
        start = f"| `{flag.name}` | `{flag.envs[0]}`"
        row = next(line for line in text.splitlines() if line.startswith(start))
        for env in flag.envs[1:]:
            assert f"`{env}`" in row
        assert f"`{flag.kind.show(flag.default)}`" in row
    for flag in flags.table():
        if flag.go_default:
            go, why = flag.go_default
            assert f"| `{flag.name}` | `{flag.kind.show(flag.default)}` | `{go}` | {why} |" in text
    for option in ("--module", "--no-default-modules", "--log-level", "--liveness"):
        assert f"`{option}`" in text


def test_the_readme_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert "(docs/configuration.md)" in section
