"""Message types of every API version, taken from kio (generated from Kafka's specs).

Versions that Kafka 4.0 removed, which kio does not generate, are derived from
Kafka 3.9's specs and kio's classes by klamm.protocol.legacy.

kio declares each message once per version as frozen dataclasses and decodes them
natively; klamm only looks the types up here. Header versions follow Kafka's
rule: flexible request versions use request header v2 (else v1); flexible
responses use response header v1 (else v0) — except ApiVersions, whose response
header is always v0 so that a client can parse it before it knows our versions.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

from kio.index import api_key_map

from klamm.protocol.encoder import entity_encoder
from klamm.protocol.guard import struct_check
from klamm.protocol.legacy import LegacyTypeError, legacy_message_types

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36  # the only requests before a SASL client authenticates


@dataclass(frozen=True, slots=True)
class MessageTypes:
    api_key: int
    version: int
    request: type
    response: type
    flexible: bool

    @property
    def request_header_version(self) -> int:
        return 2 if self.flexible else 1

    @property
    def response_header_version(self) -> int:
        if self.api_key == API_VERSIONS_KEY:
            return 0
        return 1 if self.flexible else 0


def api_name(api_key: int) -> str:
    """kio's snake_case name of an API key, e.g. 0 -> 'produce'."""
    return api_key_map[api_key]


# One version's types are made by one thread at a time (load_message_types runs beside the loop): a version
# derived twice at once would have two sets of classes.
_making = threading.RLock()


@cache
def message_types(api_key: int, version: int) -> MessageTypes:
    """The request/response classes for one API version; ImportError if kio lacks it."""
    with _making:
        return _make(api_key, version)


def load_message_types(versions: Mapping[int, tuple[int, int]], stopped: Callable[[], bool] = lambda: False,
                       after_each: Callable[[], object] = lambda: None) -> int:
    """Make the types of every version in `versions` ({api key: (lowest, highest)}), with the response's encoder
    and the request's length check, newest versions first (the ones clients ask for), until `stopped()`, calling
    `after_each()` after each version; how many were made. Importing a version's kio classes costs milliseconds
    (kio builds each dataclass's methods with exec), and so does compiling a Fetch response's encoder: a broker
    does it before requests need them."""
    pairs = sorted(((key, version) for key, (low, high) in versions.items() for version in range(low, high + 1)),
                   key=lambda pair: (versions[pair[0]][1] - pair[1], pair[0]))
    made = 0
    for api_key, version in pairs:
        if stopped():
            break
        try:
            types = message_types(api_key, version)
        except ImportError:
            continue
        entity_encoder(types.response)
        if types.flexible:
            struct_check(types.request)
        made += 1
        after_each()
    return made


def _make(api_key: int, version: int) -> MessageTypes:
    name = api_key_map[api_key]
    package = f"kio.schema.{name}.v{version}"
    try:
        request_module = importlib.import_module(f"{package}.request")
        response_module = importlib.import_module(f"{package}.response")
    except ImportError:
        try:
            request, response = legacy_message_types(api_key, version)  # a version Kafka 4.0 removed
        except LegacyTypeError as exc:
            raise ImportError(str(exc)) from exc
        return MessageTypes(api_key, version, request, response, False)
    request = _entity_class(request_module, "Request")
    response = _entity_class(response_module, "Response")
    return MessageTypes(api_key, version, request, response, bool(request.__flexible__))


def _entity_class(module: object, suffix: str) -> type:
    for attribute in vars(module).values():
        if isinstance(attribute, type) and attribute.__name__.endswith(suffix) and getattr(attribute, "__type__", None) is not None:
            if attribute.__module__ == module.__name__ and attribute.__type__.name in ("request", "response"):  # type: ignore[attr-defined]
                return attribute
    raise ImportError(f"no {suffix} entity in {module}")
