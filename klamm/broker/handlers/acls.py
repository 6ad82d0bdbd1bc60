"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): no authorizer is configured.

klamm has no authorizer, and Kafka without one answers every ACL request with
SECURITY_DISABLED ("No Authorizer is configured") — per creation and per
filter for the batched APIs. Admin tools then report that security is off,
rather than failing on an unsupported API.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.protocol.errors import ErrorCode

NO_AUTHORIZER = "No Authorizer is configured."


async def describe_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "resources": []}


async def create_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    return {"results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
                        for _ in request.body.creations]}


async def delete_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    return {"filter_results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER,
                                "matching_acls": []} for _ in request.body.filters]}


APIS = [Api(29, 0, 3, describe_acls), Api(30, 0, 3, create_acls), Api(31, 0, 3, delete_acls)]
