"""ApiVersions (18): what this broker serves, built from the handler registry.

An unsupported ApiVersions version is answered in v0 with UNSUPPORTED_VERSION
and the full list, so the client can retry with a version both know.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.protocol.errors import ErrorCode


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    error = ErrorCode.none if request.types is not None else ErrorCode.unsupported_version
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(broker.supported_versions().items())
        ],
        "finalized_features_epoch": -1,
    }


APIS = [Api(18, 0, 4, handle)]
