"""Every (api, version) pair that ApiVersions advertises, sent for real and answered in that version's schema.

The matrix comes from the ApiVersions response itself, so a version cannot be
advertised without passing here. Each pair is sent twice: with every field at
its schema default (arrays empty), and with every array holding one element
whose fields are defaults too, with names pointing at an existing topic, so the
handler walks its per-topic and per-partition code. The answer may carry any
error code; what fails is a disconnect, a response that does not decode exactly
in the requested version's schema, or a handler that logs an error.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

import pytest
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type

from klamm.broker.handlers import registry
from klamm.protocol.api import message_types
from klamm.protocol.build import build

from tests.integration.conftest import API_VERSIONS, PRODUCE, BrokerThread, RawClient, create_topic

TOPIC = "every-version"
NAMES = {"topic", "name", "topic_name", "resource_name"}


def one_of_each(cls: type) -> dict[str, Any]:
    """Field values for `cls`: one element in each array of structs, the test topic in name fields."""
    data: dict[str, Any] = {}
    for field in fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            data[field.name] = [one_of_each(kind.type_)]
        elif isinstance(kind, EntityField):
            data[field.name] = one_of_each(kind.type_)
        elif field.name in NAMES and get_schema_field_type(field) == "string" and not kind.is_array:
            data[field.name] = TOPIC
    return data


def request_body(api_key: int, version: int, deep: bool) -> Any:
    request = message_types(api_key, version).request
    data = one_of_each(request) if deep else {}
    if api_key == PRODUCE:
        data["acks"] = -1  # acks=0 gets no response at all
    return build(request, data)


@pytest.fixture(scope="module")
def versions_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    broker = BrokerThread(tmp_path_factory.mktemp("every-version")).start()
    with broker.connect() as client:
        create_topic(client, TOPIC, partitions=1)
    yield broker
    broker.close()


PAIRS = [(key, version) for key, api in sorted(registry().items())
         for version in range(api.min_version, api.max_version + 1)]


def test_the_matrix_is_what_api_versions_advertises(versions_broker: BrokerThread) -> None:
    with versions_broker.connect() as client:
        response = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    advertised = [(int(k.api_key), v) for k in response.api_keys for v in range(k.min_version, k.max_version + 1)]
    assert sorted(advertised) == PAIRS
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 22} <= {key for key, _ in PAIRS}


@pytest.mark.parametrize("deep", [False, True], ids=["defaults", "one-of-each"])
@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=[f"{k}v{v}" for k, v in PAIRS])
def test_advertised_version_is_served(versions_broker: BrokerThread, caplog: pytest.LogCaptureFixture,
                                      api_key: int, version: int, deep: bool) -> None:
    caplog.set_level(logging.ERROR, logger="klamm")
    body = request_body(api_key, version, deep)
    with RawClient(versions_broker.port) as client:
        correlation_id = client.send(api_key, version, body)
        got, response = client.receive(api_key, version)  # decodes exactly, or fails
    assert got == correlation_id
    assert type(response) is message_types(api_key, version).response
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
