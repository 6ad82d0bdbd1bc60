"""Header keys from bytes to Arrow strings as a Java consumer reads them, for a whole batch at once.

Kafka's clients make a header key with `new String(bytes, UTF_8)`, and Spark's
Kafka source passes that string on: malformed UTF-8 becomes U+FFFD by Java's
rules (klamm.protocol.java_utf8, whose `step` is the rule used here). Keys
that are valid UTF-8 are taken as they are. Otherwise the rule is applied with
numpy at every byte from 0x80 up at once, and Arrow copies the keys out with
their replaced bytes cut and U+FFFDs put in their place.

Bytes below 0x80 are characters of their own. Where Java's decoder takes its
steps among the others follows from one property of its rule: a step takes more
than one byte only by taking continuation bytes (10xxxxxx). So every byte that
is not a continuation byte starts a step, and so does the first byte of every
key. After such an anchor, its step takes `taken` bytes, and each continuation
byte left before the next anchor is a step of its own (one U+FFFD).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_REPLACEMENT = pa.scalar("\ufffd".encode(), pa.binary())


def java_strings(keys: pa.BinaryArray) -> pa.StringArray:
    """`keys` (no nulls) as Java's String(bytes, UTF_8) of each, in UTF-8."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    data, offsets = _bytes(keys)
    at, taken, key = _replaced(data, offsets)
    # a key is the pieces of it between the bytes replaced, joined by U+FFFDs: the pieces of all keys in order
    # (both sorts merge two sorted runs; equal values are one key's end and the next one's start)
    starts = np.sort(np.concatenate([offsets[:-1], at + taken]), kind="stable")
    ends = np.sort(np.concatenate([at, offsets[1:]]), kind="stable")
    bounds = np.empty(2 * len(starts) + 1, np.int32)  # the pieces and the gaps between them, to take the pieces
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = ends
    buffer = keys.buffers()[2].slice(int(np.frombuffer(keys.buffers()[1], np.int32, 1, keys.offset * 4)[0]))
    with_gaps = pa.Array.from_buffers(pa.binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), buffer])
    pieces = with_gaps.take(pa.array(np.arange(1, len(bounds) - 1, 2, dtype=np.int32)))
    key_pieces = np.zeros(len(keys) + 1, np.int32)
    np.cumsum(1 + np.bincount(key, minlength=len(keys)), out=key_pieces[1:])
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(key_pieces), pieces), _REPLACEMENT)
    return pa.Array.from_buffers(pa.string(), len(keys), joined.buffers()[:3])  # UTF-8 now: not checked again


def _bytes(keys: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of `keys` (not copied), and where each key starts in them (and the last ends)."""
    offsets = np.frombuffer(keys.buffers()[1], np.int32, len(keys) + 1, keys.offset * 4).astype(np.int64)
    first, size = int(offsets[0]), int(offsets[-1] - offsets[0])
    return np.frombuffer(keys.buffers()[2], np.uint8, size, first), offsets - first


def _replaced(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps of Java's decoder in the keys data[offsets[i]:offsets[i + 1]] that put a U+FFFD: where they start,
    how many bytes each takes and which key each is in."""
    at = np.flatnonzero(data >= 0x80)
    key = np.searchsorted(offsets, at, "right") - 1
    taken, valid = _step(data, at, offsets[key + 1] - at)
    anchor = ((data[at] & 0xC0) != 0x80) | (at == offsets[key])
    index = np.arange(len(at))
    last = np.maximum.accumulate(np.where(anchor, index, -1))
    # a continuation byte after a byte below 0x80 (an anchor, one byte) starts a step; after an anchor here, it
    # starts one unless that anchor's step takes it
    after_ascii = last < 0
    last[after_ascii] = 0
    after_ascii |= at - at[last] != index - last
    starts = anchor | after_ascii | (at >= at[last] + taken[last])
    replaced = starts & ~valid
    return at[replaced], taken[replaced], key[replaced]


def _step(data: np.ndarray, at: np.ndarray, rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """klamm.protocol.java_utf8.step at every position `at` with `rest` bytes left in its key."""
    last = len(data) - 1  # a byte past the end of a key is read but not used (`rest`): past the data, any will do
    b1, b2, b3, b4 = (data[np.minimum(at + k, last)].astype(np.int16) for k in range(4))
    cont2, cont3, cont4 = ((b & 0xC0) == 0x80 for b in (b2, b3, b4))
    taken = np.ones(len(at), np.int64)
    valid = b1 < 0x80

    two = (b1 >= 0xC2) & (b1 <= 0xDF) & (rest >= 2) & cont2
    taken[two] = 2
    valid |= two

    three = (b1 >= 0xE0) & (b1 <= 0xEF)
    three_ok = three & ~(((b1 == 0xE0) & ((b2 & 0xE0) == 0x80)) | ~cont2)
    full = three_ok & (rest >= 3)
    taken[full] = np.where(cont3[full], 3, 2)
    valid |= full & cont3 & ~((b1 == 0xED) & (b2 >= 0xA0))  # ED A0..BF: a surrogate
    taken[three_ok & (rest == 2)] = 2  # cut short by the end: one U+FFFD

    four = (b1 >= 0xF0) & (b1 <= 0xF4)
    four_bad_start = (((b1 == 0xF0) & ((b2 < 0x90) | (b2 > 0xBF))) | ((b1 == 0xF4) & ((b2 & 0xF0) != 0x80))
                      | ~cont2)
    four_ok = four & ((rest < 2) | ~four_bad_start)
    full = four_ok & (rest >= 4)
    taken[full] = np.where(cont3[full], np.where(cont4[full], 4, 3), 2)
    valid |= full & cont3 & cont4
    short = four_ok & (rest < 4)
    taken[short] = np.where((rest[short] == 3) & ~cont3[short], 2, rest[short])  # cut short: one U+FFFD
    return taken, valid
