"""ACL operations (Kafka's AclOperation codes) and the authorized-operations bit fields.

Metadata, DescribeCluster and DescribeGroups can report, per resource, the
operations the caller may perform as a 32-bit field (bit `code` set for each
allowed operation). klamm has no authorizer, and Kafka without one reports
every operation the resource type supports (AuthHelper.authorizedOperations
with AclEntry.supportedOperations). A request that does not ask gets
NOT_INCLUDED, the schema's default.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["AclOperation", "CLUSTER_OPERATIONS", "GROUP_OPERATIONS", "NOT_INCLUDED", "TOPIC_OPERATIONS", "bit_field"]

NOT_INCLUDED = -2147483648  # Integer.MIN_VALUE: "authorized operations not requested"


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


def bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit `code` for each operation."""
    field = 0
    for operation in operations:
        field |= 1 << operation
    return field


_op = AclOperation
TOPIC_OPERATIONS = bit_field((_op.READ, _op.WRITE, _op.CREATE, _op.DELETE, _op.ALTER, _op.DESCRIBE,
                              _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS))
CLUSTER_OPERATIONS = bit_field((_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                                _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE))
GROUP_OPERATIONS = bit_field((_op.READ, _op.DESCRIBE, _op.DELETE, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS))
