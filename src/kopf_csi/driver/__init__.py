"""The reference CSI driver kopf-csi ships: a hostpath-style driver, in Python, over grpclib.

It serves Identity, Controller, GroupController and Node on one unix socket, keeps every volume
as a directory (a file for block volumes) under a data directory, and persists its records
there, so that a restart loses nothing. Fault injection (latency, errors, hangs) can be
changed while it runs.
The sandbox, the tests and the benchmarks run against it; copy it to start a driver of your own.

Run it: `python -m kopf_csi.driver --endpoint unix:///tmp/csi.sock --node-id n1 --data-dir DIR`.
Embed it: `async with running_driver(DriverConfig(...), socket_path=...) as driver: ...`.

Modules, outermost first:

- `__main__`: the command line; `running`: `Driver`, `running_driver()`;
- `calls`: faults, logging and error mapping around every RPC; `faults`: the fault rules;
- `calllog`: what each volume-changing call did (created or found, deleted, published);
- `identity`, `controller`, `groupcontroller`, `node`: the servicers (messages in and out);
- `volumes`, `snapshots`, `groups`: the operations on records; `backend`: what they share;
- `attachments`, `capabilities`, `capacity`, `topology`, `paging`, `secrets`: pure rules;
- `messages`: message ⇄ record conversions; `records`: the records;
- `state`: records persisted as JSON; `storage`: content and target paths on disk;
- `config`: `DriverConfig`, `Features`, `Limits`, `SecretsPolicy`; `errors`: `DriverError`.

Only `kopf_csi.csi.serving` touches grpclib.
"""

from __future__ import annotations

from kopf_csi.driver.calllog import CallLog, CallRecord
from kopf_csi.driver.config import DriverConfig, Features, Limits, SecretsPolicy
from kopf_csi.driver.errors import DriverError
from kopf_csi.driver.faults import FaultRule, Faults
from kopf_csi.driver.running import Driver, running_driver

__all__ = [
    "CallLog",
    "CallRecord",
    "Driver",
    "DriverConfig",
    "DriverError",
    "FaultRule",
    "Faults",
    "Features",
    "Limits",
    "SecretsPolicy",
    "running_driver",
]
