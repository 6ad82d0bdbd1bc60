"""subscribePattern is a Java regular expression (java.util.regex), as in Spark's Kafka source.

Python's `re` reads most of it the same way, possessive quantifiers and atomic groups
included. What Java spells otherwise is rewritten: \\Q...\\E quoting, (?<name>...)
groups, \\z and \\Z, and the POSIX classes \\p{Lower}, \\p{Alnum}, ... (inside a
character class too). Anything else is handed to `re` as it is.
"""

from __future__ import annotations

import re

_POSIX = {"Lower": "a-z", "Upper": "A-Z", "ASCII": "\\x00-\\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
          "Alnum": "a-zA-Z0-9", "Punct": "!-/:-@\\[-`{-~", "Graph": "!-~", "Print": " -~", "Blank": " \\t",
          "Cntrl": "\\x00-\\x1f\\x7f", "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r"}


def to_python(pattern: str) -> str:
    """The Python `re` spelling of a Java regular expression."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                end = len(pattern) if end < 0 else end
                out.append(re.escape(pattern[i + 2:end]))
                i = end + 2
                continue
            if nxt in "pP" and pattern.startswith("{", i + 2) and "}" in pattern[i + 3:]:
                name = pattern[i + 3:pattern.index("}", i + 3)]
                ranges = _POSIX.get(name.removeprefix("Is"))
                if ranges is not None:
                    negate = nxt == "P"
                    out.append(ranges if in_class and not negate else f"[{'^' if negate else ''}{ranges}]")
                    i += len(name) + 4
                    continue
            out.append({"z": "\\Z", "Z": "(?=\\n?\\Z)"}.get(nxt, c + nxt) if not in_class else c + nxt)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and pattern[i - 1] != "[" and pattern[i - 2:i] != "[^":
            in_class = False
        elif not in_class and pattern.startswith("(?<", i) and pattern[i + 3:i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)
