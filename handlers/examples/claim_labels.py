"""Example handler module: pass a claim's labels to the driver as CreateVolume parameters.

Load it beside the default modules: `kopf-csi run -m kopf_csi_handlers.examples.claim_labels`.

A label `parameters.kopf-csi.kopf.dev/<name>: <value>` on a PersistentVolumeClaim becomes the
CreateVolume parameter `<name>=<value>`. The StorageClass wins where both set a key: the class
is the administrator's, the claim is the user's. Other labels are not passed on.

It is a few lines on top of `kopf_csi.api`'s CreateVolume hooks; see the README's "Writing a handler
module" and its tests in `tests/examples/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from kopf_csi import api

LABEL_PREFIX = "parameters.kopf-csi.kopf.dev/"


def label_parameters(claim: Mapping[str, Any]) -> dict[str, str]:
    """The parameters the claim's labels ask for: the pure part, tested on its own."""
    labels = claim.get("metadata", {}).get("labels") or {}
    return {
        key.removeprefix(LABEL_PREFIX): str(value)
        for key, value in labels.items()
        if key.startswith(LABEL_PREFIX) and key != LABEL_PREFIX
    }


async def add_label_parameters(
    claim: Mapping[str, Any], storage_class: Mapping[str, Any], request: api.CreateVolumeRequest
) -> None:
    for name, value in label_parameters(claim).items():
        request.parameters.setdefault(name, value)


@kopf.on.startup(id="examples.claim_labels")
async def register(memo: kopf.Memo, **_: Any) -> None:
    api.create_volume_hooks(memo).append(add_label_parameters)
