"""kopf-csi: the Kubernetes CSI controller sidecars as one asyncio operator built on kopf."""

from typing import TYPE_CHECKING, Any

from kopf_csi import lazyk8s as _lazyk8s

if TYPE_CHECKING:  # at run time, imported when first used (`__getattr__`)
    from kopf_csi import on as on

__version__ = "0.1.0"

# Before kopf or anything else imports kubernetes-asyncio: its generated classes stay unloaded.
_lazyk8s.install()


def __getattr__(name: str) -> Any:
    """`kopf_csi.on` after a plain `import kopf_csi`, imported when first used (it imports kopf,
    which `kopf-csi --help` and the driver do not need)."""
    if name == "on":
        import importlib

        return importlib.import_module("kopf_csi.on")
    raise AttributeError(f"module 'kopf_csi' has no attribute {name!r}")
