"""A secret that cannot be read because the API server is away holds its operation.

external-provisioner sends DeleteVolume without its secret when it cannot get the secret (it
may have been deleted). In an outage the secret is there, only unread: here the deletion waits
for the server. We test these aspects, with etcd stopped (reads hang, then fail with the
server's 504) while a claim whose driver requires its secret is deleted:
- DeleteVolume is called once, with its secret, after etcd is back;
- no Warning event, no warning line (the outage is told by the client, once).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import structlog

from kopf_csi import names
from kopf_csi.driver import Driver
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.operator import OperatorThread
from kopf_csi.testing.spies import Calls

from ..conftest import until
from ..provisioner.conftest import NAMESPACE, make_claim, make_storage_class, wait_for_bound
from ..provisioner.test_secrets import (  # the driver that refuses a call without its secret
    CREDENTIALS,
    driver_config,  # noqa: F401 (a fixture, used by name)
    make_secret,
)

pytestmark = pytest.mark.usefixtures("kcm")


async def test_a_deletion_waits_for_its_secret_through_an_etcd_stop(
    cluster: EmulatedCluster,
    operator: OperatorThread,
    driver: Driver,
    calls: Calls,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_secret(cluster, "creds", CREDENTIALS)
    parameters = {
        names.PARAM_PROVISIONER_SECRET_NAME: "creds",
        names.PARAM_PROVISIONER_SECRET_NAMESPACE: NAMESPACE,
    }
    await make_storage_class(cluster, operator, parameters=parameters)
    volume = (await wait_for_bound(cluster, make_claim(cluster, "data")))["metadata"]["name"]

    with structlog.testing.capture_logs() as logs:
        asked = cluster.requests.count(verb="get", resource="secrets")
        cluster.control_plane.stop_etcd(timeout=0.3)
        try:
            cluster.delete("persistentvolumeclaims", NAMESPACE, "data")
            # Until the deletion has asked for its secret, and that read has failed.
            await until(
                lambda: cluster.requests.count(verb="get", resource="secrets") > asked, timeout=20
            )
            await asyncio.sleep(0.5)  # its answer (the 504) has come
        finally:
            cluster.control_plane.start_etcd()
        await until(lambda: cluster.get("persistentvolumes", None, volume) is None, timeout=20)

    assert calls.count("DeleteVolume") == 1
    assert not driver.state.volumes
    warnings = [e for e in cluster.objects("events") if e["type"] == "Warning"]
    assert warnings == []
    loud = [
        e for e in logs
        if e["log_level"] in ("warning", "error") and not str(e["event"]).startswith("api_")
    ]  # fmt: skip
    assert not loud, loud
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
