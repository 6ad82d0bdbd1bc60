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
checks, so that it refuses exactly what RE2/J refuses) into a small syntax tree.
Matching is exact on ASCII subjects, which topic names are (their alphabet is
[a-zA-Z0-9._-]): character classes become explicit sets of ASCII characters,
and case folding is spelt out in them. Non-ASCII text in a pattern can only
match non-ASCII subjects, and is kept as it is.

RE2 matches in linear time; Python's backtracking `re` can take exponential time
on a pattern like `(a+)+b` against a long name of a's, and it runs on the event
loop at every heartbeat. So a pattern is handed to `re` (fast, in C) only when
it cannot backtrack badly: no repetition inside a repetition, no alternation
inside a repetition, at most three repetitions of variable length. Any other is
matched by `_Matcher`, which computes, for each node of the tree and each start
position, the set of end positions once (memoised): O(nodes x n^2) at worst for
a name of n characters, whatever the nesting.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

MAX_REPEAT = 1000
_KNOWN_MAX = 100_000  # names whose match a pattern matched by _Matcher remembers
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


# The syntax tree: ("chars", frozenset of runes) | ("any",) not \n | ("anynl",) | ("assert", kind) with kind
# A (start of text), z (end of text), bol, eol (of a line), b, B (ASCII word boundary) | ("cat", nodes) |
# ("alt", nodes) | ("rep", node, min, max or None, lazy)
Node = tuple


class Re2jPattern:
    """A compiled pattern: `fullmatch(name)` says whether it matches the whole name."""

    def __init__(self, pattern: str, tree: Node) -> None:
        self.pattern = pattern
        self.tree = tree
        self.backtracks = not _safe_for_re(tree)  # matched by _Matcher rather than Python's re
        self._re = None if self.backtracks else re.compile(_python(tree), re.ASCII | re.DOTALL)
        self._known: dict[str, bool] = {}  # subject -> matched, for the memoised matcher

    def fullmatch(self, subject: str) -> bool:
        if self._re is not None:
            return self._re.fullmatch(subject) is not None
        # tens of microseconds a name: remembered, as every heartbeat asks again about the same topics
        known = self._known.get(subject)
        if known is None:
            if len(self._known) >= _KNOWN_MAX:
                self._known.clear()
            known = self._known[subject] = len(subject) in _Matcher(subject).ends(self.tree, 0)
        return known


def compile_re2j(pattern: str) -> Re2jPattern:
    """The pattern, to match topic names with; raises Re2jSyntaxError."""
    return Re2jPattern(pattern, _Parser(pattern).parse())


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
                self.atoms().append(("assert", "bol" if self.flags.multiline else "A"))
            elif c == "$":
                self.pos += 1
                self.atoms().append(("assert", "eol" if self.flags.multiline else "z"))
            elif c == ".":
                self.pos += 1
                self.atoms().append(("anynl",) if self.flags.dot_nl else ("any",))
            elif c == "[":
                self.atoms().append(self.char_class())
            elif c in "*+?":
                self.pos += 1
                self.repeat({"*": (0, None), "+": (1, None), "?": (0, 1)}[c], start, last_was_repeat)
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
    def alternation(group: _Group) -> Node:
        branches = tuple(atoms[0] if len(atoms) == 1 else ("cat", tuple(atoms)) for atoms in group.alternatives)
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def right_paren(self) -> None:
        if len(self.stack) < 2:
            raise self.fail("regexp/syntax: internal error", "stack underflow")
        group = self.stack.pop()
        self.flags = group.flags
        self.atoms().append(self.alternation(group))  # captures play no part in matching

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
    def repeat_bounds(self) -> tuple[int, int | None] | None:
        """{n}, {n,} or {n,m} at the position: (min, max or None); None if it is none of those (a literal {)."""
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
        return lo, hi

    def repeat(self, bounds: tuple[int, int | None], start: int, last_was_repeat: bool) -> None:
        lazy = self.flags.ungreedy
        if self.peek("?"):
            self.pos += 1
            lazy = not lazy
        if last_was_repeat:
            raise self.fail("invalid nested repetition operator", self.s[start - 1:self.pos])
        atoms = self.atoms()
        if not atoms:
            raise self.fail("missing argument to repetition operator", self.s[start:self.pos])
        atoms[-1] = ("rep", atoms[-1], bounds[0], bounds[1], lazy)

    # --------------------------------------------------------------- escapes
    def escape(self) -> None:
        start = self.pos
        if self.pos + 1 < len(self.s):
            c = self.s[self.pos + 1]
            if c in "AbBz":
                self.pos += 2
                self.atoms().append(("assert", c))
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
            self.atoms().append(("chars", members))
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
    def char_class(self) -> Node:
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
        return ("chars", ASCII - members if negated else frozenset(members))

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
    def literal(self, rune: int) -> Node:
        if self.flags.fold:
            folds = _FOLDS_TO_ASCII.get(rune) or (_fold({rune}) if rune < 128 else frozenset())
            return ("chars", frozenset(folds) | {rune})
        return ("chars", frozenset({rune}))


# ------------------------------------------------------------------ Python's re, when it cannot backtrack badly
def _safe_for_re(tree: Node) -> bool:
    variable = 0  # repetitions of variable length

    def walk(node: Node, in_repeat: bool) -> bool:
        nonlocal variable
        kind = node[0]
        if kind == "rep":
            if in_repeat:
                return False
            if node[3] is None or node[3] > node[2]:
                variable += 1
            return walk(node[1], True)
        if kind == "alt" and in_repeat:
            return False
        if kind in ("cat", "alt"):
            return all(walk(sub, in_repeat) for sub in node[1])
        return True

    return walk(tree, False) and variable <= 3


def _python(node: Node) -> str:
    kind = node[0]
    if kind == "chars":
        members = node[1]
        if not members:
            return "(?!)"  # matches no character
        return "[" + "".join(f"\\x{c:02x}" if c < 0x100 else f"\\U{c:08x}" for c in sorted(members)) + "]"
    if kind == "any":
        return "[^\\n]"
    if kind == "anynl":
        return "."  # compiled with DOTALL
    if kind == "assert":
        return {"A": r"\A", "z": r"\Z", "bol": "(?m:^)", "eol": "(?m:$)", "b": r"\b", "B": r"\B"}[node[1]]
    if kind == "cat":
        return "".join(_python(sub) for sub in node[1])
    if kind == "alt":
        return "(?:" + "|".join(_python(sub) for sub in node[1]) + ")"
    _, sub, low, high, lazy = node
    quantifier = "*" if (low, high) == (0, None) else "+" if (low, high) == (1, None) else \
        "?" if (low, high) == (0, 1) else f"{{{low},}}" if high is None else f"{{{low},{high}}}"
    return f"(?:{_python(sub)}){quantifier}{'?' if lazy else ''}"


# ------------------------------------------------------------------ the memoised matcher
class _Matcher:
    """End positions of each node from each start position in one subject, each computed once."""

    def __init__(self, subject: str) -> None:
        self.s = subject
        self.n = len(subject)
        self.memo: dict[tuple[int, int], frozenset[int]] = {}

    def ends(self, node: Node, i: int) -> frozenset[int]:
        key = (id(node), i)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._ends(node, i)
        return found

    def step(self, node: Node, starts: frozenset[int] | set[int]) -> frozenset[int]:
        out: set[int] = set()
        for i in starts:
            out |= self.ends(node, i)
        return frozenset(out)

    def _ends(self, node: Node, i: int) -> frozenset[int]:
        kind, s, n = node[0], self.s, self.n
        if kind == "chars":
            return frozenset({i + 1}) if i < n and ord(s[i]) in node[1] else frozenset()
        if kind == "any":
            return frozenset({i + 1}) if i < n and s[i] != "\n" else frozenset()
        if kind == "anynl":
            return frozenset({i + 1}) if i < n else frozenset()
        if kind == "assert":
            return frozenset({i}) if self._holds(node[1], i) else frozenset()
        if kind == "cat":
            current: frozenset[int] = frozenset({i})
            for sub in node[1]:
                current = self.step(sub, current)
                if not current:
                    break
            return current
        if kind == "alt":
            return frozenset().union(*(self.ends(sub, i) for sub in node[1]))
        return self._repeat(node, i)

    def _repeat(self, node: Node, i: int) -> frozenset[int]:
        _, sub, low, high, _ = node
        level: frozenset[int] = frozenset({i})
        seen: dict[frozenset[int], int] = {}
        k = 0
        while k < low:  # exactly `low` times; the levels repeat with a period once a set comes back
            if level in seen:
                period = k - seen[level]
                for _ in range((low - k) % period):
                    level = self.step(sub, level)
                break
            seen[level] = k
            level = self.step(sub, level)
            k += 1
            if not level:
                return level
        union, new = set(level), level
        k = low
        while new and (high is None or k < high):  # the union of the levels up to `high`, by what is new
            new = self.step(sub, new) - union
            union |= new
            k += 1
        return frozenset(union)

    def _holds(self, kind: str, i: int) -> bool:
        s, n = self.s, self.n
        if kind == "A":
            return i == 0
        if kind == "z":
            return i == n
        if kind == "bol":
            return i == 0 or s[i - 1] == "\n"
        if kind == "eol":
            return i == n or s[i] == "\n"
        word = (0 < i and _is_word(s[i - 1])) != (i < n and _is_word(s[i]))
        return word if kind == "b" else not word


def _is_word(c: str) -> bool:
    return c == "_" or (c.isascii() and c.isalnum())
