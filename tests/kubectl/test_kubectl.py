"""Plain kubectl against the emulated cluster, as a user of the sandbox would use it.

Everything is real: the kubectl binary on PATH (skipped, saying so, without it), the emulated
API over HTTP, the KCM and snapshot-controller stand-ins, the reference driver and kopf running
the default handler modules. We test these aspects:
- `kubectl apply -f` with validation on (kubectl's default): the examples' StorageClasses,
  CSIDriver, claims, Pod, VolumeSnapshotClass and VolumeSnapshot are accepted; a misspelt
  field is refused by the server with the real text, on create and on a re-apply, and nothing
  is written; `--validate=warn` writes and warns, `--validate=false` writes silently, and
  both store the claim without the field, as the real server drops it;
- discovery: `get pvc,pv,volumeattachments -A` and the short names vs, vsc, vsclass, sc work;
  `va` fails as on a real server, which has no such short name;
- the columns of `get pvc`, `get pv`, `get volumeattachments`, `get nodes`, `get sc` and
  `get vs`, with their cells from the objects the operator made;
- `get -w`: the header once, then a row per change, with the same columns;
- `version`: the server is v1.36.2, and kubectl warns about skew only as it would against a real
  v1.36 server.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import shutil
from collections.abc import AsyncIterator

import pytest
import yaml

from kopf_csi.testing import discovery
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.requestlog import Access
from kopf_csi.testing.snapshots import SnapshotController

from ..conftest import NODE, seed_node, until

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl binary (not on PATH)")
REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"


class Kubectl:
    def __init__(self, kubeconfig: pathlib.Path, cache: pathlib.Path) -> None:
        assert KUBECTL is not None
        self.base = [KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}"]

    async def __call__(self, *args: str, ok: bool = True) -> tuple[int, str, str]:
        """Run kubectl without blocking the loop the cluster serves on."""
        process = await asyncio.create_subprocess_exec(
            *self.base, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        code = process.returncode
        assert code is not None
        if ok:
            assert code == 0, err.decode()
        return code, out.decode(), err.decode()

    async def table(self, *args: str) -> list[dict[str, str]]:
        """`kubectl get` output as rows of {HEADER: cell}, cut at the header's offsets."""
        _, out, _ = await self(*args)
        header, *lines = out.splitlines()
        starts = [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]
        spans = list(zip(starts, [*starts[1:], None], strict=True))
        names = [header[start:end].strip() for start, end in spans]
        return [
            {name: line[start:end].strip() for name, (start, end) in zip(names, spans, strict=True)}
            for line in lines
        ]


@pytest.fixture
def kubectl(kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> Kubectl:
    return Kubectl(kubeconfig, tmp_path / "kube-cache")


@pytest.fixture
async def snapshot_controller(cluster: EmulatedCluster) -> AsyncIterator[SnapshotController]:
    async with SnapshotController(cluster) as controller:
        yield controller


@pytest.fixture
def manifests(tmp_path: pathlib.Path) -> list[str]:
    """The examples as a user applies them, the Pod placed on the node (no scheduler here)."""
    pod = yaml.safe_load((EXAMPLES / "pod.yaml").read_text())
    pod["spec"]["nodeName"] = NODE
    placed = tmp_path / "pod.yaml"
    placed.write_text(yaml.safe_dump(pod))
    files = [EXAMPLES / name for name in ("csidriver.yaml", "storageclasses.yaml")]
    files += [REPO / "manifests" / "base" / "volumesnapshotclass.yaml"]
    files += [EXAMPLES / name for name in ("claims.yaml", "snapshot.yaml")] + [placed]
    return [arg for path in files for arg in ("-f", str(path))]


@pytest.fixture
async def applied(
    cluster: EmulatedCluster,
    kcm: object,
    snapshot_controller: SnapshotController,
    operator: object,
    kubectl: Kubectl,
    manifests: list[str],
) -> str:
    """Everything applied with kubectl (validation on), then bound, attached and snapshotted."""
    seed_node(cluster)
    _, out, _ = await kubectl("apply", *manifests)

    def settled() -> bool:
        claims = cluster.objects("persistentvolumeclaims")
        attachments = cluster.objects("volumeattachments")
        return (
            len(claims) == 3
            and all(claim.get("status", {}).get("phase") == "Bound" for claim in claims)
            and len(attachments) == 2
            and all(a.get("status", {}).get("attached") for a in attachments)
        )

    await until(settled, timeout=30)
    return out


async def test_apply_with_validation(applied: str, cluster: EmulatedCluster) -> None:
    assert applied.splitlines() == [
        "csidriver.storage.k8s.io/hostpath.csi.kopf.dev created",
        "storageclass.storage.k8s.io/kopf-csi-immediate created",
        "storageclass.storage.k8s.io/kopf-csi-wffc created",
        "volumesnapshotclass.snapshot.storage.k8s.io/kopf-csi-snapshots created",
        "persistentvolumeclaim/data-immediate created",
        "persistentvolumeclaim/data-wffc created",
        "volumesnapshot.snapshot.storage.k8s.io/data-immediate-snapshot created",
        "persistentvolumeclaim/data-restored created",
        "pod/app created",
    ]
    # Bound, attached, snapshotted and restored: no writer (kubectl, the stand-ins, the
    # operator) wrote a field a real API server would drop.
    assert not cluster.dropped


async def test_apply_refuses_a_misspelt_field(
    cluster: EmulatedCluster, kubectl: Kubectl, tmp_path: pathlib.Path
) -> None:
    claim = next(yaml.safe_load_all((EXAMPLES / "claims.yaml").read_text()))
    claim["spec"]["storageClassNmae"] = claim["spec"].pop("storageClassName")
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(claim))

    code, _, err = await kubectl("apply", "-f", str(typo), ok=False)
    assert code == 1
    assert err.strip() == (
        f'Error from server (BadRequest): error when creating "{typo}": PersistentVolumeClaim in '
        'version "v1" cannot be handled as a PersistentVolumeClaim: strict decoding error: '
        'unknown field "spec.storageClassNmae"'
    )
    assert cluster.objects("persistentvolumeclaims") == []

    await kubectl("apply", "-f", str(EXAMPLES / "claims.yaml"))
    code, _, err = await kubectl("apply", "-f", str(typo), ok=False)
    assert code == 1
    assert err.strip().endswith(
        f'for: "{typo}": error when patching "{typo}": strict decoding error: '
        'unknown field "spec.storageClassNmae"'
    )
    stored = cluster.get("persistentvolumeclaims", "default", "data-immediate")
    assert stored is not None
    assert "storageClassNmae" not in stored["spec"]

    # Written as the real server writes them: without the field it does not know.
    for name, flag, said in (
        ("warned", "warn", 'Warning: unknown field "spec.storageClassNmae"'),
        ("ignored", "false", ""),
    ):
        claim["metadata"]["name"] = name
        typo.write_text(yaml.safe_dump(claim))
        _, out, err = await kubectl("apply", f"--validate={flag}", "-f", str(typo))
        assert (out.strip(), err.strip()) == (f"persistentvolumeclaim/{name} created", said)
        written = cluster.get("persistentvolumeclaims", "default", name)
        assert written is not None
        assert "storageClassNmae" not in written["spec"]


async def test_get_by_short_names_across_namespaces(
    applied: str, cluster: EmulatedCluster, kubectl: Kubectl
) -> None:
    _, out, _ = await kubectl("get", "pvc,pv,volumeattachments", "-A", "-o", "name")
    volumes = sorted(
        f"persistentvolume/{pv['metadata']['name']}" for pv in cluster.objects("persistentvolumes")
    )
    attachments = sorted(
        f"volumeattachment.storage.k8s.io/{va['metadata']['name']}"
        for va in cluster.objects("volumeattachments")
    )
    assert out.splitlines() == [
        "persistentvolumeclaim/data-immediate",
        "persistentvolumeclaim/data-restored",
        "persistentvolumeclaim/data-wffc",
        *volumes,
        *attachments,
    ]
    rows = await kubectl.table("get", "pvc,pv,volumeattachments", "-A")
    assert [row["NAMESPACE"] for row in rows[:3]] == ["default"] * 3

    _, out, _ = await kubectl("get", "vs,vsclass,sc", "-A", "-o", "name")
    assert out.splitlines() == [
        "volumesnapshot.snapshot.storage.k8s.io/data-immediate-snapshot",
        "volumesnapshotclass.snapshot.storage.k8s.io/kopf-csi-snapshots",
        "storageclass.storage.k8s.io/kopf-csi-immediate",
        "storageclass.storage.k8s.io/kopf-csi-wffc",
    ]
    _, out, _ = await kubectl("get", "vsc", "-o", "name")
    assert out.startswith("volumesnapshotcontent.snapshot.storage.k8s.io/snapcontent-")

    code, _, err = await kubectl("get", "va", ok=False)  # no such short name on a real server
    assert (code, err.strip()) == (1, 'error: the server doesn\'t have a resource type "va"')


async def test_get_shows_the_columns(
    applied: str, cluster: EmulatedCluster, kubectl: Kubectl
) -> None:
    claim = cluster.get("persistentvolumeclaims", "default", "data-immediate")
    assert claim is not None
    volume = f"pvc-{claim['metadata']['uid']}"

    claims = {row["NAME"]: row for row in await kubectl.table("get", "pvc")}
    assert list(claims["data-immediate"]) == [
        "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS",
        "VOLUMEATTRIBUTESCLASS", "AGE",
    ]  # fmt: skip
    assert claims["data-immediate"] | {"AGE": ""} == {
        "NAME": "data-immediate", "STATUS": "Bound", "VOLUME": volume, "CAPACITY": "1Gi",
        "ACCESS MODES": "RWO", "STORAGECLASS": "kopf-csi-immediate",
        "VOLUMEATTRIBUTESCLASS": "<unset>", "AGE": "",
    }  # fmt: skip
    assert re.fullmatch(r"\d+s", claims["data-immediate"]["AGE"])
    assert claims["data-wffc"]["CAPACITY"] == "512Mi"

    volumes = {row["NAME"]: row for row in await kubectl.table("get", "pv")}
    assert volumes[volume] | {"AGE": ""} == {
        "NAME": volume, "CAPACITY": "1Gi", "ACCESS MODES": "RWO", "RECLAIM POLICY": "Delete",
        "STATUS": "Bound", "CLAIM": "default/data-immediate", "STORAGECLASS": "kopf-csi-immediate",
        "VOLUMEATTRIBUTESCLASS": "<unset>", "REASON": "", "AGE": "",
    }  # fmt: skip

    attachments = await kubectl.table("get", "volumeattachments")
    assert {(row["ATTACHER"], row["NODE"], row["ATTACHED"]) for row in attachments} == {
        ("hostpath.csi.kopf.dev", NODE, "true")
    }
    assert volume in {row["PV"] for row in attachments}

    (node,) = await kubectl.table("get", "nodes", "-o", "wide")
    assert list(node) == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE",
        "KERNEL-VERSION", "CONTAINER-RUNTIME",
    ]  # fmt: skip
    assert (node["NAME"], node["STATUS"], node["ROLES"]) == (NODE, "Unknown", "<none>")

    classes = await kubectl.table("get", "sc")
    assert [list(row.values())[:5] for row in classes] == [
        ["kopf-csi-immediate", "hostpath.csi.kopf.dev", "Delete", "Immediate", "true"],
        ["kopf-csi-wffc", "hostpath.csi.kopf.dev", "Delete", "WaitForFirstConsumer", "true"],
    ]

    await until(
        lambda: all(
            s.get("status", {}).get("readyToUse") for s in cluster.objects("volumesnapshots")
        )
    )
    (snapshot,) = await kubectl.table("get", "vs")
    assert snapshot["READYTOUSE"] == "true"
    assert snapshot["SOURCEPVC"] == "data-immediate"
    assert snapshot["SOURCESNAPSHOTCONTENT"] == ""  # null: the field is not set
    assert snapshot["RESTORESIZE"] == "1Gi"
    assert snapshot["SNAPSHOTCLASS"] == "kopf-csi-snapshots"
    assert snapshot["SNAPSHOTCONTENT"].startswith("snapcontent-")


async def test_version(cluster: EmulatedCluster, kubectl: Kubectl) -> None:
    _, out, err = await kubectl("version", "-o", "json")
    versions = json.loads(out)
    served = discovery.server_version()  # kubectl shows the fields it knows of
    assert versions["serverVersion"] == {key: served[key] for key in versions["serverVersion"]}
    assert versions["serverVersion"]["gitVersion"] == "v1.36.2"
    client = int(re.sub(r"\D.*", "", versions["clientVersion"]["minor"]))  # "32+" on some
    # kubectl supports one minor version either way; beyond that it warns, as it would
    # against a real v1.36 server (the one on this machine may be older than v1.35).
    skew = (
        f"WARNING: version difference between client (1.{client}) and server (1.36) exceeds "
        "the supported minor version skew of +/-1"
    )
    assert err.strip() == (skew if abs(client - 36) > 1 else "")


async def test_get_watch_shows_the_columns(
    cluster: EmulatedCluster, kcm: object, operator: object, kubectl: Kubectl
) -> None:
    seed_node(cluster)
    for doc in yaml.safe_load_all((EXAMPLES / "storageclasses.yaml").read_text()):
        cluster.create("storageclasses", doc)
    process = await asyncio.create_subprocess_exec(
        *kubectl.base, "get", "pvc", "-w", stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    try:
        # Nothing to list: the header comes with the first event, whose Table has the columns.
        kubectls_watch = Access("watch", "", "persistentvolumeclaims", namespace="default")
        await until(lambda: cluster.requests.accesses[kubectls_watch], timeout=30)
        claim = next(yaml.safe_load_all((EXAMPLES / "claims.yaml").read_text()))
        cluster.create("persistentvolumeclaims", claim)
        header = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert header.split() == [
            "NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS", "AGE",
        ]  # fmt: skip
        rows = []
        while not rows or rows[-1][1] != "Bound":
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            rows.append(line.decode().split())
    finally:
        process.kill()
        await process.wait()
    assert rows[0][:2] == ["data-immediate", "Pending"]
    uid = cluster.get("persistentvolumeclaims", "default", "data-immediate")["metadata"]["uid"]
    assert rows[-1][:6] == [
        "data-immediate", "Bound", f"pvc-{uid}", "1Gi", "RWO", "kopf-csi-immediate",
    ]  # fmt: skip
