"""SCRAM credential decisions: AlterUserScramCredentials as metadata records (Kafka's ScramControlManager).

A request names deletions (user, mechanism) and upsertions (user, mechanism,
iterations, salt, salted password). Each user may appear once in a request:

- a user named again (deleted twice, upserted twice, or both) fails
  DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same
  request", and nothing is written for it; after a user has failed, its later
  entries are ignored;
- metadata.version below 3.5-IV2 (feature level 11): UNSUPPORTED_VERSION;
- an empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
- a mechanism other than SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2):
  UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism";
- iterations below 4096 or above 16384: UNACCEPTABLE_CREDENTIAL "Too few
  iterations" / "Too many iterations";
- deleting a credential the image lacks: RESOURCE_NOT_FOUND "Attempt to delete
  a user credential that does not exist".

Every user of the request gets one result: the successful deletions, then the
successful upsertions, then the failures. The records of every success form one
atomic batch: a RemoveUserScramCredentialRecord per deletion, and a
UserScramCredentialRecord per upsertion holding StoredKey = H(HMAC(salted,
"Client Key")) and ServerKey = HMAC(salted, "Server Key") (RFC 5802,
klamm.protocol.sasl.credential_from_salted_password) — the salted password
itself is never stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from klamm.controller.image import SCRAM_MECHANISM_NAMES, MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import (MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS, ScramCredential,
                                 credential_from_salted_password)

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_METADATA_VERSION",
    "ScramAlterResult",
    "ScramDeletion",
    "ScramUpsertion",
    "credential_record",
    "decide_alter_user_scram_credentials",
]

SCRAM_METADATA_VERSION = 11  # metadata.version 3.5-IV2: MetadataVersion.isScramSupported
DUPLICATE = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True)
class ScramDeletion:
    name: str
    mechanism: int  # the ScramMechanism type code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True)
class ScramAlterResult:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def credential_record(user: str, mechanism: str, credential: ScramCredential) -> MetadataRecord:
    return MetadataRecord("UserScramCredentialRecord", {
        "name": user, "mechanism": SCRAM_MECHANISMS[mechanism], "salt": credential.salt,
        "stored_key": credential.stored_key, "server_key": credential.server_key,
        "iterations": credential.iterations})


def decide_alter_user_scram_credentials(
    image: MetadataImage, deletions: Iterable[ScramDeletion], upsertions: Iterable[ScramUpsertion],
) -> tuple[list[ScramAlterResult], list[MetadataRecord]]:
    """Per-user results and the records of the successful changes (see the module docstring)."""
    supported = image.features.get("metadata.version", 0) >= SCRAM_METADATA_VERSION
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    failed: dict[str, ScramAlterResult] = {}
    for deletion in deletions:
        name = deletion.name
        if name in failed:
            continue
        if to_delete.pop(name, None) is not None:
            failed[name] = ScramAlterResult(name, ErrorCode.duplicate_resource, DUPLICATE)
        elif (error := _deletion_error(image, deletion, supported)) is not None:
            failed[name] = error
        else:
            to_delete[name] = deletion
    for upsertion in upsertions:
        name = upsertion.name
        if name in failed:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            failed[name] = ScramAlterResult(name, ErrorCode.duplicate_resource, DUPLICATE)
        elif (error := _upsertion_error(upsertion, supported)) is not None:
            failed[name] = error
        else:
            to_upsert[name] = upsertion
    results, records = [], []
    for deletion in to_delete.values():
        results.append(ScramAlterResult(deletion.name))
        records.append(MetadataRecord("RemoveUserScramCredentialRecord",
                                      {"name": deletion.name, "mechanism": deletion.mechanism}))
    for upsertion in to_upsert.values():
        mechanism = SCRAM_MECHANISM_NAMES[upsertion.mechanism]
        credential = credential_from_salted_password(mechanism, upsertion.salted_password, upsertion.salt,
                                                     upsertion.iterations)
        results.append(ScramAlterResult(upsertion.name))
        records.append(credential_record(upsertion.name, mechanism, credential))
    results.extend(failed.values())
    return results, records


def _name_and_mechanism_error(name: str, mechanism: int) -> ScramAlterResult | None:
    if not name:
        return ScramAlterResult(name, ErrorCode.unacceptable_credential, "Username must not be empty")
    if mechanism not in SCRAM_MECHANISM_NAMES:
        return ScramAlterResult(name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def _unsupported(name: str) -> ScramAlterResult:
    return ScramAlterResult(name, ErrorCode.unsupported_version, "The current metadata.version does not support SCRAM")


def _deletion_error(image: MetadataImage, deletion: ScramDeletion, supported: bool) -> ScramAlterResult | None:
    if not supported:
        return _unsupported(deletion.name)
    error = _name_and_mechanism_error(deletion.name, deletion.mechanism)
    if error is not None:
        return error
    if image.scram_credential(deletion.name, SCRAM_MECHANISM_NAMES[deletion.mechanism]) is None:
        return ScramAlterResult(deletion.name, ErrorCode.resource_not_found,
                                "Attempt to delete a user credential that does not exist")
    return None


def _upsertion_error(upsertion: ScramUpsertion, supported: bool) -> ScramAlterResult | None:
    if not supported:
        return _unsupported(upsertion.name)
    error = _name_and_mechanism_error(upsertion.name, upsertion.mechanism)
    if error is not None:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ScramAlterResult(upsertion.name, ErrorCode.unacceptable_credential, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        return ScramAlterResult(upsertion.name, ErrorCode.unacceptable_credential, "Too many iterations")
    return None
