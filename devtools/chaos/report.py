"""The summary tables the chaos and soak runs print (Markdown, so they paste into the docs)."""

from __future__ import annotations

from typing import Any

from devtools.chaos.checks import COUNTS

__all__ = ["format_chaos", "format_soak"]

LABELS = {
    "claims_without_pv": "claims without a PV",
    "pvs_without_volume": "PVs without a backend volume",
    "volumes_without_pv": "backend volumes without a PV (leaks)",
    "attachments_stuck": "VolumeAttachments stuck",
    "finalizers_left": "finalizers left on deleted objects",
    "done_twice": "operations done twice",
    "objects_left": "objects left after deleting everything",
}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def format_chaos(result: dict[str, Any]) -> str:
    config, tally = result["config"], result["chaos"]
    checkpoints = result["checkpoints"]
    lines = [
        f"Chaos run: {config['claims']} claims, {config['attach']} attached, seed "
        f"{config['seed']}, {result['seconds']} s ({config['date']}, {config['cpus']} CPUs, "
        f"revision {config['revision']})",
        "",
    ]
    header = ["count", *(c["label"] for c in checkpoints)]
    rows = [[LABELS[name], *(str(c["counts"][name]) for c in checkpoints)] for name in COUNTS]
    rows.append(["converged in (s)", *(f"{c['seconds']:g}" for c in checkpoints)])
    lines += _table(header, rows)
    lines += ["", *_table(["chaos", "done"], [[k.replace("_", " "), str(v)] for k, v in [
        *tally.items(),
        ("operator incarnations", result["operator_incarnations"]),
        ("operator start failures", result["operator_start_failures"]),
        ("operator crashes (not killed)", len(result["operator_crashes"])),
    ]])]  # fmt: skip
    phases = ", ".join(f"{k} {v:g} s" for k, v in result["phases"].items())
    searched = result["secrets_searched"]
    lines += [
        "",
        f"phases under chaos: {phases}",
        "goal reached after the control plane's last return: "
        + ", ".join(
            f"{k} {'-' if v is None else f'{v:g} s'}"
            for k, v in result.get("converged_after_control_plane", {}).items()
        ),
        f"lost task exceptions: {result.get('lost_task_exceptions', 0)}; outage warnings: "
        + ", ".join(f"{k} {v}" for k, v in result.get("outage_warnings", {}).items()),
        "warning lines by event: "
        + (", ".join(f"{k} {v}" for k, v in result.get("warning_lines", {}).items()) or "none"),
        "driver calls: " + ", ".join(f"{k} {v}" for k, v in result["driver_calls"].items()),
        f"secret values searched for: {searched['values']} in {searched['sources']} sources "
        f"({searched['bytes']:,} bytes); found: {len(result['secret_exposures'])}",
    ]
    for checkpoint in checkpoints:
        for name, items in checkpoint["details"].items():
            lines.append(f"  {checkpoint['label']}: {name}: {'; '.join(items)}")
    lines += [f"  exposed: {item}" for item in result["secret_exposures"]]
    lines += [f"  duplicate: {item}" for item in result["duplicates"][:10]]
    lines.append("result: " + ("PASS (every count 0)" if result["ok"] else "FAIL"))
    return "\n".join(lines)


def format_soak(result: dict[str, Any]) -> str:
    config, flat = result["config"], result["flatness"]
    lines = [
        f"Soak run: {config['total']:,} claims in waves of {config['wave']}, "
        f"{result['seconds']} s ({config['date']}, {config['cpus']} CPUs, "
        f"revision {config['revision']})",
        "",
    ]
    rows = [
        [str(p["wave"]), f"{p['claims']:,}", f"{p['seconds']:g}", f"{p['cpu_ms_per_claim']:g}",
         f"{p['rss_mib']:g}", f"{p['hwm_mib']:g}"]
        for p in result["points"]
    ]  # fmt: skip
    lines += _table(
        ["wave", "claims so far", "wave s", "CPU ms/claim", "RSS MiB", "peak RSS MiB"], rows
    )
    lines.append("")
    if "cpu_ratio" in flat:
        lines.append(
            f"CPU ms/claim: early median {flat['cpu_ms_early']}, late median "
            f"{flat['cpu_ms_late']} (ratio {flat['cpu_ratio']}); RSS after wave 2 "
            f"{flat['rss_after_wave_2_mib']} MiB, at the end {flat['rss_end_mib']} MiB "
            f"(growth {flat['rss_growth_mib']} MiB)"
        )
    lines.append("counts at the end: " + ", ".join(f"{k} {v}" for k, v in result["counts"].items()))
    lines.append("result: " + ("PASS" if result["ok"] else "FAIL"))
    return "\n".join(lines)
