# ruff: noqa: E501  (perf's lines, as it writes them)
"""`devtools.perffold`: perf's samples charged to Python functions, self and inclusive.

The text below is `perf script`'s, cut from a real profile of the operator (Python 3.13,
`PYTHON_PERF_JIT_SUPPORT=1`, after `perf inject --jit`).
"""

from __future__ import annotations

from devtools import perffold

LIB = "(/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0)"
SCRIPT = f"""\
python 19686 30762.154861:    2004008 cpu-clock: 
\t          253904 PyErr_Clear+0x4 {LIB}
\t              85 py::ClientSession.request:/venv/lib/python3.13/site-packages/aiohttp/client.py+0x5 (/tmp/jitted-19686-6016.so)
\t          2bc5f0 py_trampoline_evaluator+0x70 {LIB}
\t              85 py::KubeClient._send:/work/main/src/kopf_csi/kube.py+0x5 (/tmp/jitted-19686-6010.so)
\t              85 py::KubeClient._request:/work/main/src/kopf_csi/kube.py+0x5 (/tmp/jitted-19686-6006.so)

python 19686 30762.156861:    2004008 cpu-clock: 
\t           122a8 [unknown] (/venv/lib/python3.13/site-packages/orjson/orjson.cpython-313-x86_64-linux-gnu.so)
\t              85 py::_decode:/work/main/src/kopf_csi/kube.py+0x5 (/tmp/jitted-19686-6001.so)
\t              85 py::KubeClient._request:/work/main/src/kopf_csi/kube.py+0x5 (/tmp/jitted-19686-6006.so)
\t              85 py::KubeClient._request:/work/main/src/kopf_csi/kube.py+0x5 (/tmp/jitted-19686-6006.so)

python 19686 30762.158861:    2004008 cpu-clock: 
\t          ffffffff finish_task_switch.isra.0+0x93 ([kernel.kallsyms])

python 19686 30762.160861:    2004008 cpu-clock: 
\t              85 py::Logger.info:/root/.pyenv/versions/3.13.0/lib/python3.13/logging/__init__.py+0x5 (/tmp/jitted-1.so)
\t              85 py::CSIBackend.delete:/work/main/src/kopf_csi/provisioning/csi_backend.py+0x5 (/tmp/jitted-2.so)
"""


def samples() -> list[list[str]]:
    return list(perffold.stacks(SCRIPT.splitlines()))


def test_every_sample_is_read_innermost_first() -> None:
    read = samples()
    assert len(read) == 4
    assert read[0][0].startswith("253904 PyErr_Clear")
    assert perffold.python_frames(read[1]) == [
        ("_decode", "kopf_csi/kube.py"),
        ("KubeClient._request", "kopf_csi/kube.py"),
        ("KubeClient._request", "kopf_csi/kube.py"),
    ]


def test_self_goes_to_the_innermost_python_frame_and_inclusive_to_all() -> None:
    profile = perffold.fold(samples())
    assert (profile.samples, profile.unnamed) == (4, 1)
    assert profile.self[("ClientSession.request", "aiohttp/client.py")] == 1  # its C call's
    assert profile.self[("_decode", "kopf_csi/kube.py")] == 1  # orjson's time is its caller's
    assert profile.self[("Logger.info", "logging/__init__.py")] == 1
    assert profile.inclusive[("KubeClient._request", "kopf_csi/kube.py")] == 2  # once a sample
    assert profile.packages == {"aiohttp": 1, "kopf_csi": 1, "logging": 1}
    assert profile.share(2) == 50.0
    text = perffold.report(profile, top=5)
    assert "25.0 % with no Python frame" in text
    assert " 50.00 %  KubeClient._request  kopf_csi/kube.py" in text


def test_callers_are_the_frames_above() -> None:
    assert perffold.callers(samples(), "KubeClient._send") == {"KubeClient._request": 1}
    assert perffold.callers(samples(), "_decode", depth=2) == {
        "KubeClient._request <- KubeClient._request": 1
    }
    assert perffold.callers(samples(), "CSIBackend.delete") == {"(the root)": 1}


def test_callees_are_the_frames_below_and_the_rest_is_self() -> None:
    assert perffold.callees(samples(), "KubeClient._request") == {
        "KubeClient._send": 1,
        "KubeClient._request": 1,  # recursive: from the outermost frame, so counted once
    }
    assert perffold.callees(samples(), "KubeClient._request", depth=2) == {
        "KubeClient._send -> ClientSession.request": 1,
        "KubeClient._request -> _decode": 1,
    }
    assert perffold.callees(samples(), "_decode") == {"(self)": 1}
    assert perffold.callees(samples(), "CSIBackend.delete", depth=3) == {"Logger.info": 1}
