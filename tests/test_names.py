"""Every compatibility string in `kopf_csi.names` is pinned to its exact bytes somewhere.

Each controller's tests pin its own strings (`tests/<controller>/test_names.py`); this test
makes sure no constant is added without a pin, and that no string is pinned twice.
"""

from __future__ import annotations

from kopf_csi import names

from .attacher.test_names import PINNED as ATTACHER
from .leadership.test_names import PINNED as LEADERSHIP
from .observability.test_names import PINNED as OBSERVABILITY
from .provisioning.test_names import PINNED as PROVISIONER
from .resizer.test_names import PINNED as RESIZER
from .snapshotter.test_names import PINNED as SNAPSHOTTER


def test_observability_pins_its_own_strings_only() -> None:
    others = set(PROVISIONER) | set(ATTACHER) | set(RESIZER) | set(LEADERSHIP) | set(SNAPSHOTTER)
    assert not set(OBSERVABILITY) & others


def test_every_constant_is_pinned() -> None:
    public = {n for n in vars(names) if n.isupper() and isinstance(getattr(names, n), str)}
    assert public == set(PROVISIONER) | set(ATTACHER) | set(RESIZER) | set(LEADERSHIP) | set(
        SNAPSHOTTER
    ) | set(OBSERVABILITY)
    assert not set(PROVISIONER) & set(ATTACHER)
    assert not (set(PROVISIONER) | set(ATTACHER)) & set(RESIZER)
    assert not (set(PROVISIONER) | set(ATTACHER) | set(RESIZER)) & set(LEADERSHIP)
    assert not (set(PROVISIONER) | set(ATTACHER) | set(RESIZER) | set(LEADERSHIP)) & set(
        SNAPSHOTTER
    )
