"""Feature flags (KIP-584 under KRaft): the levels klamm supports, those finalized, and UpdateFeatures.

klamm runs one set of features:
- metadata.version up to 3.9-IV0 (level 21), the level every klamm cluster is
  bootstrapped with. The image holds it (a FeatureLevelRecord); an upgrade within
  the range is a new record, and a downgrade is refused as Kafka 4 refuses one that
  could lose metadata.
- group.version 1: the consumer group protocol (KIP-848), which klamm always
  serves. It cannot be turned off, so 1 is both ends of its supported range and
  its finalized level whatever the metadata log says.

Features klamm lacks (transaction.version 2, kraft.version 1 for dynamic
quorums, eligible.leader.replicas.version, share.version) are not listed: a
client then runs them at level 0, which is what klamm implements. Decisions
follow Kafka's FeatureControlManager: the first update that fails fails the whole
request with INVALID_UPDATE_VERSION, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from klamm.controller.image import MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode

METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
BOOTSTRAP_METADATA_VERSION = 21  # 3.9-IV0: what klamm writes at bootstrap (klamm.controller.controller)
MINIMUM_METADATA_VERSION = 7  # 3.3-IV3, Kafka 4's lowest: klamm reads every level from there
# name -> (min, max) level this node supports
SUPPORTED: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, BOOTSTRAP_METADATA_VERSION),
    GROUP_VERSION: (1, 1),
}
ALWAYS_FINALIZED: Mapping[str, int] = {GROUP_VERSION: 1}

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures' upgrade types
# What an UpdateFeatures answer's message says before the failed update's reason (Kafka's QuorumController)
ALL_FAILED = "The update failed for all features since the following feature had an error: "


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: int = UPGRADE


def finalized_features(image: MetadataImage) -> dict[str, int]:
    """The finalized level of each enabled feature (level 0, disabled, is left out, as Kafka leaves it out)."""
    levels = {**ALWAYS_FINALIZED, **image.features}
    return {name: level for name, level in levels.items() if level > 0}


def decide_update_features(image: MetadataImage, node_id: int, updates: Sequence[FeatureUpdate]
                           ) -> tuple[ErrorCode, str | None, list[MetadataRecord]]:
    """(error, message, records): the FeatureLevelRecords of the updates, or the first update's error and none."""
    finalized = finalized_features(image)
    records: list[MetadataRecord] = []
    for update in updates:
        refusal = _refusal(update, finalized.get(update.name, 0), node_id)
        if refusal is not None:
            return ErrorCode.invalid_update_version, refusal, []
        records.append(MetadataRecord("FeatureLevelRecord", {"name": update.name, "feature_level": update.level}))
    return ErrorCode.none, None, records


def _refusal(update: FeatureUpdate, current: int, node_id: int) -> str | None:
    """Why `update` cannot be made (Kafka's messages), or None."""
    name, level = update.name, update.level
    if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _invalid(update, "The controller does not support the given upgrade type.")
    if level < 0:
        return _invalid(update, "A feature version cannot be less than 0.")
    if name not in SUPPORTED:
        return _invalid(update, f"Local controller {node_id} does not support this feature.")
    low, high = SUPPORTED[name]
    if not low <= level <= high:
        return _invalid(update, f"Local controller {node_id} only supports versions "
                                f"{low if low == high else f'{low}-{high}'}")
    if level < current and update.upgrade_type == UPGRADE:
        return _invalid(update, "Can't downgrade the version of this feature without setting the upgrade type to "
                                "either safe or unsafe downgrade.")
    if level > current and update.upgrade_type != UPGRADE:
        return _invalid(update, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION and level < current:
        # every level klamm supports below 21 has other metadata record versions: a downgrade could lose some
        if update.upgrade_type == UNSAFE_DOWNGRADE:
            return f"Invalid metadata.version {level}. Unsafe metadata downgrade is not supported in this version."
        return (f"Invalid metadata.version {level}. Refusing to perform the requested downgrade because it might "
                "delete metadata information.")
    return None


def _invalid(update: FeatureUpdate, reason: str) -> str:
    return f"Invalid update version {update.level} for feature {update.name}. {reason}"
