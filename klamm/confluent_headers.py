"""Headers of confluent-kafka messages, keys decoded as a Java consumer decodes them, whatever their bytes.

confluent-kafka's `Message.headers()` decodes each key as strict UTF-8. On a key
that is not, it frees the message's headers and returns a broken list with an
exception set: CPython turns that into a SystemError where it checks the result
of a C call, but a call site its interpreter has specialized hands the broken
list back as a result (reading it crashes the process). Java's clients, and so
Spark's Kafka source and kafka-console-consumer, make such a key with
`new String(bytes, UTF_8)`.

`raw_headers` takes a message's headers from librdkafka itself:
`rd_kafka_header_get_all` on the `rd_kafka_headers_t` the Message object holds
until `headers()` is first called. The pointer is read from the object's C
struct, whose layout is checked on every call (the topic field must hold the
message's topic, the headers field beside it nothing), so another layout is a
clear error, never a wrong read. `checked_headers` calls `headers()` where
CPython checks its result.
"""

from __future__ import annotations

import ctypes
import functools
import operator
from typing import Any

from confluent_kafka import Message, cimpl

from klamm.protocol.java_utf8 import decode

Headers = list[tuple[str, bytes | None]]

# confluent_kafka.h's Message: PyObject_HEAD, then topic, value, key, headers, c_headers (pointers)
_POINTER = ctypes.sizeof(ctypes.c_void_p)
_TOPIC = object.__basicsize__
_HEADERS, _C_HEADERS = _TOPIC + 3 * _POINTER, _TOPIC + 4 * _POINTER
_NO_MORE = -156  # RD_KAFKA_RESP_ERR__NOENT: past the last header

checked_headers = operator.methodcaller("headers")  # a C-level call: CPython checks what it returns


class UnreadableHeaders(RuntimeError):
    """This message's raw headers cannot be read (another confluent-kafka layout, or headers() called)."""


def undecodable(error: BaseException) -> bool:
    """Whether `error`, raised by headers(), stands for a header key that is not UTF-8 (a SystemError caused
    by a UnicodeDecodeError, through more SystemErrors when a message has several such keys)."""
    seen: BaseException | None = error
    while isinstance(seen, SystemError):
        seen = seen.__cause__
    return isinstance(seen, UnicodeDecodeError)


@functools.cache
def _header_get_all() -> Any:
    if Message.__basicsize__ < _C_HEADERS + _POINTER:
        raise UnreadableHeaders(f"confluent_kafka.Message is {Message.__basicsize__} bytes: not the layout klamm "
                                "reads raw headers from")
    function = ctypes.CDLL(cimpl.__file__).rd_kafka_header_get_all  # resolved in cimpl's own librdkafka
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                         ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    function.restype = ctypes.c_int
    return function


def raw_headers(message: Any) -> Headers:
    """A confluent_kafka.Message's headers, in order, on which headers() was never called; a key is Java's
    String(bytes, UTF_8) of its bytes up to any NUL (librdkafka hands keys over as C strings)."""
    get_all = _header_get_all()
    address = id(message)
    if type(message) is not Message or ctypes.c_void_p.from_address(address + _TOPIC).value != id(message.topic()):
        raise UnreadableHeaders("confluent_kafka.Message's fields are not where klamm reads raw headers")
    if ctypes.c_void_p.from_address(address + _HEADERS).value:
        raise UnreadableHeaders("headers() was called on this message: its raw headers are gone")
    headers = ctypes.c_void_p.from_address(address + _C_HEADERS).value
    pairs: Headers = []
    if not headers:
        return pairs
    name, value, size = ctypes.c_char_p(), ctypes.c_void_p(), ctypes.c_size_t()
    while True:
        code = get_all(headers, len(pairs), ctypes.byref(name), ctypes.byref(value), ctypes.byref(size))
        if code == _NO_MORE:
            return pairs
        if code != 0:
            raise UnreadableHeaders(f"rd_kafka_header_get_all: error {code}")
        pairs.append((decode(name.value or b""), None if value.value is None else ctypes.string_at(value.value,
                                                                                                     size.value)))


def headers_of(message: Any) -> Headers:
    """Any message's headers: raw from a confluent_kafka.Message, else (or where this confluent-kafka keeps them
    elsewhere) what its headers() gives."""
    if type(message) is Message:
        try:
            return raw_headers(message)
        except UnreadableHeaders:
            pass
    return list(checked_headers(message) or ())
