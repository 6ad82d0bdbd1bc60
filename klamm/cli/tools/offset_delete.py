"""DeleteConsumerGroupOffsets (OffsetDelete, API 47) through librdkafka's C API.

confluent-kafka's Python AdminClient does not wrap rd_kafka_DeleteConsumerGroupOffsets,
so this module calls it with ctypes on the librdkafka that confluent-kafka bundles
(or the system one): a short-lived admin handle, one request, one result event.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from pathlib import Path

import confluent_kafka

_RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512

TopicPartitionKey = tuple[str, int]


class _TopicPartition(ctypes.Structure):
    _fields_ = [("topic", ctypes.c_char_p), ("partition", ctypes.c_int32), ("offset", ctypes.c_int64),
                ("metadata", ctypes.c_void_p), ("metadata_size", ctypes.c_size_t), ("opaque", ctypes.c_void_p),
                ("err", ctypes.c_int), ("_private", ctypes.c_void_p)]


class _TopicPartitionList(ctypes.Structure):
    _fields_ = [("cnt", ctypes.c_int), ("size", ctypes.c_int), ("elems", ctypes.POINTER(_TopicPartition))]


def _library() -> ctypes.CDLL:
    """The librdkafka confluent_kafka.cimpl is linked against (same process, same symbols)."""
    package = Path(confluent_kafka.__file__).parent
    candidates = sorted(glob.glob(str(package.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    candidates += sorted(glob.glob(str(package / ".dylibs" / "librdkafka*.dylib")))
    system = ctypes.util.find_library("rdkafka")
    if system:
        candidates.append(system)
    for path in candidates:
        if os.path.exists(path) or path == system:
            return _declare(ctypes.CDLL(path))
    raise OSError("librdkafka not found (needed for --delete-offsets)")


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, cp, sz, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int
    signatures = {
        "rd_kafka_conf_new": ([], vp),
        "rd_kafka_conf_set": ([vp, cp, cp, cp, sz], i),
        "rd_kafka_new": ([i, vp, cp, sz], vp),
        "rd_kafka_destroy": ([vp], None),
        "rd_kafka_queue_new": ([vp], vp),
        "rd_kafka_queue_destroy": ([vp], None),
        "rd_kafka_queue_poll": ([vp, i], vp),
        "rd_kafka_topic_partition_list_new": ([i], ctypes.POINTER(_TopicPartitionList)),
        "rd_kafka_topic_partition_list_add": ([ctypes.POINTER(_TopicPartitionList), cp, ctypes.c_int32], vp),
        "rd_kafka_topic_partition_list_destroy": ([ctypes.POINTER(_TopicPartitionList)], None),
        "rd_kafka_DeleteConsumerGroupOffsets_new": ([cp, ctypes.POINTER(_TopicPartitionList)], vp),
        "rd_kafka_DeleteConsumerGroupOffsets_destroy": ([vp], None),
        "rd_kafka_DeleteConsumerGroupOffsets": ([vp, ctypes.POINTER(vp), sz, vp, vp], None),
        "rd_kafka_event_error": ([vp], i),
        "rd_kafka_event_error_string": ([vp], cp),
        "rd_kafka_event_destroy": ([vp], None),
        "rd_kafka_event_DeleteConsumerGroupOffsets_result": ([vp], vp),
        "rd_kafka_DeleteConsumerGroupOffsets_result_groups": ([vp, ctypes.POINTER(sz)], ctypes.POINTER(vp)),
        "rd_kafka_group_result_error": ([vp], vp),
        "rd_kafka_group_result_partitions": ([vp], ctypes.POINTER(_TopicPartitionList)),
        "rd_kafka_error_code": ([vp], i),
        "rd_kafka_err2name": ([i], cp),
        "rd_kafka_err2str": ([i], cp),
    }
    for name, (argtypes, restype) in signatures.items():
        func = getattr(lib, name)
        func.argtypes = argtypes
        func.restype = restype
    return lib


def delete_group_offsets(config: dict[str, str], group: str, partitions: list[TopicPartitionKey],
                         timeout_s: float) -> tuple[str | None, dict[TopicPartitionKey, str | None]]:
    """(first error name or None, {partition: error message or None}) of one OffsetDelete."""
    lib = _library()
    handle = _new_handle(lib, config)
    queue = lib.rd_kafka_queue_new(handle)
    request_list = lib.rd_kafka_topic_partition_list_new(len(partitions))
    request = None
    try:
        for topic, partition in partitions:
            lib.rd_kafka_topic_partition_list_add(request_list, topic.encode(), partition)
        request = lib.rd_kafka_DeleteConsumerGroupOffsets_new(group.encode(), request_list)
        requests = (ctypes.c_void_p * 1)(request)
        lib.rd_kafka_DeleteConsumerGroupOffsets(handle, requests, 1, None, queue)
        event = lib.rd_kafka_queue_poll(queue, int(timeout_s * 1000) + 5000)
        if not event:
            return "REQUEST_TIMED_OUT", {tp: "timed out" for tp in partitions}
        try:
            return _read_result(lib, event, partitions)
        finally:
            lib.rd_kafka_event_destroy(event)
    finally:
        if request:
            lib.rd_kafka_DeleteConsumerGroupOffsets_destroy(request)
        lib.rd_kafka_topic_partition_list_destroy(request_list)
        lib.rd_kafka_queue_destroy(queue)
        lib.rd_kafka_destroy(handle)


def _new_handle(lib: ctypes.CDLL, config: dict[str, str]) -> int:
    conf = lib.rd_kafka_conf_new()
    errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
    for key, value in config.items():
        if lib.rd_kafka_conf_set(conf, key.encode(), str(value).encode(), errstr, _ERRSTR_SIZE) != 0:
            raise ValueError(errstr.value.decode())
    handle = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)  # takes conf on success
    if not handle:
        raise ValueError(errstr.value.decode())
    return handle


def _read_result(lib: ctypes.CDLL, event: int, partitions: list[TopicPartitionKey]):
    code = lib.rd_kafka_event_error(event)
    if code != 0:
        message = (lib.rd_kafka_event_error_string(event) or b"").decode()
        return _name(lib, code), {tp: message for tp in partitions}
    result = lib.rd_kafka_event_DeleteConsumerGroupOffsets_result(event)
    count = ctypes.c_size_t()
    groups = lib.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result, ctypes.byref(count))
    group_result = groups[0]
    group_error = lib.rd_kafka_group_result_error(group_result)
    if group_error:
        code = lib.rd_kafka_error_code(group_error)
        return _name(lib, code), {tp: _message(lib, code) for tp in partitions}
    found = lib.rd_kafka_group_result_partitions(group_result)
    errors: dict[TopicPartitionKey, str | None] = {}
    first = None
    for n in range(found.contents.cnt if found else 0):
        element = found.contents.elems[n]
        key = (element.topic.decode(), element.partition)
        errors[key] = _message(lib, element.err) if element.err else None
        if element.err and first is None:
            first = _name(lib, element.err)
    return first, errors


def _name(lib: ctypes.CDLL, code: int) -> str:
    return lib.rd_kafka_err2name(code).decode()


def _message(lib: ctypes.CDLL, code: int) -> str:
    text = lib.rd_kafka_err2str(code).decode()
    return text.removeprefix("Broker: ")
