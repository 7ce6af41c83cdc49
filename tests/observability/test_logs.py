"""The log format: JSON lines in a cluster, console lines on a terminal, one stream for all.

We test these aspects:
- JSON mode: every line parses; ours and kopf's records carry `kind`, `namespace`, `name`,
  `uid` of the object they are about (kopf's `k8s_ref`, our `obj=` and `bound_object`), and
  kopf's plumbing (its settings object) never reaches a line;
- console mode: readable `key=value` lines, not JSON; the default follows the terminal;
- end to end: during a provisioning run, kopf's per-object records and ours about the claim
  come through the same handler, as JSON, each with the claim's identity.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
import structlog
from kopf._core.actions.loggers import ObjectLogger  # private, but kopf is pinned exactly

from kopf_csi import logs
from kopf_csi.testing.emulator import EmulatedCluster
from kopf_csi.testing.kcm import ControllerManager
from kopf_csi.testing.operator import OperatorThread

from ..conftest import until
from ..provisioner.conftest import make_claim, make_storage_class, wait_for_bound

CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "data", "namespace": "apps", "uid": "1234-abcd"},
}
IDENTITY = {
    "kind": "PersistentVolumeClaim",
    "namespace": "apps",
    "name": "data",
    "uid": "1234-abcd",
}


class Stream(io.StringIO):
    def __init__(self, *, tty: bool = False) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def lines(self) -> list[str]:
        return self.getvalue().splitlines()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()]


LOOKUPS = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    lookups = {name: getattr(logging, name) for name in LOOKUPS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)
    for name, value in lookups.items():
        setattr(logging, name, value)


@pytest.fixture
def json_stream(restore_logging: None) -> Stream:
    stream = Stream()
    logs.configure(level="DEBUG", format="json", stream=stream, cache_loggers=False)
    return stream


def test_json_lines_carry_the_object_identity(json_stream: Stream) -> None:
    log = structlog.get_logger("kopf_csi.test")
    log.info("passed_object", obj=CLAIM, extra_key=1)
    with logs.bound_object(CLAIM):
        log.warning("bound_object")
    log.info("no_object")
    ObjectLogger(body=kopf.Body(CLAIM), settings=kopf.OperatorSettings()).info("kopf says %s", "hi")
    logging.getLogger("aiohttp.server").warning("a foreign record")

    records = json_stream.records()
    assert [r["event"] for r in records] == [
        "passed_object", "bound_object", "no_object", "kopf says hi", "a foreign record",
    ]  # fmt: skip
    for record in records[:2] + records[3:4]:
        assert IDENTITY.items() <= record.items(), record
    assert records[0]["extra_key"] == 1
    assert "obj" not in records[0]
    assert not set(IDENTITY) & set(records[2])  # the binding ended with the block
    assert records[3]["logger"] == "kopf.objects"
    assert not {"settings", "k8s_ref", "k8s_skip"} & set(records[3])
    for record in records:
        assert {"timestamp", "level", "logger", "event"} <= set(record)
    assert records[1]["level"] == "warning"


def test_cluster_scoped_objects_have_no_namespace(json_stream: Stream) -> None:
    volume = {"kind": "PersistentVolume", "metadata": {"name": "pvc-1", "uid": "u-1"}}
    structlog.get_logger("kopf_csi.test").info("x", obj=volume)
    (record,) = json_stream.records()
    assert (record["kind"], record["name"], record["uid"]) == ("PersistentVolume", "pvc-1", "u-1")
    assert "namespace" not in record
    assert logs.object_fields({"metadata": {"name": "va"}}, kind="VolumeAttachment") == {
        "kind": "VolumeAttachment", "name": "va",
    }  # fmt: skip


def test_console_lines_are_readable(restore_logging: None) -> None:
    stream = Stream(tty=False)
    logs.configure(level="INFO", format="console", stream=stream, cache_loggers=False)
    structlog.get_logger("kopf_csi.test").info("volume_provisioned", obj=CLAIM, volume="pvc-1")
    logging.getLogger("kopf.activities").info("Activity 'x' succeeded.")
    first, second = stream.lines()
    assert not first.startswith("{")
    assert "volume_provisioned" in first
    for key, value in {**IDENTITY, "volume": "pvc-1"}.items():
        assert f"{key}={value}" in first
    assert "\x1b[" not in first  # no colours off a terminal
    assert "Activity 'x' succeeded." in second


@pytest.mark.parametrize(("tty", "json_expected"), [(False, True), (True, False)])
def test_the_default_format_follows_the_terminal(
    restore_logging: None, tty: bool, json_expected: bool
) -> None:
    stream = Stream(tty=tty)
    logs.configure(stream=stream, cache_loggers=False)
    structlog.get_logger("kopf_csi.test").info("hello")
    assert stream.getvalue().startswith("{") is json_expected


def test_debug_lines_are_dropped_at_info(restore_logging: None) -> None:
    stream = Stream()
    logs.configure(level="INFO", format="json", stream=stream, cache_loggers=False)
    structlog.get_logger("kopf_csi.test").debug("hidden")
    logging.getLogger("kopf").debug("hidden too")
    assert stream.getvalue() == ""


def test_records_carry_no_caller_thread_or_process(restore_logging: None) -> None:
    # No format renders them, and looking them up was a fifth of the cost of every line.
    stream = Stream()
    logs.configure(level="INFO", format="json", stream=stream, cache_loggers=False)
    seen: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return True

    logging.getLogger().handlers[0].addFilter(keep)
    structlog.get_logger("kopf_csi.test").info("volume_deleted", obj=CLAIM)
    logging.getLogger("kopf.objects").info("a foreign record")
    lookups = [(r.pathname, r.funcName, r.threadName, r.process, r.processName) for r in seen]
    assert lookups == [("(unknown file)", "(unknown function)", None, None, None)] * 2
    records = stream.records()
    assert [r["event"] for r in records] == ["volume_deleted", "a foreign record"]
    assert IDENTITY.items() <= records[0].items()


def test_an_unknown_format_is_refused(restore_logging: None) -> None:
    with pytest.raises(ValueError, match="'xml' is not one of json, console"):
        logs.configure(format="xml", stream=Stream())  # type: ignore[arg-type]


async def test_kopf_and_our_records_share_one_json_stream(
    json_stream: Stream, cluster: EmulatedCluster, kcm: ControllerManager, operator: OperatorThread
) -> None:
    await make_storage_class(cluster, operator, "sc")
    claim = make_claim(cluster, "data")
    await wait_for_bound(cluster, claim)

    # The claim is bound as soon as its PV exists: the line after that may still be coming.
    await until(lambda: '"volume_provisioned"' in json_stream.getvalue())
    records = json_stream.records()  # every line is JSON, or this fails
    identity = {
        "kind": "PersistentVolumeClaim", "namespace": "default", "name": "data",
        "uid": claim["metadata"]["uid"],
    }  # fmt: skip
    ours = [r for r in records if r.get("event") == "volume_provisioned"]
    assert len(ours) == 1
    assert identity.items() <= ours[0].items()
    kopfs = [
        r for r in records
        if r["logger"].startswith("kopf") and r.get("uid") == identity["uid"]
    ]  # fmt: skip
    assert kopfs, "no kopf record about the claim"
    for record in kopfs:
        assert identity.items() <= record.items()
    assert {r["logger"] for r in records} >= {"kopf_csi.provisioning", "kopf_csi.endpoints"}
    # CSI calls of the claim's work carry its identity too (contextvars, through the client).
    creates = [r for r in records if r.get("method") == "/csi.v1.Controller/CreateVolume"]
    assert creates
    assert all(identity.items() <= r.items() for r in creates)


async def test_watch_events_leave_no_info_lines(
    restore_logging: None,
    cluster: EmulatedCluster,
    kcm: ControllerManager,
    operator: OperatorThread,
) -> None:
    """kopf's `Handler '...' succeeded.` for every watch event is debug, never info."""
    stream = Stream()
    logs.configure(level="INFO", format="json", stream=stream, cache_loggers=False)
    await make_storage_class(cluster, operator, "sc")
    claim = make_claim(cluster, "data")
    await wait_for_bound(cluster, claim)
    await until(lambda: '"volume_provisioned"' in stream.getvalue())
    records = stream.records()
    assert not [r for r in records if "succeeded." in str(r.get("event"))]
    assert [r for r in records if r.get("event") == "volume_provisioned"]

    debug = Stream()
    logs.configure(level="DEBUG", format="json", stream=debug, cache_loggers=False)
    # Claims and PVs are not watched through kopf (`kopf_csi.informers`): a StorageClass is.
    cluster.patch("storageclasses", None, "sc", {"metadata": {"labels": {"a": "b"}}})
    await until(lambda: "succeeded." in debug.getvalue())  # still there, at debug
    successes = [r for r in debug.records() if "succeeded." in str(r.get("event"))]
    assert {r["level"] for r in successes} == {"debug"}


def test_timestamps_are_utc_to_the_microsecond(json_stream: Stream) -> None:
    before = datetime.datetime.now(datetime.UTC)
    log = structlog.get_logger("kopf_csi.test")
    log.info("first")
    logging.getLogger("kopf.objects").info("foreign")
    after = datetime.datetime.now(datetime.UTC)
    stamps = [r["timestamp"] for r in json_stream.records()]
    for stamp in stamps:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), stamp
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before - datetime.timedelta(microseconds=1) <= when <= after
    assert stamps == sorted(stamps)


def test_values_json_cannot_hold_are_written_anyway(json_stream: Stream) -> None:
    # orjson refuses integers beyond 64 bits and lone surrogates: the stdlib's json writes them.
    log = structlog.get_logger("kopf_csi.test")
    log.info("big", size=2**70, text="é")
    log.info("surrogate", text="\udc80")
    log.info("object", value=Stream)
    big, surrogate, obj = json_stream.lines()
    assert json.loads(big)["size"] == 2**70
    assert json.loads(big)["text"] == "é"
    assert '"\\udc80"' in surrogate  # escaped, the line still one line of JSON
    assert json.loads(obj)["value"] == repr(Stream)


def test_a_cached_logger_follows_a_new_format(restore_logging: None) -> None:
    """Lines are rendered in structlog's chain, which a logger caches on its first use: a
    later `configure()` still decides their format."""
    first = Stream()
    logs.configure(level="INFO", format="console", stream=first, cache_loggers=True)
    log = structlog.get_logger("kopf_csi.test")
    log.info("as_console", key=1)
    second = Stream()
    logs.configure(level="INFO", format="json", stream=second, cache_loggers=True)
    log.info("as_json", key=2)
    assert "as_console" in first.getvalue()
    assert not first.getvalue().startswith("{")
    (record,) = second.records()
    assert (record["event"], record["key"]) == ("as_json", 2)


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("format", ["json", "console"])
def test_a_value_that_cannot_be_rendered_does_not_fail_the_code_that_logs(
    restore_logging: None, format: logs.Format
) -> None:
    """Lines are rendered in the code that logs (not in the handler, which the stdlib guards):
    a bad value leaves the line with its text keys and the renderer's failure, and the next
    line is whole."""
    stream = Stream()
    logs.configure(level="INFO", format=format, stream=stream, cache_loggers=False)
    looped: list[Any] = []
    looped.append(looped)  # a list that contains itself
    log = structlog.get_logger("kopf_csi.test")
    log.info("bad_value", obj=CLAIM, value=_Unprintable())
    log.info("looped_value", value=looped)
    log.info("next_line", value=1)
    bad, looped_line, following = stream.lines()
    if format == "json":
        record = json.loads(bad)
        assert record["event"] == "bad_value"
        assert record["render_error"] == "RuntimeError"
        assert IDENTITY.items() <= record.items()  # still about its object
        assert "value" not in record
        assert json.loads(looped_line)["event"] == "looped_value"
        assert {"event": "next_line", "value": 1}.items() <= json.loads(following).items()
    else:
        assert "bad_value" in bad
        assert "render_error=RuntimeError" in bad
        assert "looped_value" in looped_line  # the console renders it ([[...]])
        assert "next_line" in following


def _fail() -> None:
    raise ValueError("the reason")


def test_an_exception_logged_is_in_its_line(json_stream: Stream) -> None:
    try:
        _fail()
    except ValueError:
        structlog.get_logger("kopf_csi.test").exception("it_failed", obj=CLAIM)
    (record,) = json_stream.records()
    assert record["event"] == "it_failed"
    assert record["level"] == "error"
    assert "ValueError: the reason" in record["exception"]
    assert "Traceback (most recent call last)" in record["exception"]
