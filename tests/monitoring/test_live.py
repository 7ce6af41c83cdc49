"""The dashboard and the alerts against a real Prometheus scraping a real operator.

We test these aspects, with Prometheus on 127.0.0.1 scraping the operator's `/metrics` every
second (the kit's operator: kopf in a thread, the emulated API, the reference driver):

- after a small workload (claims provisioned, one failed CreateVolume, an attach and a detach,
  one failed DeleteVolume, one 503 of the API), every dashboard variable resolves and every
  panel's query returns data: a misspelt metric or label name returns none and fails;
- every alert's signals (the expressions its threshold compares, `Alert.signals`) return data,
  and every metric an alert names is inside one of its signals: the conditions themselves
  return nothing on a healthy operator, by design, so their parts are queried instead;
- every metric name the rules and the dashboard use is one the operator exported in that run;
- the stuck-work alert, its threshold lowered to seconds for the test (the shipped 180 s
  stays), stays silent through healthy claims and fires while the driver holds a CreateVolume
  longer than that; it resolves once the call ends.

Every wait polls with a deadline; nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.monitoring import alerts, dashboard
from kopf_csi.csi.codes import Code
from kopf_csi.driver import Driver
from kopf_csi.settings import (
    CSISettings,
    HTTPSettings,
    LeaderElectionSettings,
    ProvisionerOptions,
    Settings,
)
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..provisioner.conftest import (
    make_claim,
    make_pod,
    make_storage_class,
    wait_for_bound,
    wait_for_gone,
)
from .conftest import DASHBOARD, RULES, Prometheus, write_yaml
from .promql import metric_names

NAMESPACE = "kopf-csi"  # the scrape target's label, as prometheus-operator would add it
RATE_INTERVAL = "1m"  # Grafana's $__rate_interval: plenty of 1 s scrapes
STUCK_AFTER = 4.0  # the stuck-work threshold for the test: a healthy claim takes far less
CSI_TIMEOUT = 12.0  # a held CreateVolume stays in work this long: the alert fires for 8 s


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        csi=CSISettings(address=settings.csi.address, timeout=CSI_TIMEOUT, connect_timeout=10.0),
        provisioner=ProvisionerOptions(retry_interval_start=0.05, retry_interval_max=0.5),
        http=HTTPSettings(endpoint="127.0.0.1:0"),
        leader_election=LeaderElectionSettings(
            enabled=True, lease_duration=2.0, renew_deadline=1.0,
            retry_period=0.2,
        ),
    )  # fmt: skip


def _target(operator: OperatorThread) -> str:
    return str(operator.memo.http_server.url).removeprefix("http://")


async def _scrape(operator: OperatorThread) -> set[str]:
    """The sample names of the operator's /metrics now (`x_bucket`, `x_total`, ...)."""
    url = operator.memo.http_server.url + "/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


async def _all_return_data(
    prometheus: Prometheus, queries: dict[str, str], *, timeout: float = 30.0
) -> dict[str, str]:
    """Query each until it returns data; {label: expr} of those that never did."""
    missing = dict(queries)
    deadline = time.monotonic() + timeout
    while missing and time.monotonic() < deadline:
        for label, expr in list(missing.items()):
            if await prometheus.query(expr):
                del missing[label]
        if missing:
            await asyncio.sleep(0.5)
    return missing


async def _poll(check: Callable[[], Awaitable[Any]], what: str, *, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(0.2)
    return result


async def _workload(cluster: EmulatedCluster, driver: Driver, operator: OperatorThread) -> None:
    """Claims provisioned (one CreateVolume failing first), one attached to a pod and detached,
    all deleted (one DeleteVolume failing first), one event refused with a 503."""
    driver.faults.fail("CreateVolume", Code.RESOURCE_EXHAUSTED, times=1)
    driver.faults.fail("DeleteVolume", Code.UNAVAILABLE, times=1)
    cluster.faults.add(503, verb="create", resource="events", times=1)
    await make_storage_class(cluster, operator, "fast")
    claims = [make_claim(cluster, f"data-{index}", storage_class="fast") for index in range(3)]
    for claim in claims:
        await wait_for_bound(cluster, claim, timeout=30)
    make_pod(cluster, "app", "data-0")
    await _until_cluster(lambda: _attached(cluster), "a VolumeAttachment attached")
    cluster.delete("pods", "default", "app")
    await _until_cluster(lambda: not cluster.objects("volumeattachments"), "the attachment gone")
    for claim in claims:
        cluster.delete("persistentvolumeclaims", "default", claim["metadata"]["name"])
    await _until_cluster(lambda: not cluster.objects("persistentvolumes"), "every PV deleted")


def _attached(cluster: EmulatedCluster) -> bool:
    attachments = cluster.objects("volumeattachments")
    return bool(attachments) and all(a.get("status", {}).get("attached") for a in attachments)


async def _until_cluster(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(0.05)


def _regex(values: list[str]) -> str:
    """Values as Grafana's Prometheus data source joins them: a regex alternation, its
    special characters escaped with a backslash that PromQL's string escapes once more."""
    return "|".join(re.sub(r"([.*+?^${}()|\[\]\\])", r"\\\\\1", v) for v in values)


async def _variables(prometheus: Prometheus) -> dict[str, str]:
    """Each dashboard variable resolved as Grafana resolves it (every value: "All")."""
    resolved = {"job": alerts.JOB}
    for name, (_, query, _) in dashboard.VARIABLES.items():
        found = re.fullmatch(r"label_values\((.*), (\w+)\)", query)
        assert found, query
        selector, label = found.groups()
        result = await prometheus.query(f"group by ({label}) ({_substitute(selector, resolved)})")
        values = sorted({sample["metric"].get(label, "") for sample in result})
        assert values, f"the dashboard variable {name} has no values: {query}"
        resolved[name] = _regex(values)
    return resolved


def _substitute(expr: str, variables: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${name}", variables[name])
    assert "$" not in expr, f"a variable left: {expr}"
    return expr


async def test_every_panel_and_every_alert_returns_data(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    operator: OperatorThread,
    prometheus: Prometheus,
) -> None:
    await prometheus.start(
        targets=[_target(operator)], rules=RULES, labels={"namespace": NAMESPACE}
    )
    await _workload(cluster, driver, operator)
    # The workload's last series are in Prometheus, in two scrapes at least (for rates).
    await _poll(
        lambda: prometheus.query(
            "count_over_time(controller_persistentvolume_delete_total[1m]) > 1"
        ),
        "the deletions scraped twice",
    )
    exported = await _scrape(operator)
    variables = await _variables(prometheus)

    document = json.loads(DASHBOARD.read_text())
    panels = {
        f"panel {title!r}: {expr}": _substitute(expr, variables)
        for title, expr in dashboard.queries(document)
    }
    signals = {
        f"alert {alert.name}: {signal}": signal
        for alert in alerts.ALERTS
        for signal in alert.signals
    }
    missing = await _all_return_data(prometheus, {**panels, **signals})
    assert not missing, "no data from:\n" + "\n".join(missing)

    used = {name for expr in [*panels.values(), *signals.values()] for name in metric_names(expr)}
    assert used - exported - {"up"} == set(), "not exported by the operator"
    for alert in alerts.ALERTS:
        in_signals = set().union(*(metric_names(signal) for signal in alert.signals))
        assert metric_names(alert.expr) <= in_signals, alert.name
    # Prometheus loaded the shipped rules and evaluates them; none fires on this run.
    firing = [a for a in (await prometheus.api("alerts"))["alerts"] if a["state"] == "firing"]
    assert not firing, firing


async def test_the_stuck_work_alert_fires_only_on_a_held_create_volume(
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    driver: Driver,
    operator: OperatorThread,
    prometheus: Prometheus,
    tmp_path: pathlib.Path,
) -> None:
    # The shipped rules, the stuck-work threshold lowered to seconds, `for` to none.
    lowered = alerts.alerts(stuck_after=STUCK_AFTER, stuck_for="0s")
    rules = write_yaml(tmp_path / "rules.yaml", alerts.rule_groups(lowered))
    await prometheus.start(targets=[_target(operator)], rules=rules, labels={})
    await make_storage_class(cluster, operator, "fast")
    healthy = [make_claim(cluster, f"healthy-{index}", storage_class="fast") for index in range(3)]
    for claim in healthy:
        await wait_for_bound(cluster, claim, timeout=30)
    finished = time.time()
    # Evaluated, every second, past the healthy claims: never pending, never firing.
    await _poll(
        lambda: _evaluated_after(prometheus, finished + 2), "rules evaluated after the claims"
    )
    assert not await prometheus.query('ALERTS{alertname="KopfCSIWorkStuck"}[10m]')

    driver.faults.hang("CreateVolume", times=1)
    held = make_claim(cluster, "held", storage_class="fast")
    (alert,) = await _poll(lambda: _firing(prometheus), "KopfCSIWorkStuck firing")
    assert alert["labels"]["name"] == "claims"
    assert float(alert["value"]) > STUCK_AFTER
    assert alert["annotations"]["summary"].startswith("kopf-csi has held an item of claims for")
    assert alert["annotations"]["runbook_url"].endswith("/runbooks.md#kopfcsiworkstuck")

    # The call ends at its deadline, and its retry provisions the claim: the alert resolves.
    await wait_for_bound(cluster, held, timeout=CSI_TIMEOUT + 30)
    await _poll(lambda: _none(prometheus.alerts("KopfCSIWorkStuck")), "KopfCSIWorkStuck resolved")
    for claim in [*healthy, held]:
        cluster.delete("persistentvolumeclaims", "default", claim["metadata"]["name"])
    for claim in [*healthy, held]:
        await wait_for_gone(
            cluster, "persistentvolumeclaims", claim["metadata"]["name"], timeout=30
        )


async def _evaluated_after(prometheus: Prometheus, moment: float) -> bool:
    return await prometheus.evaluations() > moment


async def _firing(prometheus: Prometheus) -> list[dict[str, Any]]:
    return [a for a in await prometheus.alerts("KopfCSIWorkStuck") if a["state"] == "firing"]


async def _none(found: Awaitable[list[Any]]) -> bool:
    return not await found


def test_the_shipped_threshold_is_production_grade() -> None:
    (stuck,) = [alert for alert in alerts.ALERTS if alert.name == "KopfCSIWorkStuck"]
    assert stuck.expr.endswith("> 180")
    assert stuck.for_ == "2m"
