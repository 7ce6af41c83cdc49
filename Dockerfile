# syntax=docker/dockerfile:1
# The kopf-csi image: the operator (`kopf-csi run`, the entrypoint) and the reference CSI driver
# (`python -m kopf_csi.driver`, as the Deployment's second container runs it).
#
#   docker build -t kopf-csi:dev .
#
# Two stages: the builder installs the package and its pinned dependencies
# (requirements/constraints.txt) into a virtualenv; the runtime stage copies only that
# virtualenv. The runtime runs as a numeric non-root user and writes nothing outside mounted
# volumes, so it works with readOnlyRootFilesystem: bytecode is compiled at build time and
# never written at run time, and HOME points at /tmp (an emptyDir in the manifests).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/kopf-csi
WORKDIR /src
# Only what the package needs (.dockerignore sends nothing else): the sources, and the example
# manifests the wheel carries for the sandbox (three of them link to the base's files).
# setuptools is pinned for the build, then removed with pip: the runtime has no installer.
COPY requirements/constraints.txt requirements/constraints.txt
COPY pyproject.toml setup.py README.md ./
COPY src/ src/
COPY handlers/ handlers/
COPY manifests/examples/ manifests/examples/
COPY manifests/base/csidriver.yaml manifests/base/storageclasses.yaml \
     manifests/base/volumesnapshotclass.yaml manifests/base/
RUN /opt/kopf-csi/bin/pip install -c requirements/constraints.txt setuptools==84.2.1 \
 && /opt/kopf-csi/bin/pip install --no-build-isolation -c requirements/constraints.txt . \
 && /opt/kopf-csi/bin/pip uninstall --yes setuptools pip \
 && /opt/kopf-csi/bin/python -m compileall -q /opt/kopf-csi/lib \
 && /opt/kopf-csi/bin/kopf-csi run --help > /dev/null \
 && /opt/kopf-csi/bin/kopf-csi-driver --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kopf-csi" \
      org.opencontainers.image.description="The Kubernetes CSI controller sidecars as one asyncio operator built on kopf" \
      org.opencontainers.image.licenses="Apache-2.0"
# 10001: the uid/gid the manifests run as (runAsUser/runAsGroup); no login shell, no home.
RUN groupadd --system --gid 10001 kopf-csi \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
      --shell /usr/sbin/nologin kopf-csi
COPY --from=builder /opt/kopf-csi /opt/kopf-csi
ENV PATH=/opt/kopf-csi/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["kopf-csi", "run"]
