"""Kafka error codes and the one exception that carries them inside klamm.

The enum is kio's `ErrorCode` (generated from Kafka's error table: code, name,
retriable flag). Raise `KafkaError(ErrorCode.x)` anywhere below a handler; the
broker turns it into the response's error field at one place.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """A failure that maps to a Kafka error code (and an optional message for the client).

    `record_errors` names the offending records of a produce batch, as
    (index in the batch, message) — Produce v8+ reports them per record.
    """

    def __init__(self, code: ErrorCode, message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        self.record_errors = record_errors or []

    def __repr__(self) -> str:
        return f"KafkaError({self.code.name}, {self.message!r})"

    def __reduce__(self) -> tuple:
        # Rebuilt from its fields when pickled (the cleaner process sends its failures back), not by calling
        # __init__ with Exception.args, which hold the message only.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[KafkaError], args: tuple, state: dict) -> KafkaError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
