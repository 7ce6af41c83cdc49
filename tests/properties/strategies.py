"""Hypothesis strategies for the objects the operator reads: valid in shape, hostile in content.

Every object here has the types the Kubernetes API schema guarantees (a real API server
refuses anything else), but any content within them: unicode, empty strings, huge and
negative quantities, unknown access modes, missing optional fields, secret templates with
unknown tokens, reserved parameter keys, references to objects that do not exist.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kopf_csi import names
from kopf_csi.csi import messages as csi

DRIVER = "hostpath.csi.kopf.dev"
TOPOLOGY_KEY = "topology.hostpath.csi.kopf.dev/node"

TEXT = st.text(max_size=30)
NAME = st.one_of(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True), TEXT)
UID = st.one_of(st.uuids().map(str), TEXT)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

QUANTITY = st.one_of(
    st.builds(
        "{}{}".format,
        st.integers(min_value=-5, max_value=2**70),
        st.sampled_from(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "m", "e3", "E"]),
    ),
    st.from_regex(r"[+-]?[0-9]{0,25}(\.[0-9]{0,12})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    TEXT,
)
ACCESS_MODES = st.lists(
    st.one_of(
        st.sampled_from(["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]),
        TEXT,
    ),
    max_size=4,
)
TEMPLATE = st.one_of(
    st.sampled_from(
        ["${pvc.name}", "${pvc.namespace}", "${pv.name}", "${pvc.annotations['a']}", "$", "${",
         "${}", "${unknown}", "$pvc", "creds", "kube-system", ""]
    ),
    TEXT,
)  # fmt: skip
RESERVED_KEYS = st.sampled_from([*sorted(names.RESERVED_PARAMETERS), f"{names.PARAMETER_PREFIX}x"])
DEPRECATED_KEYS = st.sampled_from(["fstype", "FSType", "csiProvisionerSecretName"])
PARAMETERS = st.dictionaries(
    st.one_of(RESERVED_KEYS, TEXT, DEPRECATED_KEYS),
    st.one_of(TEMPLATE, TEXT),
    max_size=6,
)
ANNOTATIONS = st.dictionaries(
    st.one_of(
        st.sampled_from(
            [names.ANN_STORAGE_PROVISIONER, names.ANN_BETA_STORAGE_PROVISIONER,
             names.ANN_SELECTED_NODE, names.ANN_MIGRATED_TO, "a"]
        ),
        TEXT,
    ),
    st.one_of(st.just(DRIVER), st.just("node-1"), TEXT),
    max_size=5,
)  # fmt: skip


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of these fields (missing fields are the common malformation)."""
    return st.fixed_dictionaries({}, optional=fields)


DATA_SOURCE = _optional(
    apiGroup=st.one_of(st.just("snapshot.storage.k8s.io"), st.just(""), TEXT),
    kind=st.one_of(st.sampled_from(["PersistentVolumeClaim", "VolumeSnapshot", "Other"]), TEXT),
    name=NAME,
)

CLAIMS = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": NAME, "namespace": NAME, "uid": UID},
            optional={"annotations": ANNOTATIONS, "resourceVersion": TEXT},
        ),
        "spec": _optional(
            accessModes=ACCESS_MODES,
            resources=_optional(requests=_optional(storage=QUANTITY)),
            volumeMode=st.one_of(st.sampled_from(["Filesystem", "Block"]), TEXT),
            storageClassName=NAME,
            dataSource=DATA_SOURCE,
            dataSourceRef=DATA_SOURCE,
            volumeAttributesClassName=NAME,
            selector=st.just({"matchLabels": {"a": "b"}}),
            volumeName=st.one_of(st.just(""), NAME),
        ),
    }
)

TOPOLOGY_TERMS = st.lists(
    st.fixed_dictionaries(
        {
            "matchLabelExpressions": st.lists(
                st.fixed_dictionaries(
                    {"key": st.one_of(st.just(TOPOLOGY_KEY), TEXT), "values": st.lists(NAME)}
                ),
                max_size=2,
            )
        }
    ),
    max_size=2,
)

STORAGE_CLASSES = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": NAME, "uid": UID}),
        "provisioner": st.one_of(st.just(DRIVER), TEXT),
    },
    optional={
        "parameters": PARAMETERS,
        "mountOptions": st.lists(TEXT, max_size=3),
        "reclaimPolicy": st.sampled_from(["Delete", "Retain", "Recycle"]),
        "volumeBindingMode": st.sampled_from(["Immediate", "WaitForFirstConsumer"]),
        "allowedTopologies": TOPOLOGY_TERMS,
    },
)

SEGMENTS = st.dictionaries(st.one_of(st.just(TOPOLOGY_KEY), TEXT), NAME, max_size=3)
TOPOLOGIES = st.lists(st.builds(csi.Topology, segments=SEGMENTS), max_size=3)

VOLUMES = st.builds(
    csi.Volume,
    volume_id=st.one_of(st.just(""), NAME, TEXT),
    capacity_bytes=st.one_of(st.just(0), INT64),
    volume_context=st.dictionaries(TEXT, TEXT, max_size=3),
    accessible_topology=TOPOLOGIES,
)

PV_SPECS = _optional(
    accessModes=ACCESS_MODES,
    volumeMode=st.one_of(st.sampled_from(["Filesystem", "Block"]), TEXT),
    mountOptions=st.lists(TEXT, max_size=3),
    csi=_optional(
        driver=st.one_of(st.just(DRIVER), TEXT),
        volumeHandle=st.one_of(st.just(""), TEXT),
        fsType=st.one_of(st.just(""), TEXT),
        readOnly=st.booleans(),
        volumeAttributes=st.dictionaries(TEXT, TEXT, max_size=3),
        controllerPublishSecretRef=_optional(name=NAME, namespace=NAME),
    ),
)

ATTACHMENTS = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": NAME},
            optional={
                "annotations": st.dictionaries(
                    st.one_of(st.just(names.ANN_VA_NODE_ID), TEXT), TEXT, max_size=2
                ),
                "finalizers": st.lists(TEXT, max_size=2),
                "deletionTimestamp": st.just("2026-01-01T00:00:00Z"),
            },
        ),
        "spec": _optional(
            attacher=st.one_of(st.just(DRIVER), TEXT),
            nodeName=NAME,
            source=_optional(persistentVolumeName=NAME, inlineVolumeSpec=PV_SPECS),
        ),
    },
    optional={"status": _optional(attached=st.booleans(), attachError=_optional(message=TEXT))},
)

CSINODES = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": NAME}),
        "spec": _optional(
            drivers=st.lists(
                _optional(
                    name=st.one_of(st.just(DRIVER), TEXT),
                    nodeID=TEXT,
                    topologyKeys=st.lists(st.one_of(st.just(TOPOLOGY_KEY), TEXT), max_size=2),
                ),
                max_size=2,
            )
        ),
    }
)
