"""Feature flags: ApiVersions lists what klamm supports and what is finalized; UpdateFeatures decides as
Kafka's controller does (klamm/controller/features.py), with Kafka's errors and messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import API_VERSIONS

pytestmark = pytest.mark.timeout(60)

UPDATE_FEATURES = 57
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
INVALID_UPDATE_VERSION = 95
FAILED = "The update failed for all features since the following feature had an error: "


def versions(client: Any, version: int = 4) -> Any:
    return client.request(API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})


def update(client: Any, *updates: tuple[str, int, int], version: int = 1, validate_only: bool = False) -> Any:
    body: dict[str, Any] = {"timeout_ms": 10_000, "feature_updates": [
        {"feature": name, "max_version_level": level, "upgrade_type": kind, "allow_downgrade": kind != UPGRADE}
        for name, level, kind in updates]}
    if version >= 1:
        body["validate_only"] = validate_only
    return client.request(UPDATE_FEATURES, version, body)


def test_api_versions_lists_the_supported_and_finalized_features(client, broker) -> None:
    answer = versions(client)
    assert {f.name: (f.min_version, f.max_version) for f in answer.supported_features} == {
        "metadata.version": (7, 21), "group.version": (1, 1)}
    assert {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features} == {
        "metadata.version": (21, 21), "group.version": (1, 1)}
    assert answer.finalized_features_epoch == broker.call(lambda: broker.broker.controller.image.offset) >= 0
    assert versions(client, 3).finalized_features_epoch == answer.finalized_features_epoch
    assert versions(client, 2).error_code == 0


def test_an_unknown_feature_fails_the_whole_update(client, broker) -> None:
    before = broker.call(lambda: broker.broker.controller.image.offset)
    answer = update(client, ("metadata.version", 21, UPGRADE), ("sarama.unsupported.feature", 1, UPGRADE))
    assert (answer.error_code, answer.error_message, answer.results) == (
        INVALID_UPDATE_VERSION, FAILED + "Invalid update version 1 for feature sarama.unsupported.feature. "
        f"Local controller {broker.broker.node_id} does not support this feature.", ())
    assert broker.call(lambda: broker.broker.controller.image.offset) == before  # nothing written


@pytest.mark.parametrize(("feature", "level", "kind", "reason"), [
    ("metadata.version", 20, UPGRADE, "Invalid update version 20 for feature metadata.version. Can't downgrade the "
     "version of this feature without setting the upgrade type to either safe or unsafe downgrade."),
    ("metadata.version", 20, SAFE_DOWNGRADE, "Invalid metadata.version 20. Refusing to perform the requested "
     "downgrade because it might delete metadata information."),
    ("metadata.version", 20, UNSAFE_DOWNGRADE, "Invalid metadata.version 20. Unsafe metadata downgrade is not "
     "supported in this version."),
    ("metadata.version", 22, UPGRADE, "Invalid update version 22 for feature metadata.version. Local controller "
     "{node} only supports versions 7-21"),
    ("group.version", 0, SAFE_DOWNGRADE, "Invalid update version 0 for feature group.version. Local controller "
     "{node} only supports versions 1"),
    ("group.version", -1, UPGRADE, "Invalid update version -1 for feature group.version. A feature version cannot "
     "be less than 0."),
    ("group.version", 1, 9, "Invalid update version 1 for feature group.version. The controller does not support "
     "the given upgrade type."),
])
def test_updates_klamm_cannot_make_are_refused(client, broker, feature: str, level: int, kind: int,
                                                reason: str) -> None:
    answer = update(client, (feature, level, kind))
    assert (answer.error_code, answer.error_message) == (
        INVALID_UPDATE_VERSION, FAILED + reason.format(node=broker.broker.node_id))


def test_updates_to_the_levels_in_force_go_through(client, broker) -> None:
    before = broker.call(lambda: broker.broker.controller.image.offset)
    checked = update(client, ("metadata.version", 21, UPGRADE), ("group.version", 1, UPGRADE), validate_only=True)
    assert [(r.feature, r.error_code) for r in checked.results] == [("metadata.version", 0), ("group.version", 0)]
    assert broker.call(lambda: broker.broker.controller.image.offset) == before
    made = update(client, ("group.version", 1, UPGRADE), version=2)
    assert made.error_code == 0 and not hasattr(made, "results")  # v2 answers no results
    assert broker.call(lambda: broker.broker.controller.image.offset) > before
    assert update(client, ("metadata.version", 21, UPGRADE), version=0).error_code == 0
    assert {f.name: f.max_version_level for f in versions(client).finalized_features} == {
        "metadata.version": 21, "group.version": 1}
