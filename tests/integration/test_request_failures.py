"""A request whose handling or encoding fails closes its connection with one log line, never hangs it.

Kafka answers or disconnects; a connection that stays open and silent would hold
every later request on it forever (and the idle sweeper skips connections with
requests pending). The checks use a socket timeout, not a timed assertion.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

import pytest

from klamm.broker.handlers import Api
from tests.integration.conftest import API_VERSIONS, BrokerThread

pytestmark = pytest.mark.timeout(60)

DESCRIBE_CLUSTER = 60
VERSIONS_BODY = {"client_software_name": "t", "client_software_version": "1"}


def _raising(exc: BaseException) -> Callable[..., Any]:
    async def handle(broker: Any, request: Any) -> Any:
        raise exc
    return handle


def _returning(response: dict[str, Any]) -> Callable[..., Any]:
    async def handle(broker: Any, request: Any) -> Any:
        return response
    return handle


CASES = {
    "handler-struct-error": _raising(struct.error("boom")),
    "handler-value-error": _raising(ValueError("boom")),
    "handler-exception": _raising(Exception("boom")),
    # error_code is an int16: 70000 makes the encoder's struct.pack fail
    "encode-struct-error": _returning({"error_code": 70000, "throttle_time_ms": 0, "brokers": []}),
    # a string where an int16 goes: int() raises ValueError
    "encode-value-error": _returning({"error_code": "none", "throttle_time_ms": 0, "brokers": []}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_failed_request_closes_its_connection(broker: BrokerThread, case: str, caplog: pytest.LogCaptureFixture
                                              ) -> None:
    broker.call(lambda: broker.broker._apis.__setitem__(DESCRIBE_CLUSTER, Api(DESCRIBE_CLUSTER, 0, 1, CASES[case])))
    caplog.set_level(logging.INFO, logger="klamm.network")
    with broker.connect() as c:
        c.send(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        c.send(API_VERSIONS, 3, VERSIONS_BODY)  # pipelined behind it: must not wait forever
        c.expect_disconnect(timeout=5)
    failures = [r for r in caplog.records if r.name == "klamm.network" and r.levelno >= logging.ERROR]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    [record] = failures
    assert "api_key=60" in record.getMessage() and "\n" not in record.getMessage() and not record.exc_info
    with broker.connect() as c:  # the broker still serves others
        assert c.request(API_VERSIONS, 3, VERSIONS_BODY).error_code == 0
