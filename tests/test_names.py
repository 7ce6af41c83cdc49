"""Every compatibility string in `kopf_csi.names` is pinned to its exact bytes somewhere.

Each controller's tests pin its own strings (`tests/<controller>/test_names.py`); this test
makes sure no constant is added without a pin, and that no string is pinned twice.
"""

from __future__ import annotations

from kopf_csi import names

from .attacher.test_names import PINNED as ATTACHER
from .provisioning.test_names import PINNED as PROVISIONER


def test_every_constant_is_pinned() -> None:
    public = {n for n in vars(names) if n.isupper() and isinstance(getattr(names, n), str)}
    assert public == set(PROVISIONER) | set(ATTACHER)
    assert not set(PROVISIONER) & set(ATTACHER)
