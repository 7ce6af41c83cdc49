"""The hypothesis profile of our suites: about 100 examples a test, no deadline, no database.

No deadline: the machine is shared and slow, and a timing flake proves nothing. No example
database: runs leave no files in the tree. `HYPOTHESIS_PROFILE=thorough` runs 2,000 examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "kopf-csi",
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("kopf-csi"), max_examples=2000)


def load() -> None:
    import os

    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kopf-csi"))
