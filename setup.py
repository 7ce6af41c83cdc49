"""The packages: `kopf_csi` from src/, and the handler modules of handlers/ as `kopf_csi_handlers`.

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
setup(
    packages=find_packages("src", include=["kopf_csi", "kopf_csi.*"]) + handlers,
    package_dir={"": "src", INSTALLED_AS: "handlers"},
)
