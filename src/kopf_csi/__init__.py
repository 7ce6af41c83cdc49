"""kopf-csi: the Kubernetes CSI controller sidecars as one asyncio operator built on kopf."""

__version__ = "0.1.0"
