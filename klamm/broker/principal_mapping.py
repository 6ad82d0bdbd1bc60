"""ssl.principal.mapping.rules: Kafka's rules turning a client certificate's name into a principal name.

A comma-separated list, tried in order; the first rule that matches the whole distinguished name
gives the name:
  * `RULE:<pattern>/<replacement>/[L|U]` - a (Java) regular expression over the name, replaced with
    $1, $2, ... back references, then lower- or upper-cased;
  * `DEFAULT` - the distinguished name itself.
No matching rule refuses the connection, as Kafka does. Patterns are Java regular expressions;
the ones these rules use (groups, classes, quantifiers, anchors) mean the same in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from klamm.config.errors import ConfigError

__all__ = ["NoMatchingRule", "PrincipalMapper"]

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules applies to the certificate's name."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), name)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's replacement syntax: $n is group n (as many digits as there are groups), \\x is x."""
    out, position = [], 0
    while position < len(replacement):
        char = replacement[position]
        if char == "\\" and position + 1 < len(replacement):
            out.append(replacement[position + 1])
            position += 2
            continue
        reference = _BACK_REFERENCE.match(replacement, position)
        if char == "$" and reference is not None:
            digits = reference.group(1)
            while len(digits) > 1 and int(digits) > (match.re.groups or 0):  # $123 with 12 groups is $12 then "3"
                digits = digits[:-1]
            if int(digits) <= (match.re.groups or 0):
                out.append(match.group(int(digits)) or "")
                position += 1 + len(digits)
                continue
        out.append(char)
        position += 1
    return "".join(out)


class PrincipalMapper:
    """The parsed rules; `name(dn)` maps one distinguished name."""

    def __init__(self, rules: str) -> None:
        self.rules = [rule for text in _split(rules) if (rule := _parse(text)) is not None]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}")


def _split(rules: str) -> list[str]:
    return [m.group(1) for m in _SPLITTER.finditer((rules or "DEFAULT").strip()) if m.group(0)]


def _parse(text: str) -> _Rule | None:
    match = _PARSER.match(text)
    if match is None or match.end() != len(text):
        raise ConfigError("ssl.principal.mapping.rules", text, f"Invalid rule: {text}")
    if match.group(1):
        return _Rule(None)
    if match.group(2) is not None:
        try:
            return _Rule(re.compile(match.group(2)), match.group(3), match.group(4))
        except re.error as exc:
            raise ConfigError("ssl.principal.mapping.rules", text, f"Invalid rule: {text}: {exc}") from exc
    if text:
        raise ConfigError("ssl.principal.mapping.rules", text, f"Invalid rule: {text}")
    return None  # empty rules are ignored
