"""Bytes to text as Java's `new String(bytes, UTF_8)` does it: what Kafka's clients do to header keys.

Valid UTF-8 decodes the same in Java and Python. Malformed input becomes
U+FFFD in both, but not always as many of them: Java's decoder (JDK 17 and
later) steps over a malformed sequence by rules of its own. An encoded
surrogate (ED A0 80) is one U+FFFD in Java and three in Python's "replace";
a multi-byte sequence cut short by the end of the bytes is one U+FFFD. A
header key read by a Java consumer, or by Spark's Kafka source, has Java's
U+FFFDs.

`step` is that decoder's rule for one step: from a position, how many bytes
it takes and whether they are a character or one U+FFFD. The vectorised form
(klamm.spark.java_utf8_columns) applies the same rule to every position.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _three_byte_start_bad(b1: int, b2: int) -> bool:
    """A 3-byte lead and its next byte that can start no character (E0 wants A0..BF next: shortest form)."""
    return (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _continuation(b2)


def _four_byte_start_bad(b1: int, b2: int) -> bool:
    """A 4-byte lead and its next byte that can start no character: F0 wants 90..BF next, F4 80..8F."""
    return ((b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and b2 & 0xF0 != 0x80)
            or not _continuation(b2))


def step(data: bytes, position: int, end: int) -> tuple[int, bool]:
    """Java's decode step at `position` of data[:end]: (bytes taken, whether they are a character)."""
    rest = end - position
    b1 = data[position]
    if b1 < 0x80:
        return 1, True
    if 0xC2 <= b1 <= 0xDF:
        return (2, True) if rest >= 2 and _continuation(data[position + 1]) else (1, False)
    if 0xE0 <= b1 <= 0xEF:
        if rest >= 3:
            b2, b3 = data[position + 1], data[position + 2]
            if _three_byte_start_bad(b1, b2):
                return 1, False
            if not _continuation(b3):
                return 2, False
            return 3, not (b1 == 0xED and b2 >= 0xA0)  # ED A0..BF: a surrogate, one U+FFFD for the three
        if rest == 2 and not _three_byte_start_bad(b1, data[position + 1]):
            return 2, False  # cut short by the end: the rest is one U+FFFD
        return 1, False
    if 0xF0 <= b1 <= 0xF7:
        if b1 > 0xF4 or (rest >= 2 and _four_byte_start_bad(b1, data[position + 1])):
            return 1, False
        if rest >= 4:
            if not _continuation(data[position + 2]):
                return 2, False
            return (4, True) if _continuation(data[position + 3]) else (3, False)
        if rest == 3 and not _continuation(data[position + 2]):
            return 2, False
        return rest, False  # cut short by the end: the rest is one U+FFFD
    return 1, False  # a continuation byte, C0, C1, F8..FF


def decode(data: bytes) -> str:
    """`data` as text, malformed parts replaced as Java replaces them."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    parts = []
    position, end = 0, len(data)
    while position < end:
        taken, valid = step(data, position, end)
        parts.append(data[position:position + taken].decode("utf-8") if valid else REPLACEMENT)
        position += taken
    return "".join(parts)
