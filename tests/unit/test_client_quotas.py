"""Client quotas in the metadata log: the controller's validation (Kafka's ClientQuotaControlManager and its
tests), DescribeClientQuotas' filters (ClientQuotasRequestTest's matches), the quota a client gets (the
DefaultQuotaCallback precedence), the image, snapshots, restarts, and `klamm configs`' helpers."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from klamm.cli.tools import configs as configs_tool
from klamm.cli.tools import quota_configs, scram_configs
from klamm.cli.tools.common import ToolError
from klamm.controller.client_quotas import (AppliedQuota, ClientQuotaAlteration, QuotaFilterComponent,
                                            applicable_quota, decide_alter_client_quotas, describe_client_quotas,
                                            ip_hosts, java_entity, quota_entity)
from klamm.controller.controller import Controller, SnapshotPolicy
from klamm.controller.image import ImageBuilder, apply, empty_image
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.controller.snapshot import image_records
from klamm.protocol.errors import ErrorCode, KafkaError

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"
PRODUCE, CONSUME, REQUEST, MUTATION, CONNECTIONS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                                                     "controller_mutation_rate", "connection_creation_rate")
OK = (ErrorCode.none, None)


def controller() -> Controller:
    c = Controller(InMemoryMetadataLog(), 1, CLUSTER)
    c.load()
    return c


def alteration(entity: dict[str, str | None] | list[tuple[str, str | None]],
               **ops: float | None) -> ClientQuotaAlteration:
    pairs = tuple(entity.items()) if isinstance(entity, dict) else tuple(entity)
    return ClientQuotaAlteration(pairs, tuple(ops.items()))


def alter(c: Controller, *alterations: ClientQuotaAlteration, validate_only: bool = False,
          hosts: tuple[str, ...] = ()) -> list[tuple[ErrorCode, str | None]]:
    return [(r.error, r.message) for r in c.alter_client_quotas(alterations, validate_only=validate_only,
                                                                resolvable_hosts=hosts)]


def invalid(message: str) -> tuple[ErrorCode, str]:
    return ErrorCode.invalid_request, message


USER1 = {"user": "user-1"}


# ------------------------------------------------------------------ AlterClientQuotas


def test_alter_and_remove() -> None:
    """ClientQuotaControlManagerTest.testAlterAndRemove."""
    c = controller()
    assert alter(c, alteration(USER1, producer_byte_rate=10000.0)) == [OK]
    assert c.image.client_quotas(USER1) == {PRODUCE: 10000.0}
    assert alter(c, alteration(USER1, producer_byte_rate=10001.0, consumer_byte_rate=20000.0)) == [OK]
    assert c.image.client_quotas(USER1) == {PRODUCE: 10001.0, CONSUME: 20000.0}
    assert alter(c, alteration(USER1, producer_byte_rate=None)) == [OK]
    assert c.image.client_quotas(USER1) == {CONSUME: 20000.0}
    assert alter(c, alteration(USER1, request_percentage=None)) == [OK]  # removing what is not there
    assert c.image.client_quotas(USER1) == {CONSUME: 20000.0}
    assert alter(c, alteration(USER1, consumer_byte_rate=None)) == [OK]
    assert c.image.client_quotas(USER1) == {} and c.image.quotas_by_entity == {}  # an empty entity is dropped
    assert alter(c, alteration(USER1, consumer_byte_rate=20001.0, producer_byte_rate=10002.0,
                               request_percentage=99.0)) == [OK]
    assert c.image.client_quotas([("user", "user-1")]) == {CONSUME: 20001.0, PRODUCE: 10002.0, REQUEST: 99.0}


def test_records_written() -> None:
    c = controller()
    end = c.log.end_offset
    assert alter(c, alteration({"user": "alice", "client-id": None}, producer_byte_rate=1024.0,
                               request_percentage=None)) == [OK]
    [batch] = c.log.batches[-1:]
    records = [decode_record(value) for _, value in batch]
    assert [(r.type, r.data) for r in records] == [("ClientQuotaRecord", {
        "entity": [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id", "entity_name": None}],
        "key": PRODUCE, "value": 1024.0, "remove": False})]
    # The same value again, and removing a key the entity lacks, write nothing.
    end = c.log.end_offset
    same = alteration({"client-id": None, "user": "alice"}, producer_byte_rate=1024.0, consumer_byte_rate=None)
    assert alter(c, same) == [OK]
    assert c.log.end_offset == end
    assert alter(c, alteration({"user": "alice", "client-id": None}, producer_byte_rate=None)) == [OK]
    removal = decode_record(c.log.batches[-1][0][1])
    assert removal.data["remove"] is True and removal.data["key"] == PRODUCE


def test_one_batch_for_every_entity_and_nothing_when_validating() -> None:
    c = controller()
    end = c.log.end_offset
    results = alter(c, alteration({"user": "a"}, producer_byte_rate=1.0), alteration({"client-id": "b"}, bad=1.0),
                    alteration({"ip": "1.2.3.4"}, connection_creation_rate=5.0), validate_only=True)
    assert results == [OK, invalid("Invalid configuration key bad"), OK]
    assert c.log.end_offset == end and c.image.quotas_by_entity == {}
    results = alter(c, alteration({"user": "a"}, producer_byte_rate=1.0), alteration({"client-id": "b"}, bad=1.0),
                    alteration({"ip": "1.2.3.4"}, connection_creation_rate=5.0))
    assert results == [OK, invalid("Invalid configuration key bad"), OK]
    assert len(c.log.batches[-1]) == 2
    assert c.image.quotas_by_entity == {(("user", "a"),): {PRODUCE: 1.0}, (("ip", "1.2.3.4"),): {CONNECTIONS: 5.0}}


@pytest.mark.parametrize("entity, message", [
    ([], "Invalid empty client quota entity"),
    ([("user", "user-1"), ("foo", "bar")], "Unhandled client quota entity type: foo"),
    ([("foo", "bar"), ("ip", "1.2.3.4")], "Unhandled client quota entity type: foo"),
    ([("", "name")], "Unhandled client quota entity type: "),
    ([("user", "")], "Empty user not supported"),
    ([("client-id", "")], "Empty client-id not supported"),
    ([("user", "user-1"), ("ip", "1.2.3.4")],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("client-id", "c"), ("ip", None)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("ip", "example.invalid")], "example.invalid is not a valid IP or resolvable host."),
    ([("ip", "1.2.3.4.5")], "1.2.3.4.5 is not a valid IP or resolvable host."),
])
def test_invalid_entities(entity: list[tuple[str, str | None]], message: str) -> None:
    """ClientQuotaControlManagerTest.testInvalidEntityTypes and ClientQuotasRequestTest's invalid requests."""
    c = controller()
    end = c.log.end_offset
    key = CONNECTIONS if any(t == "ip" for t, _ in entity) else PRODUCE
    assert alter(c, ClientQuotaAlteration(tuple(entity), ((key, 10000.0),))) == [invalid(message)]
    assert c.log.end_offset == end


@pytest.mark.parametrize("entity, ops, message", [
    ({"user": "user-1"}, {"not.a.quota.key": 0.0, REQUEST: 99.9}, "Invalid configuration key not.a.quota.key"),
    ({"user": "user-1"}, {REQUEST: 99.9, "not.a.quota.key": 0.0}, "Invalid configuration key not.a.quota.key"),
    ({"user": "user"}, {"bad": 1.0}, "Invalid configuration key bad"),
    ({"client-id": "c"}, {CONNECTIONS: 10.0}, f"Invalid configuration key {CONNECTIONS}"),
    ({"ip": "1.2.3.4"}, {PRODUCE: 10.0}, f"Invalid configuration key {PRODUCE}"),
    ({"user": "user"}, {PRODUCE: 10000.5}, f"{PRODUCE} cannot be a fractional value."),
    ({"ip": None}, {CONNECTIONS: 0.5}, f"{CONNECTIONS} cannot be a fractional value."),
    ({"user": "u"}, {REQUEST: 0.0}, f"Quota {REQUEST} must be greater than 0"),
    ({"user": "u"}, {CONSUME: -5.0}, f"Quota {CONSUME} must be greater than 0"),
    ({"user": "u"}, {PRODUCE: 1e19}, f"Proposed value for {PRODUCE} is too large for a LONG."),
    ({"user": "u"}, {PRODUCE: math.inf}, f"Proposed value for {PRODUCE} is too large for a LONG."),
    ({"ip": "::1"}, {CONNECTIONS: 2.0**31}, f"Proposed value for {CONNECTIONS} is too large for an INT."),
])
def test_invalid_quotas(entity: dict[str, str | None], ops: dict[str, float], message: str) -> None:
    c = controller()
    assert alter(c, alteration(entity, **ops)) == [invalid(message)]
    assert c.image.quotas_by_entity == {}


def test_values_kafka_accepts() -> None:
    c = controller()
    assert alter(c, alteration({"user": "u"}, request_percentage=12.34, controller_mutation_rate=math.inf,
                               producer_byte_rate=2.0**62, consumer_byte_rate=1.0000001),
                 alteration({"ip": None}, connection_creation_rate=2.0**31 - 1)) == [OK, OK]
    assert c.image.client_quotas({"user": "u"})[CONSUME] == 1.0000001  # within 1e-6 of a whole number
    assert alter(c, alteration({"user": "u"}, request_percentage=math.nan)) == [OK]  # as Java: NaN passes
    assert math.isnan(c.image.client_quotas({"user": "u"})[REQUEST])
    # Removing a key the entity type does not take is no error (nothing to remove).
    assert alter(c, alteration({"ip": None}, producer_byte_rate=None)) == [OK]


def test_duplicates() -> None:
    """A key twice in one entry, or an entity in two entries: INVALID_REQUEST with Kafka's (overwritten) message;
    an earlier entry's records for the entity stay, as in Kafka."""
    c = controller()
    twice = ClientQuotaAlteration((("user", "u"),), ((PRODUCE, 1.0), (PRODUCE, 2.0)))
    entity_text = "ClientQuotaEntity(entries={user=u})"
    assert alter(c, twice) == [invalid(f"Ignoring duplicate entity {entity_text}")]
    assert c.image.quotas_by_entity == {}
    first = alteration({"user": "u", "client-id": "c"}, producer_byte_rate=1.0)
    second = alteration({"client-id": "c", "user": "u"}, consumer_byte_rate=2.0)
    assert alter(c, first, second) == [
        invalid("Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=u})")]
    assert c.image.client_quotas({"user": "u", "client-id": "c"}) == {PRODUCE: 1.0}


def test_an_entity_type_named_twice_keeps_its_last_name() -> None:
    """Kafka's request turns an entry's entity into a map."""
    c = controller()
    results = c.alter_client_quotas([ClientQuotaAlteration((("user", "a"), ("user", "b")), ((PRODUCE, 5.0),))])
    assert [(r.entity, r.error) for r in results] == [((("user", "b"),), ErrorCode.none)]
    assert c.image.quotas_by_entity == {(("user", "b"),): {PRODUCE: 5.0}}


def test_results_name_each_entity_as_a_map_in_request_order() -> None:
    c = controller()
    results = c.alter_client_quotas([alteration([("client-id", "c"), ("user", None)], request_percentage=50.0),
                                     alteration({"ip": "10.0.0.1"}, connection_creation_rate=3.0),
                                     alteration({"user": "x"}, nope=1.0)])
    assert [(r.entity, r.error) for r in results] == [
        ((("client-id", "c"), ("user", None)), ErrorCode.none), ((("ip", "10.0.0.1"),), ErrorCode.none),
        ((("user", "x"),), ErrorCode.invalid_request)]
    assert c.image.client_quotas({"user": None, "client-id": "c"}) == {REQUEST: 50.0}


def test_ip_host_names_resolved_by_the_caller() -> None:
    alterations = [alteration({"ip": "localhost"}, connection_creation_rate=5.0),
                   alteration({"ip": "127.0.0.1"}, connection_creation_rate=5.0),
                   alteration({"ip": None}, connection_creation_rate=5.0),
                   alteration({"user": "localhost"}, producer_byte_rate=5.0)]
    assert ip_hosts(alterations) == {"localhost"}
    image = empty_image(CLUSTER, 1)
    results, _ = decide_alter_client_quotas(image, alterations)
    assert [r.error for r in results] == [ErrorCode.invalid_request] + [ErrorCode.none] * 3
    results, records = decide_alter_client_quotas(image, alterations, resolvable_hosts={"localhost"})
    assert [r.error for r in results] == [ErrorCode.none] * 4 and len(records) == 4


def test_the_local_controller_client_resolves_ip_host_names() -> None:
    import asyncio

    from klamm.broker.services import LocalControllerClient

    c = controller()
    client = LocalControllerClient(c, None, None)  # type: ignore[arg-type]
    results = asyncio.run(client.alter_client_quotas(
        [alteration({"ip": "localhost"}, connection_creation_rate=5.0),
         alteration({"ip": "example.invalid"}, connection_creation_rate=5.0)], validate_only=False))
    assert [(r.error, r.message) for r in results] == [
        OK, invalid("example.invalid is not a valid IP or resolvable host.")]
    assert c.image.client_quotas({"ip": "localhost"}) == {CONNECTIONS: 5.0}


def test_java_entity_text() -> None:
    assert java_entity((("user", "u"), ("client-id", None))) == "ClientQuotaEntity(entries={client-id=null, user=u})"
    assert java_entity((("ip", "1.2.3.4"),)) == "ClientQuotaEntity(entries={ip=1.2.3.4})"


# ------------------------------------------------------------------ DescribeClientQuotas

# ClientQuotasRequestTest's entities: (user, client-id, request_percentage), None meaning absent
_USER_CLIENT = [("user-1", "client-id-1", 50.50), ("user-2", "client-id-1", 51.51), ("user-3", "client-id-2", 52.52),
                (None, "client-id-1", 53.53), ("user-1", None, 54.54), ("user-3", None, 55.55)]
_ABSENT = object()
_ENTITIES = ([({"user": u, "client-id": c}, v) for u, c, v in _USER_CLIENT]
             + [({"user": "user-1"}, 56.56), ({"user": "user-2"}, 57.57), ({"user": "user-3"}, 58.58),
                ({"user": None}, 59.59), ({"client-id": "client-id-2"}, 60.60)])
_IPS = [({"ip": "1.2.3.4"}, 10.0), ({"ip": "2.3.4.5"}, 20.0)]


@pytest.fixture(scope="module")
def matching() -> Controller:
    c = controller()
    results = alter(c, *[alteration(e, request_percentage=v) for e, v in _ENTITIES],
                    *[alteration(e, connection_creation_rate=v) for e, v in _IPS])
    assert results == [OK] * 13
    return c


def describe(c: Controller, *components: tuple[str, int, str | None], strict: bool = False) -> dict:
    matched = describe_client_quotas(c.image, [QuotaFilterComponent(*component) for component in components], strict)
    return {entity: dict(values) for entity, values in matched}


EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def test_describe_exact_matches(matching: Controller) -> None:
    for entity, value in _ENTITIES:
        components = [(t, DEFAULT, None) if n is None else (t, EXACT, n) for t, n in entity.items()]
        assert describe(matching, *components, strict=True) == {quota_entity(entity): {REQUEST: value}}
    for entity in [{"user": "user-1", "client-id": "client-id-2"}, {"user": "user-3", "client-id": "client-id-1"},
                   {"user": "user-2", "client-id": None}, {"user": "user-4"},
                   {"user": None, "client-id": "client-id-2"}, {"client-id": "client-id-1"},
                   {"client-id": "client-id-3"}]:
        components = [(t, DEFAULT, None) if n is None else (t, EXACT, n) for t, n in entity.items()]
        assert describe(matching, *components, strict=True) == {}


@pytest.mark.parametrize("components, strict, expected", [
    ([("user", EXACT, "user-1")], False, 3),
    ([("user", EXACT, "unknown")], False, 0),
    ([("client-id", EXACT, "client-id-2")], False, 2),
    ([("user", DEFAULT, None)], False, 2),
    ([("user", EXACT, "user-2")], True, 1),
    ([("client-id", EXACT, "client-id-1")], True, 0),
    ([("user", SPECIFIED, None)], True, 4),
    ([("user", SPECIFIED, None)], False, 10),
    ([("client-id", SPECIFIED, None)], True, 1),
    ([("client-id", SPECIFIED, None)], False, 7),
    ([("ip", SPECIFIED, None)], False, 2),
    ([], False, 13),
    ([], True, 0),
])
def test_describe_partial_matches(matching: Controller, components: list, strict: bool, expected: int) -> None:
    """ClientQuotasRequestTest.testDescribeClientQuotasMatchPartial."""
    assert len(describe(matching, *components, strict=strict)) == expected


def test_describe_results_are_sorted_with_their_values(matching: Controller) -> None:
    matched = describe_client_quotas(matching.image, [QuotaFilterComponent("user", EXACT, "user-1")], False)
    assert [entity for entity, _ in matched] == [
        (("user", "user-1"),), (("user", "user-1"), ("client-id", None)),
        (("user", "user-1"), ("client-id", "client-id-1"))]
    assert dict(matched[0][1]) == {REQUEST: 56.56}


@pytest.mark.parametrize("components, error, message", [
    ([("", SPECIFIED, None)], ErrorCode.invalid_request, "Invalid empty entity type."),
    ([("user", SPECIFIED, None), ("user", EXACT, "x")], ErrorCode.invalid_request,
     "Entity type user cannot appear more than once in the filter."),
    ([("other", EXACT, "name")], ErrorCode.unsupported_version, "Unsupported entity type other"),
    ([("user", EXACT, None)], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "x")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", SPECIFIED, "x")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], ErrorCode.invalid_request, "Unknown match type 7"),
    ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], ErrorCode.invalid_request,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
    ([("client-id", EXACT, "c"), ("ip", DEFAULT, None)], ErrorCode.invalid_request,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe_errors(components: list, error: ErrorCode, message: str) -> None:
    with pytest.raises(KafkaError) as caught:
        describe(controller(), *components)
    assert (caught.value.code, caught.value.message) == (error, message)


# ------------------------------------------------------------------ the quota a client gets

_LEVELS = [  # Kafka's precedence, most specific first, with the tags of each level's sensor
    ({"user": "alice", "client-id": "app"}, ("alice", "app")),
    ({"user": "alice", "client-id": None}, ("alice", "app")),
    ({"user": "alice"}, ("alice", "")),
    ({"user": None, "client-id": "app"}, ("alice", "app")),
    ({"user": None, "client-id": None}, ("alice", "app")),
    ({"user": None}, ("alice", "")),
    ({"client-id": "app"}, ("", "app")),
    ({"client-id": None}, ("", "app")),
]


@pytest.mark.parametrize("level", range(len(_LEVELS)))
def test_precedence(level: int) -> None:
    """With a quota at this level and every less specific one, this level's applies."""
    quotas = {quota_entity(entity): {PRODUCE: float(100 + i)} for i, (entity, _) in enumerate(_LEVELS) if i >= level}
    entity, tags = _LEVELS[level]
    assert applicable_quota(quotas, "alice", "app", PRODUCE) == AppliedQuota(100.0 + level, quota_entity(entity), tags)
    assert applicable_quota(quotas, "alice", "app", CONSUME) is None  # per key
    # Another user and client id fall to the defaults.
    other = applicable_quota(quotas, "bob", "other", PRODUCE)
    defaults = [i for i, (e, _) in enumerate(_LEVELS) if i >= level and all(
        v is None for v in e.values())]
    if defaults:
        assert other is not None and other.value == 100.0 + defaults[0]
    else:
        assert other is None


def test_no_quota() -> None:
    assert applicable_quota({}, "alice", "app", PRODUCE) is None
    quotas = {(("user", "bob"),): {PRODUCE: 1.0}, (("client-id", "other"),): {PRODUCE: 2.0}}
    assert applicable_quota(quotas, "alice", "app", PRODUCE) is None


def test_keys_apply_independently() -> None:
    quotas = {(("user", "alice"),): {PRODUCE: 1.0}, (("client-id", "app"),): {CONSUME: 2.0, PRODUCE: 3.0},
              (("user", None), ("client-id", None)): {REQUEST: 25.0}}
    assert applicable_quota(quotas, "alice", "app", PRODUCE) == AppliedQuota(1.0, (("user", "alice"),), ("alice", ""))
    assert applicable_quota(quotas, "alice", "app", CONSUME) == AppliedQuota(2.0, (("client-id", "app"),), ("", "app"))
    assert applicable_quota(quotas, "alice", "app", REQUEST) == AppliedQuota(
        25.0, (("user", None), ("client-id", None)), ("alice", "app"))


def test_an_empty_client_id_as_kafka_treats_it() -> None:
    """Kafka's tags drop the client id level when the client id is empty."""
    quotas = {(("user", "alice"), ("client-id", None)): {PRODUCE: 1.0}, (("user", None),): {PRODUCE: 2.0}}
    assert applicable_quota(quotas, "alice", "", PRODUCE) == AppliedQuota(2.0, (("user", None),), ("alice", ""))


def test_the_image_lookups() -> None:
    c = controller()
    alter(c, alteration({"user": None, "client-id": None}, producer_byte_rate=1024.0),
          alteration({"user": "alice"}, producer_byte_rate=4096.0, request_percentage=50.0))
    image = c.image
    assert image.applicable_client_quota("alice", "app", PRODUCE) == AppliedQuota(
        4096.0, (("user", "alice"),), ("alice", ""))
    assert image.applicable_client_quota("bob", "app", PRODUCE).value == 1024.0
    assert image.applicable_client_quota("bob", "app", REQUEST) is None
    assert image.client_quotas((("client-id", None), ("user", None))) == {PRODUCE: 1024.0}
    assert image.client_quotas({"user": "nobody"}) == {}


# ------------------------------------------------------------------ image, snapshots, restart


def test_records_replay_into_the_image() -> None:
    image = empty_image(CLUSTER, 1)
    entity = [{"entity_type": "client-id", "entity_name": "c1"}, {"entity_type": "user", "entity_name": None}]
    record = MetadataRecord("ClientQuotaRecord", {"entity": entity, "key": PRODUCE, "value": 1.5, "remove": False})
    decoded = decode_record(encode_record(record))
    assert decoded.version == 0
    image = apply(image, decoded)
    assert image.quotas_by_entity == {(("user", None), ("client-id", "c1")): {PRODUCE: 1.5}}
    untouched = apply(image, MetadataRecord("NoOpRecord", {}))
    assert untouched.quotas_by_entity is image.quotas_by_entity  # not copied when no quota changes
    removal = MetadataRecord("ClientQuotaRecord", {"entity": entity, "key": PRODUCE, "value": 0.0, "remove": True})
    image = apply(image, decode_record(encode_record(removal)))
    assert image.quotas_by_entity == {}
    assert apply(image, removal).quotas_by_entity == {}  # removing what is not there changes nothing


def test_snapshot_records_rebuild_the_quotas() -> None:
    c = controller()
    alter(c, alteration({"user": "bob"}, producer_byte_rate=1.0, consumer_byte_rate=2.0),
          alteration({"user": None, "client-id": "x"}, request_percentage=3.5),
          alteration({"ip": None}, connection_creation_rate=4.0),
          alteration({"client-id": None}, consumer_byte_rate=5.0))
    builder = ImageBuilder(empty_image(CLUSTER, 1))
    records = list(image_records(c.image))
    for record in records:
        builder.apply(decode_record(encode_record(record)))
    assert builder.build().quotas_by_entity == c.image.quotas_by_entity
    quotas = [r for r in records if r.type == "ClientQuotaRecord"]
    assert len(quotas) == 5 and not any(r.data["remove"] for r in quotas)


@pytest.mark.parametrize("snapshot", [False, True], ids=["log", "snapshot"])
def test_quotas_survive_a_restart(tmp_path: Path, snapshot: bool) -> None:
    policy = SnapshotPolicy(max_bytes_between=1 << 62, max_interval_ms=0, retention_bytes=-1, retention_ms=-1)
    c = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER, snapshots=policy)
    c.load()
    alter(c, alteration({"user": "alice", "client-id": "app"}, producer_byte_rate=1024.0),
          alteration({"ip": "10.1.2.3"}, connection_creation_rate=7.0))
    alter(c, alteration({"user": "alice", "client-id": "app"}, producer_byte_rate=None, consumer_byte_rate=2048.0))
    if snapshot:
        assert c.snapshot() is not None
    before = c.image.quotas_by_entity
    c.close()
    again = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER, snapshots=policy)
    again.load()
    assert again.image.quotas_by_entity == before
    assert again.image.client_quotas({"user": "alice", "client-id": "app"}) == {CONSUME: 2048.0}
    again.close()


# ------------------------------------------------------------------ klamm configs


def test_java_double_text() -> None:
    cases = {1024.0: "1024.0", 0.5: "0.5", 1e7: "1.0E7", 12345678.9: "1.23456789E7", 1e-4: "1.0E-4",
             0.001: "0.001", 9.223372036854776e18: "9.223372036854776E18", 50.5: "50.5", math.inf: "Infinity",
             math.nan: "NaN", 0.0: "0.0"}
    assert {value: quota_configs.java_double(value) for value in cases} == cases


def test_describe_lines_in_kafka_configs_order() -> None:
    """The order Java's HashMaps give (checked against a JVM): consumer before producer with two keys."""
    lines = quota_configs.describe_lines([
        ((("user", "alice"),), {PRODUCE: 1024.0, CONSUME: 2048.0}),
        ((("user", None), ("client-id", "c1")), {REQUEST: 1e7}),
        ((("ip", "1.2.3.4"),), {CONNECTIONS: 10.0}),
        ((("client-id", None),), {PRODUCE: 1.0, CONSUME: 2.0, REQUEST: 3.0, MUTATION: 4.0}),
    ])
    assert lines == [
        "Quota configs for ip '1.2.3.4' are connection_creation_rate=10.0",
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0",
        "Quota configs for the default user-principal, client-id 'c1' are request_percentage=1.0E7",
        ("Quota configs for the default client-id are producer_byte_rate=1.0, consumer_byte_rate=2.0, "
         "controller_mutation_rate=4.0, request_percentage=3.0"),
    ]


def test_java_hash_order_matches_a_jvm() -> None:
    """`new HashMap<>(8)` of these ClientQuotaEntity keys iterates them as 6, 2, 0, 7, 4, 5, 1, 3 (JDK 17)."""
    entities = [(("user", "alice"),), (("user", None),), (("client-id", "c1"),), (("client-id", None),),
                (("user", "bob"), ("client-id", "c2")), (("user", "alice"), ("client-id", None)),
                (("ip", "1.2.3.4"),), (("ip", None),)]
    ordered = quota_configs.java_hash_order(entities, quota_configs._entity_hash)
    assert [entities.index(e) for e in ordered] == [6, 2, 0, 7, 4, 5, 1, 3]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configs_tool.add_arguments(parser)
    args = parser.parse_args(["--bootstrap-server", "127.0.0.1:1", *argv])
    configs_tool._single_entity(args)
    return args


def test_entity_names_pair_with_types_in_command_line_order() -> None:
    args = parse("--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", "c1",
                 "--describe")
    assert (args.entity_types, args.entity_names) == (["users", "clients"], ["", "c1"])
    assert args.entity_type == "users" and args.entity_default and args.entity_name is None
    args = parse("--entity-name", "c1", "--entity-type", "clients", "--describe")
    assert (args.entity_types, args.entity_names, args.entity_name) == (["clients"], ["c1"], "c1")


@pytest.mark.parametrize("argv, message", [
    (["--entity-type", "users", "--entity-type", "users", "--describe"], "Duplicate entity type(s) specified: users"),
    (["--entity-type", "users", "--entity-type", "ips", "--describe"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--entity-type", "topics", "--entity-type", "clients", "--describe"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--entity-type", "ips", "--entity-name", "not an ip", "--describe"],
     "The entity name for ips must be a valid IP or resolvable host, but it is: not an ip"),
    (["--entity-type", "clients", "--alter", "--add-config", "producer_byte_rate=1"],
     "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
    (["--entity-type", "clients", "--entity-name", "c", "--alter"],
     "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
    (["--entity-type", "users", "--entity-name", "u", "--entity-type", "clients", "--alter", "--add-config",
      "producer_byte_rate=1"], "An entity name must be specified for every entity type"),
    (["--entity-type", "clients", "--entity-name", "a", "--entity-name", "b", "--describe"],
     "More entity names specified than entity types"),
])
def test_tool_argument_checks(argv: list[str], message: str) -> None:
    with pytest.raises(ToolError) as caught:
        configs_tool.check_args(parse(*argv))
    assert str(caught.value) == message


@pytest.mark.parametrize("types, to_add, to_delete, message", [
    (["clients"], {"SCRAM-SHA-256": "[password=x]"}, [],
     "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: SCRAM-SHA-256"),
    (["users", "clients"], {}, ["colour"],
     "Only quota configs can be deleted for 'clients' using --bootstrap-server. Unexpected config names: colour"),
    (["users"], {"colour": "red"}, [],
     "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
     "Unexpected config names: colour"),
    (["users"], {"SCRAM-SHA-256": "[password=x]", PRODUCE: "1"}, [],
     "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using --bootstrap-server."),
    (["ips"], {PRODUCE: "1"}, ["x"],
     "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
     "Unexpected config names: producer_byte_rate,x"),
])
def test_tool_config_name_checks(types: list[str], to_add: dict[str, str], to_delete: list[str],
                                 message: str) -> None:
    with pytest.raises(ToolError) as caught:
        quota_configs.check_config_names(types, to_add, to_delete, scram_configs.MECHANISMS)
    assert str(caught.value) == message


def test_tool_config_names_choose_quotas_or_scram() -> None:
    mechanisms = scram_configs.MECHANISMS
    assert quota_configs.check_config_names(["users"], {PRODUCE: "1"}, [REQUEST], mechanisms) is True
    assert quota_configs.check_config_names(["users"], {"SCRAM-SHA-512": "[password=p]"}, [], mechanisms) is False
    assert quota_configs.check_config_names(["ips"], {CONNECTIONS: "1"}, [], mechanisms) is True
