"""The Kubernetes API client: the only module that imports kubernetes-asyncio.

For now it only logs in (kubeconfig or in-cluster) and describes the credentials it found, so
that kopf and our own API calls use the same identity and the same server.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib
from typing import Any

import kubernetes_asyncio.client
import kubernetes_asyncio.config

__all__ = ["Credentials", "LoginError", "login"]


class LoginError(RuntimeError):
    """Neither the service account nor the kubeconfig gave us a way to the API."""


@dataclasses.dataclass(frozen=True, repr=False)
class Credentials:
    server: str
    insecure: bool
    ca_path: str | None = None
    scheme: str | None = None
    token: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None

    def __repr__(self) -> str:  # the token is a secret: never print it
        return f"Credentials(server={self.server!r}, insecure={self.insecure})"


async def login(kubeconfig: pathlib.Path | None) -> Credentials:
    """Configure kubernetes-asyncio's default client and return the credentials it uses.

    An explicit kubeconfig wins; otherwise in-cluster, then the default kubeconfig. The path is
    passed explicitly because kubernetes-asyncio reads `$KUBECONFIG` once, at import time.
    """
    try:
        if kubeconfig is not None:
            await kubernetes_asyncio.config.load_kube_config(config_file=str(kubeconfig))
        else:
            try:
                kubernetes_asyncio.config.load_incluster_config()  # type: ignore[no-untyped-call]
            except kubernetes_asyncio.config.ConfigException:
                await kubernetes_asyncio.config.load_kube_config()
    except (kubernetes_asyncio.config.ConfigException, OSError) as exc:
        where = str(kubeconfig) if kubeconfig else "in-cluster or ~/.kube/config"
        raise LoginError(f"cannot log in to Kubernetes ({where}): {exc}") from exc
    config = kubernetes_asyncio.client.Configuration.get_default_copy()
    maybe_header: Any = config.get_api_key_with_prefix("BearerToken")
    header: str | None = await maybe_header if inspect.isawaitable(maybe_header) else maybe_header
    parts = header.split(" ", 1) if header else []
    scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0] if parts else None)
    if not config.host:
        raise LoginError("the Kubernetes configuration names no API server")
    return Credentials(
        server=config.host,
        insecure=not config.verify_ssl,
        ca_path=config.ssl_ca_cert,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
    )
