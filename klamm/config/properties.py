"""Reader for Java `.properties` files (the format of Kafka's server.properties).

Follows java.util.Properties.load: `#`/`!` comment lines, `key=value`,
`key:value` and `key value` separators, logical lines continued by an odd
number of trailing backslashes, and the escapes \\t \\n \\r \\f \\uXXXX (any other
escaped character stands for itself). Later duplicates win, as in Java.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

__all__ = ["parse_properties", "load_properties"]

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse .properties text into an ordered key -> value dict."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        result[_unescape(key)] = _unescape(value)
    return result


def load_properties(path: Path) -> dict[str, str]:
    """Read a .properties file. Java reads these as ISO-8859-1; UTF-8 is accepted too."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_properties(text)


def _natural_lines(text: str) -> list[str]:
    # \r\n, \r and \n all terminate a line; str.splitlines would also split on
    # \f and other characters that Java treats as ordinary text.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _ends_with_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _logical_lines(text: str) -> Iterator[str]:
    lines = _natural_lines(text)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        # Comments and blank lines are skipped whole; a trailing backslash on a
        # comment line does not continue it.
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        yield line


def _split_key_value(line: str) -> tuple[str, str]:
    """Split a logical line (escapes still in place) into raw key and raw value."""
    pos = 0
    escaped = False
    while pos < len(line):
        ch = line[pos]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in _SEPARATORS or ch in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    # At most one '=' or ':' separates key and value, with whitespace around it.
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(raw: str) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(raw):
        ch = raw[pos]
        pos += 1
        if ch != "\\":
            out.append(ch)
            continue
        if pos >= len(raw):
            break  # a lone trailing backslash is dropped, as in Java
        ch = raw[pos]
        pos += 1
        if ch == "u":
            digits = raw[pos : pos + 4]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError("Malformed \\uxxxx encoding.")
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    return "".join(out)
