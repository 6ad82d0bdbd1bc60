"""Request handlers, one module per API family, each declaring its keys and versions.

A handler is `async def handle(broker: BrokerServices, request) -> dict | entity | None`: a dict
is built into the negotiated version's response type; None means no response
(acks=0). Handlers do their synchronous work before their first await, so
requests of one connection take effect in arrival order. ApiVersions is built
from this registry, so only what is registered is advertised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from klamm.broker.services import BrokerServices


@dataclass(frozen=True)
class Api:
    key: int
    min_version: int
    max_version: int
    handle: Callable[[BrokerServices, Any], Awaitable[Any]]


def registry() -> dict[int, Api]:
    from klamm.broker.handlers import (acls, api_versions, client_quotas, cluster, configs, consumer_groups,
                                       delegation_tokens, elections, features, fetch, groups, groups_admin,
                                       groups_offsets,
                                       list_offsets, log_admin, metadata, produce, producer_ids, quorum,
                                       reassignments, sasl, scram_users, topics, transactions)

    apis: dict[int, Api] = {}
    for module in (api_versions, metadata, produce, fetch, list_offsets, topics, cluster, producer_ids,
                   groups, groups_offsets, groups_admin, consumer_groups, log_admin, configs, acls, elections,
                   reassignments, transactions, quorum, sasl, scram_users, client_quotas, features,
                   delegation_tokens):
        for api in module.APIS:
            apis[api.key] = api
    return apis
