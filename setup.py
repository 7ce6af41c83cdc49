"""The packages: `kopf_csi` from src/, the handler modules of handlers/ as `kopf_csi_handlers`, and
the example manifests of manifests/examples/ as the sandbox's data (`kopf_csi.sandbox.examples`),
and manifests/base/rbac.yaml as the testing kit's (`kopf_csi.testing.manifests`).

The folder keeps its short name in the repository; installed, it is `kopf_csi_handlers`: a
top-level `handlers` in site-packages would clash with a user's own. Everything else about the
project is in pyproject.toml (setuptools' declarative configuration cannot rename a package
it finds).
"""

from setuptools import find_packages, setup

INSTALLED_AS = "kopf_csi_handlers"
handlers = [
    INSTALLED_AS + name.removeprefix("handlers")
    for name in find_packages(".", include=["handlers", "handlers.*"])
]
# The sandbox applies the example manifests; installed from a clone, it finds them in the
# package (its data, `*.yaml` in pyproject.toml), wherever it is run from.
EXAMPLES = "kopf_csi.sandbox.examples"
# The testing kit authorizes with the shipped RBAC (`kit_rbac`): manifests/base's rbac.yaml
# alone (pyproject.toml's package data), as `kopf_csi.testing.manifests`.
BASE_RBAC = "kopf_csi.testing.manifests"
setup(
    packages=find_packages("src", include=["kopf_csi", "kopf_csi.*"])
    + handlers
    + [EXAMPLES, BASE_RBAC],
    package_dir={
        "": "src",
        INSTALLED_AS: "handlers",
        EXAMPLES: "manifests/examples",
        BASE_RBAC: "manifests/base",
    },
)
