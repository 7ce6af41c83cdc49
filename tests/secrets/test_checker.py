"""The leak checker itself, and the small boundaries it relies on.

We test these aspects:
- every form of a value is found (plain, base64, JSON- and repr-escaped), with its source;
- values too short to prove anything are refused; Secret objects give their decoded values;
- exception texts include chained causes, even those a traceback hides (`from None`);
- `capture_logs` gets structlog and stdlib records, tracebacks, context variables, and leaves
  excluded loggers out; it restores the previous configuration; hpack's header dumps (where a
  driver's error text travels) stay out even at DEBUG;
- the API client never quotes a malformed Secret body, nor `decode_secret_data` a value.
"""

from __future__ import annotations

import base64
import json
import logging

import pytest
import structlog

from kopf_csi import kube
from kopf_csi.testing.secrets import LeakChecker, capture_logs, exception_text, variants

VALUE = 'pa"ss\\wörd-42'


def test_every_form_of_a_value_is_found() -> None:
    forms = variants(VALUE)
    assert set(forms) == {"plain", "base64", "json-escaped", "repr-escaped"}
    for form, text in forms.items():
        checker = LeakChecker([VALUE])
        (leak,) = checker.scan(f"src-{form}", f"before {text} after")
        assert (leak.source, leak.form) == (f"src-{form}", form)
        assert "<SECRET>" in leak.context
        assert text not in leak.context
        with pytest.raises(AssertionError, match="1 secret leak"):
            checker.assert_clean()


def test_clean_text_passes_and_is_counted() -> None:
    checker = LeakChecker([VALUE])
    assert checker.scan("logs", "nothing to see") == []
    checker.assert_clean()
    assert checker.scanned == {"logs": len("nothing to see")}


def test_short_values_are_refused() -> None:
    with pytest.raises(ValueError, match="prove nothing"):
        LeakChecker(["abc"])


def test_secret_objects_give_their_decoded_values() -> None:
    checker = LeakChecker()
    encoded = base64.b64encode(VALUE.encode()).decode()
    checker.add_secret_object({"data": {"a": encoded}, "stringData": {"b": "string-value"}})
    assert checker.values == (VALUE, "string-value")


def _fail(exc: BaseException) -> None:
    raise exc


def test_exception_texts_include_hidden_causes() -> None:
    try:
        try:
            _fail(RuntimeError(f"inner {VALUE}"))
        except RuntimeError:
            raise ValueError("outer") from None
    except ValueError as exc:
        caught = exc
    text = exception_text(caught)
    assert "outer" in text
    assert VALUE in text
    assert LeakChecker([VALUE]).scan_exception("exc", caught)


def test_capture_logs_gets_every_record_but_excluded_ones() -> None:
    before = structlog.get_config()
    with capture_logs(exclude=("noisy",)) as logs:
        with structlog.contextvars.bound_contextvars(name="claim-1"):
            structlog.get_logger("kopf_csi.test").debug("ours", key="value")
        logging.getLogger("kopf.objects").info("kopf's %s", "record")
        logging.getLogger("noisy.driver").warning("left out")
        try:
            _fail(KeyError("in-traceback"))
        except KeyError:
            structlog.get_logger("kopf_csi.test").exception("failed")
        logging.getLogger("hpack.hpack").debug("Adding b'grpc-message'=b'echoed' to the table")
    records = logs.records
    assert {"event": "ours", "key": "value", "name": "claim-1"}.items() <= records[0].items()
    assert records[1]["event"] == "kopf's record"
    assert "in-traceback" in records[2]["exception"]
    assert len(records) == 3  # neither the excluded logger nor hpack's header dump
    assert structlog.get_config() == before


def test_a_malformed_secret_body_is_never_quoted() -> None:
    body = json.dumps({"data": {"password": base64.b64encode(b"pw-123456").decode()}})[:-5]
    with pytest.raises(kube.KubeError) as caught:
        kube._decode(body.encode(), status=200, method="GET", path="/api/v1/namespaces/a/secrets/s")
    assert "cHctMTIzNDU2" not in exception_text(caught.value)
    assert f"<{len(body)} bytes>" in str(caught.value)
    with pytest.raises(kube.KubeError) as other:  # other objects: quoted, for diagnosis
        kube._decode(b"<html>proxy", status=502, method="GET", path="/api/v1/nodes/n")
    assert "<html>proxy" in str(other.value)


@pytest.mark.parametrize(
    ("secret", "error"),
    [
        ({"data": ["x"]}, "the secret's data is not a map"),
        ({"data": {"k": 42}}, "the secret's data under key 'k' is not base64"),
        ({"data": {"k": "pw-123456!"}}, "the secret's data under key 'k' is not base64"),
    ],
)
def test_malformed_secret_data_names_the_key_only(secret: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match="^" + error.replace("'", ".") + "$") as caught:
        kube.decode_secret_data(secret)
    assert "pw-123456" not in exception_text(caught.value)


def test_secret_data_is_decoded() -> None:
    encoded = base64.b64encode("wörd".encode()).decode()
    assert kube.decode_secret_data({"data": {"k": encoded}}) == {"k": "wörd"}
    assert kube.decode_secret_data({}) == {}
