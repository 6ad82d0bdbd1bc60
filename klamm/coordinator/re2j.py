"""Regular expressions in the syntax Kafka's group coordinator compiles them in: RE2/J's (KIP-848).

A consumer-protocol member subscribes with `subscribed_topic_regex`; Kafka 4
compiles it with `com.google.re2j.Pattern.compile` (re2j 1.8), answers
INVALID_REGULAR_EXPRESSION for a pattern that does not compile, and matches the
pattern against whole topic names. RE2 is not Python's `re`: it has no
backreferences, lookaround, possessive or stacked repetition (`a**`), `\\Z` or
conditionals, and it has things Python lacks: `\\pL`, `\\p{Greek}`,
`[[:alpha:]]`, `\\Q...\\E`, `(?U)`, `\\x{263a}`, `(?<name>...)` with names
that start with a digit. Some text means another thing in each (`a{,3}` is
literal in RE2, `$` does not match before a final newline).

`compile_re2j` parses the pattern by RE2/J's rules (its parser's order of
checks, so that it refuses exactly what RE2/J refuses) and writes an equivalent
Python pattern. The translation is exact on ASCII subjects, which topic names
are (their alphabet is [a-zA-Z0-9._-]): character classes become explicit sets
of ASCII characters, and case folding is spelt out in them. Non-ASCII text in a
pattern can only match non-ASCII subjects, and is kept as it is.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

MAX_REPEAT = 1000
MAX_RUNE = 0x10FFFF
ASCII = frozenset(range(128))

# RE2/J's perl classes (ASCII, as in RE2) and POSIX classes
_DIGIT = frozenset(range(ord("0"), ord("9") + 1))
_UPPER = frozenset(range(ord("A"), ord("Z") + 1))
_LOWER = frozenset(range(ord("a"), ord("z") + 1))
_WORD = _DIGIT | _UPPER | _LOWER | {ord("_")}
_PERL = {"d": _DIGIT, "s": frozenset(map(ord, "\t\n\f\r ")), "w": _WORD}
_POSIX = {
    "alnum": _DIGIT | _UPPER | _LOWER, "alpha": _UPPER | _LOWER, "ascii": ASCII, "blank": frozenset(map(ord, "\t ")),
    "cntrl": frozenset(range(0x20)) | {0x7F}, "digit": _DIGIT, "graph": frozenset(range(0x21, 0x7F)),
    "lower": _LOWER, "print": frozenset(range(0x20, 0x7F)),
    "punct": frozenset(c for c in range(0x21, 0x7F) if not chr(c).isalnum()),
    "space": frozenset(map(ord, "\t\n\v\f\r ")), "upper": _UPPER, "word": _WORD,
    "xdigit": _DIGIT | frozenset(map(ord, "ABCDEFabcdef")),
}
# The \p{...} names RE2/J knows: "Any", the Unicode general categories of its tables, and its scripts.
_CATEGORIES = frozenset("Lu Ll Lt Lm Lo Mn Me Mc Nd Nl No Zs Zl Zp Cc Cf Co Cs Pd Ps Pe Pc Po Sm Sc Sk So Pi Pf "
                        "P S C Z L M N".split())
_SCRIPTS = frozenset("""
Common Inherited Bamum Arabic Lisu Armenian Bengali Old_South_Arabian Bopomofo Cherokee Coptic Cyrillic Deseret
Devanagari Ethiopic Georgian Gothic Greek Gujarati Gurmukhi Han Hangul Hebrew Hiragana Kannada Katakana Khmer Lao
Latin Malayalam Mongolian Myanmar Ogham Old_Italic Oriya Runic Sinhala Syriac Tamil Telugu Thaana Thai Tibetan
Canadian_Aboriginal Yi Tagalog Hanunoo Buhid Tagbanwa Braille Cypriot Limbu Linear_B Osmanya Shavian Tai_Le Ugaritic
Buginese Glagolitic Kharoshthi Syloti_Nagri New_Tai_Lue Tifinagh Old_Persian Balinese Batak Brahmi Cham
Egyptian_Hieroglyphs Javanese Kayah_Li Lepcha Mandaic Nko Old_Turkic Phags_Pa Phoenician Vai Cuneiform Unknown Carian
Tai_Tham Lycian Lydian Ol_Chiki Rejang Saurashtra Sundanese Meetei_Mayek Imperial_Aramaic Avestan Kaithi
Inscriptional_Pahlavi Inscriptional_Parthian Samaritan Tai_Viet
""".split())
# The only non-ASCII runes whose simple case folding reaches ASCII: KELVIN SIGN and LATIN SMALL LETTER LONG S.
_FOLDS_TO_ASCII = {0x212A: frozenset(map(ord, "kK")), 0x17F: frozenset(map(ord, "sS"))}


class Re2jSyntaxError(ValueError):
    """A pattern RE2/J's Pattern.compile refuses; the message is RE2/J's description."""


def compile_re2j(pattern: str) -> re.Pattern[str]:
    """The pattern as Python's `re` (for fullmatch on topic names); raises Re2jSyntaxError."""
    return re.compile(_Parser(pattern).parse(), re.ASCII)


def _unicode_class(name: str) -> frozenset[int]:
    """The ASCII members of \\p{name}."""
    if name == "Any":
        return ASCII
    if name in _CATEGORIES:
        return frozenset(c for c in ASCII if unicodedata.category(chr(c)).startswith(name))
    if name == "Latin":
        return _UPPER | _LOWER
    if name == "Common":  # every ASCII character that is not a letter
        return ASCII - _UPPER - _LOWER
    return frozenset()  # the other scripts have no ASCII characters


def _fold(members: frozenset[int] | set[int]) -> frozenset[int]:
    """Closed under ASCII case folding."""
    return frozenset(members) | {ord(chr(c).swapcase()) for c in members if chr(c).isalpha()}


def _is_alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


@dataclass
class _Flags:
    fold: bool = False  # i
    multiline: bool = False  # m: ^ and $ at lines
    dot_nl: bool = False  # s
    ungreedy: bool = False  # U


@dataclass
class _Group:
    flags: _Flags  # restored at its ')'
    alternatives: list[list[str]] = field(default_factory=lambda: [[]])


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.pos = 0
        self.flags = _Flags()
        self.stack: list[_Group] = [_Group(self.flags)]
        self.names: set[str] = set()

    def fail(self, message: str, text: str = "") -> Re2jSyntaxError:
        return Re2jSyntaxError(f"{message}: `{text}`" if text else message)

    def more(self) -> bool:
        return self.pos < len(self.s)

    def peek(self, text: str) -> bool:
        return self.s.startswith(text, self.pos)

    def atoms(self) -> list[str]:
        return self.stack[-1].alternatives[-1]

    # --------------------------------------------------------------- the top level
    def parse(self) -> str:
        last_was_repeat = False
        while self.more():
            start = self.pos
            repeat = False
            c = self.s[self.pos]
            if c == "(":
                if self.peek("(?"):
                    self.perl_flags()
                else:
                    self.pos += 1
                    self.stack.append(_Group(self.flags))
            elif c == "|":
                self.pos += 1
                self.stack[-1].alternatives.append([])
            elif c == ")":
                self.pos += 1
                self.right_paren()
            elif c == "^":
                self.pos += 1
                self.atoms().append("(?m:^)" if self.flags.multiline else r"\A")
            elif c == "$":
                self.pos += 1
                self.atoms().append("(?m:$)" if self.flags.multiline else r"\Z")
            elif c == ".":
                self.pos += 1
                self.atoms().append("(?s:.)" if self.flags.dot_nl else ".")
            elif c == "[":
                self.atoms().append(self.char_class())
            elif c in "*+?":
                self.pos += 1
                self.repeat({"*": "*", "+": "+", "?": "?"}[c], start, last_was_repeat)
                repeat = True
            elif c == "{":
                bounds = self.repeat_bounds()
                if bounds is None:  # not a repetition: a literal {
                    self.pos = start + 1
                    self.atoms().append(self.literal(ord("{")))
                else:
                    self.repeat(bounds, start, last_was_repeat)
                    repeat = True
            elif c == "\\":
                self.escape()
            else:
                self.pos += 1
                self.atoms().append(self.literal(ord(c)))
            last_was_repeat = repeat
        if len(self.stack) != 1:
            raise self.fail("missing closing )", self.s)
        return self.alternation(self.stack[0])

    @staticmethod
    def alternation(group: _Group) -> str:
        return "|".join("".join(atoms) for atoms in group.alternatives)

    def right_paren(self) -> None:
        if len(self.stack) < 2:
            raise self.fail("regexp/syntax: internal error", "stack underflow")
        group = self.stack.pop()
        self.flags = group.flags
        self.atoms().append(f"(?:{self.alternation(group)})")  # captures play no part in matching

    def perl_flags(self) -> None:
        """(?P<name>, (?<name>, or flags: (?i) (?i: (?-s) ..."""
        rest = self.s[self.pos:]
        if rest.startswith("(?P<") or rest.startswith("(?<"):
            begin = 4 if rest[2] == "P" else 3
            end = rest.find(">", begin)
            if end < 0:
                raise self.fail("invalid named capture", rest)
            name = rest[begin:end]
            if not name or not all(ch == "_" or _is_alnum(ch) for ch in name):
                raise self.fail("invalid named capture", rest[:end + 1])
            if name in self.names:
                raise self.fail("duplicate capture group name", name)
            self.names.add(name)
            self.pos += end + 1
            self.stack.append(_Group(self.flags))  # a capture; its name plays no part in matching
            return
        start = self.pos
        self.pos += 2
        flags = _Flags(**vars(self.flags))
        negated = saw_flag = False
        while self.more():
            c = self.s[self.pos]
            self.pos += 1
            if c in "imsU":
                value = not negated
                if c == "i":
                    flags.fold = value
                elif c == "m":
                    flags.multiline = value
                elif c == "s":
                    flags.dot_nl = value
                else:
                    flags.ungreedy = value
                saw_flag = True
            elif c == "-":
                if negated:
                    break
                negated, saw_flag = True, False
            elif c in ":)":
                if negated and not saw_flag:
                    break
                if c == ":":
                    self.stack.append(_Group(self.flags))  # restores the flags it opened with at its )
                self.flags = flags
                return
            else:
                break
        raise self.fail("invalid or unsupported Perl syntax", self.s[start:self.pos])

    # --------------------------------------------------------------- repetition
    def repeat_bounds(self) -> str | None:
        """{n}, {n,} or {n,m} at the position, as Python's; None if it is none of those (a literal {)."""
        match = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}").match(self.s, self.pos)
        if match is None:
            return None
        low, comma, high = match.group(1), match.group(2), match.group(3)
        if any(len(n) > 1 and n[0] == "0" for n in (low, high or "")):
            return None  # leading zeros: not a repetition
        self.pos = match.end()
        too_big = len(low) > 8 or len(high or "") > 8
        lo = int(low)
        hi = None if comma and not high else int(high) if high else lo
        if too_big or lo > MAX_REPEAT or (hi is not None and (hi > MAX_REPEAT or lo > hi)):
            raise self.fail("invalid repeat count", match.group(0))
        return f"{{{lo}}}" if not comma else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"

    def repeat(self, operator: str, start: int, last_was_repeat: bool) -> None:
        lazy = self.flags.ungreedy
        if self.peek("?"):
            self.pos += 1
            lazy = not lazy
        if last_was_repeat:
            raise self.fail("invalid nested repetition operator", self.s[start - 1:self.pos])
        atoms = self.atoms()
        if not atoms:
            raise self.fail("missing argument to repetition operator", self.s[start:self.pos])
        atoms[-1] = f"(?:{atoms[-1]}){operator}{'?' if lazy else ''}"

    # --------------------------------------------------------------- escapes
    def escape(self) -> None:
        start = self.pos
        if self.pos + 1 < len(self.s):
            c = self.s[self.pos + 1]
            simple = {"A": r"\A", "b": r"\b", "B": r"\B", "z": r"\Z"}
            if c in simple:
                self.pos += 2
                self.atoms().append(simple[c])
                return
            if c == "C":
                raise self.fail("invalid escape sequence", "\\C")
            if c == "Q":
                end = self.s.find("\\E", self.pos + 2)
                text = self.s[self.pos + 2:] if end < 0 else self.s[self.pos + 2:end]
                self.pos = len(self.s) if end < 0 else end + 2
                self.atoms().extend(self.literal(ord(ch)) for ch in text)
                return
        members = self.unicode_class() if self.peek("\\p") or self.peek("\\P") else None
        if members is None:
            members = self.perl_class()
        if members is not None:
            self.atoms().append(_class_text(members))
            return
        self.pos = start
        self.atoms().append(self.literal(self.escaped_rune()))

    def escaped_rune(self) -> int:
        """An escape standing for one rune (RE2/J's parseEscape); the position is at its backslash."""
        start = self.pos
        self.pos += 1
        if not self.more():
            raise self.fail("trailing backslash at end of expression")
        c = self.s[self.pos]
        self.pos += 1
        if not _is_alnum(c):
            return ord(c)  # escaped punctuation (and \_) stands for itself
        if c in "1234567" and not (self.more() and self.s[self.pos] in "01234567"):
            raise self.fail("invalid escape sequence", self.s[start:self.pos])  # a backreference
        if c in "01234567":
            value = int(c)
            for _ in range(2):
                if self.more() and self.s[self.pos] in "01234567":
                    value = value * 8 + int(self.s[self.pos])
                    self.pos += 1
            return value
        if c == "x":
            return self.hex_escape(start)
        simple = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
        if c in simple:
            return simple[c]
        raise self.fail("invalid escape sequence", self.s[start:self.pos])

    def hex_escape(self, start: int) -> int:
        def bad() -> Re2jSyntaxError:
            return self.fail("invalid escape sequence", self.s[start:self.pos])

        if not self.more():
            raise bad()
        if self.s[self.pos] == "{":
            self.pos += 1
            value, digits = 0, 0
            while True:
                if not self.more():
                    raise bad()
                c = self.s[self.pos]
                self.pos += 1
                if c == "}":
                    break
                if c not in "0123456789abcdefABCDEF":
                    raise bad()
                value = value * 16 + int(c, 16)
                if value > MAX_RUNE:
                    raise bad()
                digits += 1
            if not digits:
                raise bad()
            return value
        pair = self.s[self.pos:self.pos + 2]
        self.pos = min(self.pos + 2, len(self.s))
        if len(pair) < 2 or any(c not in "0123456789abcdefABCDEF" for c in pair):
            raise bad()
        return int(pair, 16)

    def unicode_class(self) -> frozenset[int]:
        """\\pN, \\p{Name}, \\P{...}, \\p{^...}: the ASCII members; the position is at the backslash."""
        start = self.pos
        negated = self.s[self.pos + 1] == "P"
        self.pos += 2
        if not self.more():
            raise self.fail("invalid character class range", self.s[start:])
        if self.s[self.pos] != "{":
            name = self.s[self.pos]
            self.pos += 1
        else:
            end = self.s.find("}", self.pos)
            if end < 0:
                raise self.fail("invalid character class range", self.s[start:])
            name = self.s[self.pos + 1:end]
            self.pos = end + 1
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        if name != "Any" and name not in _CATEGORIES and name not in _SCRIPTS:
            raise self.fail("invalid character class range", self.s[start:self.pos])
        members = _unicode_class(name)
        if self.flags.fold:
            members = _fold(members)
        return ASCII - members if negated else members

    def perl_class(self) -> frozenset[int] | None:
        """\\d \\D \\s \\S \\w \\W: the ASCII members; None (position unchanged) if it is none of those."""
        letter = self.s[self.pos + 1:self.pos + 2]
        if letter.lower() not in _PERL:
            return None
        self.pos += 2
        members = _fold(_PERL[letter.lower()]) if self.flags.fold else _PERL[letter.lower()]
        return ASCII - members if letter.isupper() else members

    # --------------------------------------------------------------- classes
    def char_class(self) -> str:
        start = self.pos
        self.pos += 1
        members: set[int] = set()
        negated = self.peek("^")
        if negated:
            self.pos += 1
        first = True  # ] first in the class is a literal
        while not self.more() or self.s[self.pos] != "]" or first:
            first = False
            before = self.pos
            if self.peek("[:"):
                named = self.posix_class()
                if named is not None:
                    members |= named
                    continue
                self.pos = before
            if self.peek("\\p") or self.peek("\\P"):
                members |= self.unicode_class()
                continue
            if self.peek("\\"):
                perl = self.perl_class()
                if perl is not None:
                    members |= perl
                    continue
            low = self.class_char(start)
            high = low
            if self.peek("-") and not self.s.startswith("-]", self.pos):
                self.pos += 1
                high = self.class_char(start)
                if high < low:
                    raise self.fail("invalid character class range", self.s[before:self.pos])
            members |= self.folded_range(low, high) if self.flags.fold else \
                set(range(low, min(high, 127) + 1))
        self.pos += 1
        return _class_text(ASCII - members if negated else frozenset(members))

    def posix_class(self) -> frozenset[int] | None:
        end = self.s.find(":]", self.pos)
        if end < 0:
            return None
        name = self.s[self.pos:end + 2]  # "[:alpha:]"
        self.pos = end + 2
        inner = name[2:-2]
        negated = inner.startswith("^")
        members = _POSIX.get(inner[1:] if negated else inner)
        if members is None:
            raise self.fail("invalid character class range", name)
        if self.flags.fold:
            members = _fold(members)
        return ASCII - members if negated else members

    def class_char(self, class_start: int) -> int:
        if not self.more():
            raise self.fail("missing closing ]", self.s[class_start:])
        if self.peek("\\"):
            return self.escaped_rune()
        c = self.s[self.pos]
        self.pos += 1
        return ord(c)

    @staticmethod
    def folded_range(low: int, high: int) -> set[int]:
        members = _fold(set(range(low, min(high, 127) + 1)))
        for rune, ascii_folds in _FOLDS_TO_ASCII.items():
            if low <= rune <= high:
                members |= ascii_folds
        return set(members)

    # --------------------------------------------------------------- literals
    def literal(self, rune: int) -> str:
        if self.flags.fold:
            folds = _FOLDS_TO_ASCII.get(rune) or (_fold({rune}) if rune < 128 else frozenset())
            if len(folds) > 1:
                return _class_text(frozenset(folds) | ({rune} if rune < 128 else set()))
        return re.escape(chr(rune))


def _class_text(members: frozenset[int] | set[int]) -> str:
    if not members:
        return "(?!)"  # a class that matches no ASCII character
    return "[" + "".join(f"\\x{c:02x}" for c in sorted(members)) + "]"
