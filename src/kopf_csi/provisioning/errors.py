"""The errors the pure provisioning functions raise, each with the state it leaves the claim in.

    ProvisioningError     the attempt failed; `state` says what that means (see `states`)
     └── IgnoredError     not ours to do (e.g. an external populator's data source): stop quietly

The message is the user-facing text of the Go sidecar for the same failure, byte for byte,
because it ends up in a `ProvisioningFailed` event. These are never kopf exceptions: the
handlers translate them.
"""

from __future__ import annotations

from kopf_csi.provisioning.states import ProvisioningState

__all__ = ["IgnoredError", "ProvisioningError"]


class ProvisioningError(Exception):
    """Provisioning cannot go on; `state` tells whether the driver may still be busy."""

    def __init__(self, message: str, *, state: ProvisioningState, infeasible: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.state = state
        self.infeasible = infeasible
        """Retrying soon cannot help (a provisioner back end's bad parameter): slow retry."""

    @property
    def final(self) -> bool:
        """Nothing runs on the driver: a deleted claim can be forgotten."""
        return self.state is ProvisioningState.FINISHED

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, state={self.state.name})"


class IgnoredError(ProvisioningError):
    """Another actor provisions this claim; no failure event, no retry (the Go `IgnoredError`)."""

    def __init__(self, reason: str, *, event_message: str | None = None) -> None:
        super().__init__(f"ignored because {reason}", state=ProvisioningState.FINISHED)
        self.reason = reason
        self.event_message = event_message
        """A Normal `Provisioning` event to post instead of a failure, if any."""
