"""KafkaError crosses process boundaries (the cleaner process sends its failures back over a pipe): pickled and
unpickled, it is the same error, subclasses included."""

from __future__ import annotations

import pickle

from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.sasl import SaslError


def test_a_kafka_error_survives_pickling() -> None:
    error = KafkaError(ErrorCode.corrupt_message, "unknown compression codec 7", record_errors=[(3, "bad")])
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is KafkaError
    assert (again.code, again.message, again.record_errors, str(again)) == \
        (ErrorCode.corrupt_message, "unknown compression codec 7", [(3, "bad")], "unknown compression codec 7")
    bare = pickle.loads(pickle.dumps(KafkaError(ErrorCode.not_leader_or_follower)))
    assert (bare.code, bare.message, str(bare)) == (ErrorCode.not_leader_or_follower, None, "not_leader_or_follower")


def test_a_subclass_keeps_its_own_fields() -> None:
    error = pickle.loads(pickle.dumps(SaslError(ErrorCode.sasl_authentication_failed, "failed", detail="bad proof")))
    assert type(error) is SaslError
    assert (error.code, error.message, error.detail) == (ErrorCode.sasl_authentication_failed, "failed", "bad proof")
