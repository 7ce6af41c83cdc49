"""The emulator's malformed-body fault, and what our API client makes of such answers.

We test these aspects:
- a fault with a `body` answers matching requests with that text verbatim, N times, then the
  API answers normally again;
- `KubeClient` turns a body that is not a JSON object into a `KubeError` (reason
  `MalformedResponse`) that says what came back, and never quotes a Secret's body.
"""

from __future__ import annotations

import pathlib

import aiohttp
import pytest

from kopf_csi import kube
from kopf_csi.testing.emulator import EmulatedCluster


async def test_a_body_fault_answers_verbatim_then_stops(cluster: EmulatedCluster) -> None:
    cluster.create("persistentvolumes", {"metadata": {"name": "pv"}})
    cluster.faults.add(200, verb="get", resource="persistentvolumes", body="{not json", times=1)
    url = f"{cluster.url}/api/v1/persistentvolumes/pv"
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            assert (response.status, await response.text()) == (200, "{not json")
            assert response.content_type == "application/json"
        async with session.get(url) as response:
            assert (await response.json())["metadata"]["name"] == "pv"


@pytest.mark.parametrize(
    ("resource", "name", "body", "shown"),
    [
        pytest.param(kube.VOLUMES, "pv", '["a list"]', "'[\"a list\"]'", id="not-an-object"),
        pytest.param(kube.VOLUMES, "pv", "{trunc", "'{trunc'", id="truncated"),
        pytest.param(kube.SECRETS, "s", '{"data": {"k": "c2VjcmV0', "<24 bytes>", id="secret"),
    ],
)
async def test_the_client_reports_malformed_answers(
    cluster: EmulatedCluster,
    kubeconfig: pathlib.Path,
    resource: kube.Resource,
    name: str,
    body: str,
    shown: str,
) -> None:
    cluster.faults.add(200, verb="get", resource=resource.plural, body=body, times=1)
    async with await kube.KubeClient.connect(kubeconfig) as api:
        with pytest.raises(kube.KubeError) as caught:
            await api.get(resource, name, "default" if resource.namespaced else None)
    assert caught.value.reason == "MalformedResponse"
    assert str(caught.value).endswith(f"not a JSON object: {shown}")
    assert "c2VjcmV0" not in str(caught.value)
