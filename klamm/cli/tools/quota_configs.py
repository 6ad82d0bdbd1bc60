"""`klamm configs --entity-type users|clients|ips`: client quotas, as kafka-configs.sh has them.

    klamm configs --bootstrap-server B --entity-type clients --entity-name c1 --alter
                  --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048' [--delete-config request_percentage]
    klamm configs --bootstrap-server B --entity-type users --entity-name alice
                  --entity-type clients --entity-default --alter --add-config request_percentage=50
    klamm configs --bootstrap-server B --entity-type ips --entity-default --alter
                  --add-config connection_creation_rate=10
    klamm configs --bootstrap-server B --entity-type users|clients|ips [--entity-name N | --entity-default] --describe

Each --entity-type takes the --entity-name or --entity-default given in the same
position; users and clients may be given together (a user's client). --alter
reads the entity's quotas first (a --delete-config of a quota it lacks fails
"Invalid config(s): ..."), then sends one AlterClientQuotas, values parsed as
doubles. --describe sends DescribeClientQuotas with a strict filter: a name
matches that entity, --entity-default the default one, an entity type without
either every entity of that type; it prints "Quota configs for user-principal
'alice', client-id 'c1' are producer_byte_rate=1024.0, ..." per entity, values
as Java prints a double and in the order kafka-configs.sh's hash maps list them.

klamm's librdkafka has no client quota API, so these requests go over klamm's
own connection, to the first bootstrap server that answers, secured as the
--command-config says (klamm.cli.tools.common.peer_security_of).
"""

from __future__ import annotations

import asyncio
import decimal
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from klamm.cli.tools.common import ToolError, peer_security_of

USERS, CLIENTS, IPS = "users", "clients", "ips"
QUOTA_ENTITY_TYPES = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}  # --entity-type -> ClientQuotaEntity type
USER_AND_CLIENT_QUOTAS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                          "controller_mutation_rate")  # QuotaConfig.isClientOrUserQuotaConfig
IP_QUOTAS = ("connection_creation_rate",)
DESCRIBE, ALTER, API_VERSIONS = 48, 49, 18
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
TIMEOUT_S = 30.0
_DESCRIPTIONS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}

Entity = tuple[tuple[str, "str | None"], ...]


# ----------------------------------------------------------------------- requests


def describe_quotas(args: Any, types: Sequence[str], names: Sequence[str]) -> list[tuple[Entity, dict[str, float]]]:
    """The quotas of the entities the (type, name) filter matches, strictly (ConfigCommand's
    getAllClientQuotasConfigs): a name "" is the default entity, a missing name any entity of the type."""
    components = []
    for index, entity_type in enumerate(types):
        name = names[index] if index < len(names) else None
        kind = SPECIFIED if name is None else DEFAULT if name == "" else EXACT
        components.append({"entity_type": QUOTA_ENTITY_TYPES[entity_type], "match_type": kind,
                           "match": name if kind == EXACT else None})
    response = _request(args, DESCRIBE, {"components": components, "strict": True})
    if response.error_code != 0:
        raise ToolError(f"{response.error_code.name}: {response.error_message}")
    return [(tuple((e.entity_type, e.entity_name) for e in entry.entity), {v.key: v.value for v in entry.values})
            for entry in response.entries]


def alter_quotas(args: Any, types: Sequence[str], names: Sequence[str], to_add: dict[str, str],
                 to_delete: Sequence[str]) -> None:
    """ConfigCommand.alterQuotaConfigs: check the deletions against the entity's quotas, then alter."""
    entities = describe_quotas(args, types, names)
    current = entities[0][1] if entities else {}
    invalid = [key for key in to_delete if key not in current]
    if invalid:
        raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    ops = []
    for key, text in to_add.items():
        try:
            value = float(text)
        except ValueError:
            raise ToolError(f"Cannot parse quota configuration value for {key}: {text}") from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in to_delete]
    entity = [{"entity_type": QUOTA_ENTITY_TYPES[t], "entity_name": n or None} for t, n in zip(types, names)]
    response = _request(args, ALTER, {"validate_only": False, "entries": [{"entity": entity, "ops": ops}]})
    for entry in response.entries:
        if entry.error_code != 0:
            raise ToolError(f"{entry.error_code.name}: {entry.error_message}")


def _request(args: Any, api_key: int, body: dict[str, Any]) -> Any:
    return asyncio.run(_exchange(args.bootstrap_server, api_key, body, peer_security_of(args)))


async def _exchange(bootstrap: str, api_key: int, body: dict[str, Any], security: Any) -> Any:
    from klamm.broker.client import BrokerConnection, BrokerUnavailable

    failure: Exception | None = None
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ToolError(f"invalid address {address!r}: expected host:port")
        connection = BrokerConnection(host.strip("[]"), int(port), "klamm-configs", TIMEOUT_S, security)
        try:
            versions = await connection.request(API_VERSIONS, 0, {})
            ranges = {int(k.api_key): int(k.max_version) for k in versions.api_keys}
            if api_key not in ranges:
                raise ToolError(f"The broker does not support {'DESCRIBE' if api_key == DESCRIBE else 'ALTER'}"
                                f"_CLIENT_QUOTAS")
            return await connection.request(api_key, min(ranges[api_key], 1), body)
        except BrokerUnavailable as exc:
            failure = exc
        finally:
            connection.close()
    raise ToolError(f"cannot reach {bootstrap}: {failure}")


# ----------------------------------------------------------------------- checks


def check_config_names(types: Sequence[str], to_add: dict[str, str], to_delete: Sequence[str],
                       scram_names: Iterable[str]) -> bool:
    """ConfigCommand's checks of the names given for users, clients or ips; True when they are quotas
    (False: a user's SCRAM credentials)."""
    scram = frozenset(scram_names)
    if types[0] == IPS:
        unknown = [k for k in [*to_add, *to_delete] if k not in IP_QUOTAS]
        if unknown:
            raise ToolError(f"Only connection quota configs can be added for '{IPS}' using --bootstrap-server. "
                            f"Unexpected config names: {','.join(unknown)}")
        return True
    quotas = [k for k in [*to_add, *to_delete] if k in USER_AND_CLIENT_QUOTAS]
    if types[0] == CLIENTS or len(types) == 2:
        for verb, names in (("added", list(to_add)), ("deleted", list(to_delete))):
            unexpected = [k for k in names if k not in USER_AND_CLIENT_QUOTAS]
            if unexpected:
                raise ToolError(f"Only quota configs can be {verb} for '{CLIENTS}' using --bootstrap-server. "
                                f"Unexpected config names: {', '.join(unexpected)}")
        return True
    for verb, names in (("added", list(to_add)), ("deleted", list(to_delete))):
        unknown = [k for k in names if k not in scram and k not in USER_AND_CLIENT_QUOTAS]
        if unknown:
            raise ToolError(f"Only quota and SCRAM credential configs can be {verb} for '{USERS}' using "
                            f"--bootstrap-server. Unexpected config names: {', '.join(unknown)}")
    if any(k in scram for k in [*to_add, *to_delete]):
        if quotas:
            raise ToolError(f"Cannot alter both quota and SCRAM credential configs simultaneously for '{USERS}' "
                            f"using --bootstrap-server.")
        return False
    return True


# ----------------------------------------------------------------------- output


def describe_lines(entities: Sequence[tuple[Entity, dict[str, float]]]) -> list[str]:
    """ConfigCommand.describeQuotaConfigs' lines, in the order its HashMaps list the entities and keys."""
    lines = []
    for entity, values in java_hash_order(entities, lambda item: _entity_hash(item[0])):
        names = dict(entity)
        parts = [f"{_DESCRIPTIONS[t]} '{names[t]}'" if names[t] is not None else f"the default {_DESCRIPTIONS[t]}"
                 for t in ("user", "client-id", "ip") if t in names]
        keys = java_hash_order(list(values), lambda key: java_string_hash(key))
        lines.append(f"Quota configs for {', '.join(parts)} are "
                     f"{', '.join(f'{key}={java_double(values[key])}' for key in keys)}")
    return lines


def java_double(value: float) -> str:
    """Java's Double.toString: 1024.0, 0.5, 1.0E7, 1.0E-4, NaN, Infinity."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    adjusted = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{adjusted}"


def java_string_hash(text: str) -> int:
    """String.hashCode over UTF-16 code units, as a 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _entity_hash(entity: Entity) -> int:
    """ClientQuotaEntity.hashCode: Objects.hash(entries), entries a map (sum of key ^ value hashes)."""
    total = sum(java_string_hash(t) ^ (0 if n is None else java_string_hash(n)) for t, n in dict(entity).items())
    return (31 + total) & 0xFFFFFFFF


def java_hash_order(items: Sequence[Any], hash_of: Callable[[Any], int]) -> list[Any]:
    """How `new HashMap<>(len(items))` filled with `items` in order iterates them: by bucket of the spread
    hash (growing the table past 3/4 full), insertion order within a bucket."""
    capacity = 1
    while capacity < len(items):
        capacity *= 2
    while len(items) > capacity * 3 // 4:
        capacity *= 2

    def bucket(item: Any) -> int:
        h = hash_of(item)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)  # stable: insertion order within a bucket
