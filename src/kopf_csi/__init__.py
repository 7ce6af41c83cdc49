"""kopf-csi: the Kubernetes CSI controller sidecars as one asyncio operator built on kopf."""

from kopf_csi import lazyk8s as _lazyk8s

__version__ = "0.1.0"

# Before kopf or anything else imports kubernetes-asyncio: its generated classes stay unloaded.
_lazyk8s.install()
