"""ApiVersions (18): what this broker serves, built from the handler registry.

An unsupported ApiVersions version is answered in v0 with UNSUPPORTED_VERSION
and the full list, so the client can retry with a version both know. From v3,
the features this node supports and those finalized in its metadata image, whose
offset is their epoch (klamm/controller/features.py).
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.features import SUPPORTED, finalized_features
from klamm.protocol.errors import ErrorCode


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    error = ErrorCode.none if request.types is not None else ErrorCode.unsupported_version
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(broker.supported_versions().items())
        ],
        **_features(broker),
    }


def _features(broker: BrokerServices) -> dict[str, Any]:
    image = broker.controller.image
    return {
        "supported_features": [{"name": name, "min_version": low, "max_version": high}
                               for name, (low, high) in SUPPORTED.items()],
        "finalized_features_epoch": image.offset,
        "finalized_features": [{"name": name, "max_version_level": level, "min_version_level": level}
                               for name, level in sorted(finalized_features(image).items())],
    }


APIS = [Api(18, 0, 4, handle)]
