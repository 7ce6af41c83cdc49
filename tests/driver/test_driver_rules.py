"""The driver's pure rules, without a server.

We test these aspects:
- sizes from capacity ranges, OUT_OF_RANGE bounds, and pool arithmetic;
- topology: choosing a node from preferred/requisite segments, and satisfying requisites;
- paging: pages, next tokens, ABORTED for a bad token, INVALID_ARGUMENT for negative sizes;
- capabilities: advertised sets follow features; access-mode checks;
- publish rules: controller publish and node stage/publish conflicts with the spec's codes;
- secrets: aliases, UNAUTHENTICATED, and no secret value in any message.
"""

from __future__ import annotations

import pytest

from kopf_csi.csi.codes import Code
from kopf_csi.driver import attachments, capabilities, capacity, paging, secrets, topology
from kopf_csi.driver.config import Features, SecretsPolicy
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.records import Attachment, Capability, Mount, NodeVolume, Volume

MOUNT_RWO = Capability(block=False, access_mode="SINGLE_NODE_WRITER")
MOUNT_RWX = Capability(block=False, access_mode="MULTI_NODE_MULTI_WRITER")
MOUNT_RWOP = Capability(block=False, access_mode="SINGLE_NODE_SINGLE_WRITER")
BLOCK_RWO = Capability(block=True, access_mode="SINGLE_NODE_WRITER")
KEY = "topology.hostpath.csi.kopf.dev/node"


def volume(**fields: object) -> Volume:
    defaults: dict[str, object] = {
        "volume_id": "v1",
        "name": "pvc-1",
        "size": 100,
        "block": False,
        "created_at": 0.0,
    }
    return Volume(**{**defaults, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("required", "limit", "maximum", "minimum", "expected"),
    [
        pytest.param(0, 0, None, 0, 1000, id="no-range-gets-default"),
        pytest.param(0, 500, None, 0, 500, id="default-clamped-to-limit"),
        pytest.param(300, 0, None, 0, 300, id="required"),
        pytest.param(300, 300, None, 0, 300, id="required-equals-limit"),
        pytest.param(0, 0, None, 2000, 2000, id="grown-to-the-source"),
        pytest.param(300, 0, 300, 0, 300, id="at-the-maximum"),
    ],
)
def test_size_for_ranges(
    required: int, limit: int, maximum: int | None, minimum: int, expected: int
) -> None:
    size = capacity.size_for(
        required=required, limit=limit, default=1000, maximum=maximum, minimum=minimum
    )
    assert size == expected


@pytest.mark.parametrize(
    ("required", "limit", "maximum", "minimum"),
    [
        pytest.param(500, 300, None, 0, id="required-over-limit"),
        pytest.param(500, 0, 300, 0, id="over-maximum"),
        pytest.param(0, 300, None, 500, id="source-over-limit"),
    ],
)
def test_size_for_out_of_range(
    required: int, limit: int, maximum: int | None, minimum: int
) -> None:
    with pytest.raises(DriverError) as err:
        capacity.size_for(
            required=required, limit=limit, default=100, maximum=maximum, minimum=minimum
        )
    assert err.value.code is Code.OUT_OF_RANGE


def test_size_for_negative_bounds_are_invalid() -> None:
    with pytest.raises(DriverError) as err:
        capacity.size_for(required=-1, limit=0, default=100, maximum=None)
    assert err.value.code is Code.INVALID_ARGUMENT


def test_pools_count_volumes_of_their_node_only() -> None:
    volumes = [volume(size=10, node="a"), volume(size=20, node="b"), volume(size=40, node="a")]
    assert capacity.used(volumes, pool="a") == 50
    assert capacity.available(total=100, used=50, free=7) == 50
    assert capacity.available(total=10, used=50, free=7) == 0
    assert capacity.available(total=None, used=50, free=7) == 7
    assert capacity.fits_range(100, required=50, limit=0)
    assert not capacity.fits_range(100, required=50, limit=80)


def test_choose_node_prefers_preferred_then_requisite_then_default() -> None:
    known = {"a", "b", "c"}.__contains__
    choose = topology.choose_node
    assert choose(preferred=[], requisite=[], default="a", key=KEY, is_known=known) == "a"
    requisite = [{KEY: "x"}, {KEY: "c"}]
    assert choose(preferred=[], requisite=requisite, default="a", key=KEY, is_known=known) == "c"
    preferred = [{KEY: "b"}]
    assert (
        choose(preferred=preferred, requisite=requisite, default="a", key=KEY, is_known=known)
        == "b"
    )


def test_choose_node_refuses_unknown_topologies() -> None:
    with pytest.raises(DriverError) as err:
        topology.choose_node(
            preferred=[{"zone": "z1"}],
            requisite=[{KEY: "elsewhere"}],
            default="a",
            key=KEY,
            is_known={"a"}.__contains__,
        )
    assert err.value.code is Code.RESOURCE_EXHAUSTED


def test_satisfies_requisite() -> None:
    assert topology.satisfies("a", requisite=[], key=KEY)
    assert topology.satisfies("a", requisite=[{KEY: "b"}, {KEY: "a"}], key=KEY)
    assert not topology.satisfies("a", requisite=[{KEY: "b"}], key=KEY)


def test_paging_walks_all_items() -> None:
    items = list(range(5))
    first, token = paging.page(items, starting_token="", max_entries=2)
    second, token2 = paging.page(items, starting_token=token, max_entries=2)
    third, token3 = paging.page(items, starting_token=token2, max_entries=2)
    assert (first, second, third) == ([0, 1], [2, 3], [4])
    assert token3 == ""
    assert paging.page(items, starting_token="", max_entries=0) == (items, "")
    assert paging.page([], starting_token="", max_entries=3) == ([], "")


@pytest.mark.parametrize("token", ["x", "-1", "6", "²", "1.5"])
def test_paging_bad_token_is_aborted(token: str) -> None:
    with pytest.raises(DriverError) as err:
        paging.page(list(range(5)), starting_token=token, max_entries=1)
    assert err.value.code is Code.ABORTED


def test_paging_negative_max_entries_is_invalid() -> None:
    with pytest.raises(DriverError) as err:
        paging.page([1], starting_token="", max_entries=-1)
    assert err.value.code is Code.INVALID_ARGUMENT


def test_advertised_capabilities_follow_features() -> None:
    everything = Features(attach=True)
    assert set(capabilities.controller_capabilities(everything)) >= {
        "CREATE_DELETE_VOLUME",
        "PUBLISH_UNPUBLISH_VOLUME",
        "LIST_VOLUMES_PUBLISHED_NODES",
        "PUBLISH_READONLY",
        "MODIFY_VOLUME",
        "GET_SNAPSHOT",
    }
    bare = Features(
        attach=False, snapshots=False, clone=False, expansion=False, modify=False, capacity=False
    )
    names = capabilities.controller_capabilities(bare)
    assert "PUBLISH_UNPUBLISH_VOLUME" not in names
    assert "LIST_VOLUMES_PUBLISHED_NODES" not in names  # needs attach, per the spec
    assert "PUBLISH_READONLY" not in names
    assert "CREATE_DELETE_SNAPSHOT" not in names
    assert "EXPAND_VOLUME" not in capabilities.node_capabilities(bare)
    assert capabilities.plugin_services(Features(topology=False, snapshots=False)) == [
        "CONTROLLER_SERVICE"
    ]
    assert capabilities.group_controller_capabilities(bare) == []
    assert capabilities.volume_expansion(bare) == []


def test_access_modes() -> None:
    check = capabilities.check_volume_capabilities
    assert check([MOUNT_RWO], features=Features()) is False
    assert check([BLOCK_RWO], features=Features()) is True
    with pytest.raises(DriverError):
        check([], features=Features())
    with pytest.raises(DriverError):
        check([MOUNT_RWO, BLOCK_RWO], features=Features())
    with pytest.raises(DriverError):
        check([MOUNT_RWOP], features=Features(single_node_multi_writer=False))
    with pytest.raises(DriverError):
        check([Capability(block=False, access_mode="UNKNOWN")], features=Features())


def test_controller_publish_rules() -> None:
    rwo = Attachment(readonly=False, capability=MOUNT_RWO)
    rwx = Attachment(readonly=False, capability=MOUNT_RWX)
    free = volume()
    publish = attachments.check_controller_publish
    assert publish(free, node_id="a", attachment=rwo, attached_to_node=0, max_per_node=0) is False
    on_a = volume(attachments={"a": rwo})
    assert publish(on_a, node_id="a", attachment=rwo, attached_to_node=1, max_per_node=1) is True
    cases = [
        (on_a, "a", Attachment(readonly=True, capability=MOUNT_RWO), 0, Code.ALREADY_EXISTS),
        (on_a, "b", rwo, 0, Code.FAILED_PRECONDITION),
        (volume(attachments={"a": rwx}), "b", rwo, 0, Code.FAILED_PRECONDITION),
        (free, "a", rwo, 3, Code.RESOURCE_EXHAUSTED),
        (free, "a", Attachment(readonly=False, capability=BLOCK_RWO), 0, Code.INVALID_ARGUMENT),
    ]
    for vol, node_id, attachment, attached, code in cases:
        with pytest.raises(DriverError) as err:
            publish(
                vol,
                node_id=node_id,
                attachment=attachment,
                attached_to_node=attached,
                max_per_node=3,
            )
        assert err.value.code is code
    multi = volume(attachments={"a": rwx})
    assert publish(multi, node_id="b", attachment=rwx, attached_to_node=0, max_per_node=0) is False


def test_node_stage_rules() -> None:
    stage = attachments.check_node_stage
    empty = NodeVolume()
    staged = NodeVolume(staged={"/s": Mount(capability=MOUNT_RWO)})
    assert stage(volume(), empty, path="/s", capability=MOUNT_RWO) is False
    assert stage(volume(), staged, path="/s", capability=MOUNT_RWO) is True
    for node, path, cap, code in [
        (staged, "/s", MOUNT_RWX, Code.ALREADY_EXISTS),
        (staged, "/other", MOUNT_RWO, Code.FAILED_PRECONDITION),
        (empty, "/s", BLOCK_RWO, Code.FAILED_PRECONDITION),
    ]:
        with pytest.raises(DriverError) as err:
            stage(volume(), node, path=path, capability=cap)
        assert err.value.code is code


def test_node_publish_rules() -> None:
    publish = attachments.check_node_publish
    staged = NodeVolume(staged={"/s": Mount(capability=MOUNT_RWO)})
    rw = Mount(capability=MOUNT_RWO, staging_path="/s")
    published = NodeVolume(staged=staged.staged, published={"/t1": rw})
    assert publish(volume(), staged, target="/t1", mount=rw, needs_staging=True) is False
    assert publish(volume(), published, target="/t1", mount=rw, needs_staging=True) is True
    # Kubernetes publishes an RWO volume once per pod: a second target is fine.
    assert publish(volume(), published, target="/t2", mount=rw, needs_staging=True) is False
    ro = Mount(capability=MOUNT_RWO, staging_path="/s", readonly=True)
    rwop = Mount(capability=MOUNT_RWOP, staging_path="/s")
    only_rwop = NodeVolume(staged=staged.staged, published={"/t1": rwop})
    for node, target, mount, code in [
        (published, "/t1", ro, Code.ALREADY_EXISTS),
        (only_rwop, "/t2", rwop, Code.FAILED_PRECONDITION),
        (
            published,
            "/t2",
            Mount(capability=MOUNT_RWX, staging_path="/s"),
            Code.FAILED_PRECONDITION,
        ),
        (staged, "/t1", Mount(capability=MOUNT_RWO), Code.FAILED_PRECONDITION),
        (staged, "/t1", Mount(capability=MOUNT_RWO, staging_path="/x"), Code.FAILED_PRECONDITION),
    ]:
        with pytest.raises(DriverError) as err:
            publish(volume(), node, target=target, mount=mount, needs_staging=True)
        assert err.value.code is code
    assert (
        publish(
            volume(),
            NodeVolume(),
            target="/t",
            mount=Mount(capability=MOUNT_RWO),
            needs_staging=False,
        )
        is False
    )


def test_secret_aliases() -> None:
    assert secrets.parse_operations("create, node-stage") == {"CreateVolume", "NodeStageVolume"}
    assert secrets.parse_operations("DeleteSnapshot") == {"DeleteSnapshot"}
    assert secrets.parse_operations("all") == secrets.SECRET_BEARING
    with pytest.raises(ValueError, match="unknown"):
        secrets.parse_operations("everything")


@pytest.mark.parametrize(
    ("given", "expected", "ok"),
    [
        pytest.param({}, None, False, id="missing"),
        pytest.param({"k": "v"}, None, True, id="any-will-do"),
        pytest.param({"user": "u", "password": "p4ss"}, {"password": "p4ss"}, True, id="exact"),
        pytest.param({"password": "wrong-value"}, {"password": "p4ss"}, False, id="wrong"),
        pytest.param({"other": "p4ss"}, {"password": "p4ss"}, False, id="wrong-key"),
    ],
)
def test_secret_checks(given: dict[str, str], expected: dict[str, str] | None, ok: bool) -> None:
    policy = SecretsPolicy(required_for=frozenset({"CreateVolume"}), expected=expected)
    secrets.check("DeleteVolume", {}, policy=policy)  # not required there
    if ok:
        secrets.check("CreateVolume", given, policy=policy)
        return
    with pytest.raises(DriverError) as err:
        secrets.check("CreateVolume", given, policy=policy)
    assert err.value.code is Code.UNAUTHENTICATED
    for value in [*given.values(), *(expected or {}).values()]:
        assert value not in err.value.message
