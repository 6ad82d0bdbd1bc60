"""Topic naming rules, as Kafka's `Topic` class states them."""

from __future__ import annotations

import re

from klamm.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
METADATA_TOPIC = "__cluster_metadata"  # the KRaft metadata log; never a client-visible topic
SHARE_GROUP_STATE = "__share_group_state"  # Kafka's, listed as internal by its tools; klamm has no share groups
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def validate_topic_name(name: str | None) -> None:
    """Raise INVALID_TOPIC_EXCEPTION for a name Kafka would refuse."""
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise KafkaError(ErrorCode.invalid_topic_exception,
                         f"Topic name \"{name}\" is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """Kafka refuses topics that differ only by '.' versus '_' (metric names collide)."""
    return name.replace(".", "_")
