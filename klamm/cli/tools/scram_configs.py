"""`klamm configs --entity-type users`: the SCRAM credentials of users, as kafka-configs.sh has them.

    klamm configs --bootstrap-server B --entity-type users [--entity-name U] --describe
    klamm configs --bootstrap-server B --entity-type users --entity-name U --alter
                  [--add-config 'SCRAM-SHA-256=[iterations=8192,password=secret],SCRAM-SHA-512=[password=secret]']
                  [--delete-config SCRAM-SHA-512]

--describe prints "SCRAM credential configs for user-principal 'U' are
SCRAM-SHA-256=iterations=8192, ..." per user with credentials (a named user
without any prints nothing). --alter sends AlterUserScramCredentials through
librdkafka, which salts the password (random salt, PBKDF2) so that only the
salted password travels; iterations default to 4096.

One difference from kafka-configs.sh: Kafka's controller refuses a request that
names a user twice (DUPLICATE_RESOURCE), and kafka-configs.sh sends every
mechanism of the command in one request, so against Kafka 3.9 adding or
deleting two mechanisms at once fails. This tool sends one request per
mechanism (deletions first), so such a command works — not atomically: a
failure stops at that mechanism, and the earlier ones stay done.
A user's quotas (consumer_byte_rate, ...) are klamm/cli/tools/quota_configs.py's.
"""

from __future__ import annotations

import re

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from klamm.cli.tools import quota_configs
from klamm.cli.tools.common import ToolError, kafka_error_message, kafka_error_name
from klamm.protocol.sasl import MIN_ITERATIONS

TIMEOUT_S = 30.0
DEFAULT_ITERATIONS = 4096  # ConfigCommand.DefaultScramIterations
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def mechanism_name(mechanism: ScramMechanism) -> str:
    return mechanism.name.replace("_", "-")


# ----------------------------------------------------------------------- describe


def describe(admin: AdminClient, user: str | None) -> list[str]:
    """ConfigCommand's lines for `user`, or for every user with credentials (sorted) when None."""
    if user is None:
        descriptions = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        return [_line(name, descriptions[name]) for name in sorted(descriptions)]
    future = admin.describe_user_scram_credentials([user], request_timeout=TIMEOUT_S)[user]
    try:
        return [_line(user, future.result(TIMEOUT_S))]
    except KafkaException as exc:
        if kafka_error_name(exc) == "RESOURCE_NOT_FOUND":
            return []  # Kafka's DescribeUserScramCredentialsResult.users() leaves such a user out
        return [(f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                 f"{kafka_error_name(exc)}: {kafka_error_message(exc)}")]


def _line(user: str, description) -> str:
    infos = sorted(description.scram_credential_infos, key=lambda info: info.mechanism.value)
    text = ", ".join(f"{mechanism_name(info.mechanism)}=iterations={info.iterations}" for info in infos)
    return f"SCRAM credential configs for user-principal '{user}' are {text}"


# ----------------------------------------------------------------------- alter


def check_config_names(to_add: dict[str, str], to_delete: list[str]) -> None:
    """ConfigCommand's checks of the names given for a user's SCRAM credentials: SCRAM mechanisms only
    (quota configs go to klamm/cli/tools/quota_configs.py; both at once are refused)."""
    names = [*to_add, *to_delete]
    if quota_configs.check_config_names([quota_configs.USERS], to_add, to_delete, MECHANISMS) and names:
        raise ToolError(f"Quota configs are not SCRAM credentials: {', '.join(names)}")


def upsertion(user: str, mechanism: str, credential: str) -> UserScramCredentialUpsertion:
    """`iterations=N,password=P` or `password=P` (ConfigCommand's pattern) as an upsertion."""
    match = _CREDENTIAL.fullmatch(credential)
    if match is None:
        raise ToolError(f"Invalid credential property {mechanism.replace('-', '_')}={credential}")
    text, password = match.groups()
    try:
        iterations = DEFAULT_ITERATIONS if text is None or text == "-1" else int(text)
    except ValueError:
        raise ToolError(f'For input string: "{text}"') from None
    if iterations < MIN_ITERATIONS:
        raise ToolError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}")
    if not password:
        raise ToolError("Empty key")  # what Java's HMAC says to kafka-configs.sh about an empty password
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[mechanism], iterations),
                                        password.encode("utf-8"))


def alter(admin: AdminClient, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
    if not user:
        raise ToolError("The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
                        "using --bootstrap-server.")
    check_config_names(to_add, to_delete)
    alterations = [UserScramCredentialDeletion(user, MECHANISMS[m]) for m in to_delete]
    alterations += [upsertion(user, m, credential) for m, credential in to_add.items()]
    for alteration in alterations:  # one request each: see the module docstring
        admin.alter_user_scram_credentials([alteration], request_timeout=TIMEOUT_S)[user].result(TIMEOUT_S)
