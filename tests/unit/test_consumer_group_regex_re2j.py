"""subscribed_topic_regex in RE2/J's syntax (klamm.coordinator.re2j), as Kafka 4's coordinator compiles it.

What RE2/J (re2j 1.8, Parser.java) accepts and refuses, how the translation
matches topic names, and the heartbeat's INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

import re
import time
import uuid
import warnings

import pytest

from klamm.coordinator.consumer_group import TopicMetadata
from klamm.coordinator.consumer_heartbeat import HeartbeatRequest
from klamm.coordinator.re2j import Re2jSyntaxError, _Matcher, _python, compile_re2j
from klamm.protocol.errors import ErrorCode

from tests.unit.test_consumer_group_coordinator import Harness

# RE2/J compiles these; several are errors (or something else) in Python's re.
VALID = [
    r"orders-.*", r"\pL+", r"\p{L}\p{Nd}*", r"\PN+", r"\p{^Greek}+", r"[[:alpha:]]+", r"[[:^digit:]]",
    r"(?P<name>a)b", r"(?<name>a)b", r"(?P<1st>a)", r"a{,3}", r"^*a", r"\Qa.b\E", r"\Qa.b", r"(?i)ABC", r"(?i:a)b",
    r"(?U)a+", r"(?)a", r"(?i-s:a.)", r"[]a]", r"[^]a]", r"[a-]", r"\z", r"x{1000}", r"x{2,}", r"x{0}", r"\x{41}",
    r"\x41", r"\101", r"\0", r"\_", r"\-", r"a|", r"()", r"(|a)", r"[\d-z]", r"\p{Latin}", r"\p{Common}", r"\pN",
    r"\p{Any}", r"a{01}", r"a{1,x}", r"a*?", r"(a*)*", r"a\Q\E*",
]
# RE2/J refuses these; Python's re compiles most of them.
INVALID = [
    r"(a)\1", r"(?=a)b", r"(?!a)b", r"(?<=a)b", r"(?<!a)b", r"(?P=n)", r"(?#comment)", r"(?(1)a|b)", r"a**",
    r"a++", r"a*+", r"a{2}{3}", r"a??+", r"*a", r"(*)", r"a|*", r"(?i)*", r"\Z", r"\e", r"\C", r"\E", r"\1", r"\8",
    r"\G", r"[\b]", r"[z-a]", r"x{1001}", r"x{2,1}", r"x{123456789}", r"\pX", r"\p{Foo}", r"\p{", r"\p",
    r"[[:foo:]]", r"[[:]", r"(", r"a)", r"[a", r"[]", r"[a-", "\\", r"(?P<n>a)(?P<n>b)", r"(?<>a)", r"(?P<a-b>x)",
    r"(?i-)", r"(?-)", r"(?x)a", r"(?i", r"\x{}", r"\x{110000}", r"\xZ1", r"\x4", r"\Q\E*",
]


@pytest.mark.parametrize("pattern", VALID)
def test_what_re2j_compiles_compiles(pattern: str) -> None:
    compile_re2j(pattern)


@pytest.mark.parametrize("pattern", INVALID)
def test_what_re2j_refuses_is_refused(pattern: str) -> None:
    with pytest.raises(Re2jSyntaxError):
        compile_re2j(pattern)


def test_python_alone_would_take_some_of_them() -> None:
    python_ok = [p for p in INVALID if _python_compiles(p)]
    assert {r"(a)\1", r"(?=a)b", r"(?<=a)b", r"a*+", r"\Z", r"(?#comment)", r"a++"} <= set(python_ok)


def _python_compiles(pattern: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set"
            re.compile(pattern)
    except re.error:
        return False
    return True


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    (r"orders-.*", "orders-1", True), (r"orders-.*", "xorders-1", False),  # the whole name
    (r"\pL+", "abc", True), (r"\pL+", "ab1", False), (r"\p{Lu}\p{Ll}+", "Orders", True),
    (r"[[:alpha:]]+-[[:digit:]]+", "orders-12", True), (r"[[:punct:]]+", "._-", True), (r"\pP+", "._-", True),
    (r"\p{Pd}", "-", True), (r"\p{Pd}", ".", False), (r"\p{Latin}+", "abZ", True), (r"\p{Greek}", "a", False),
    (r"\p{^Greek}+", "a-b", True), (r"\P{L}+", "._-1", True),
    (r"a{,3}", "a{,3}", True), (r"a{,3}", "aaa", False),  # RE2's {,3} is literal text
    (r"(?i)ORDERS", "orders", True), (r"(?i:o)RDERS", "oRDERS", True), (r"(?i:o)RDERS", "orders", False),
    (r"(?i)[^a]", "A", False), (r"(?i)\p{Lu}", "a", True), (r"(?i)[\x{212A}]", "k", True), (r"[\x{212A}]", "k", False),
    (r"\Qa.b\E", "a.b", True), (r"\Qa.b\E", "axb", False), (r"\101-\x42", "A-B", True),
    (r"t.*", "t\n", False), (r"(?s)t.*", "t\n", True), (r"t$", "t\n", False), (r"[^a]", "\n", True),
    (r"\w+", "a_1", True), (r"\W", "-", True), (r"\d+", "123", True), (r"\s", " ", True),
    (r"x{2,}", "xxx", True), (r"(?P<1st>a)|b", "b", True), (r"^*a", "a", True),
])
def test_a_valid_pattern_matches_the_topics_re2j_matches(pattern: str, name: str, matches: bool) -> None:
    assert bool(compile_re2j(pattern).fullmatch(name)) is matches


# ------------------------------------------------------------------ the heartbeat
TOPICS = {name: TopicMetadata(uuid.UUID(int=i + 1), name, 1)
          for i, name in enumerate(["orders-1", "orders-2", "Payments", "logs.app"])}


def beat(regex: str) -> dict:
    h = Harness()
    h.coordinator.consumer.topics = lambda: TOPICS
    req = HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=30_000, topic_regex=regex, owned={}, client_id="c",
                           client_host="/127.0.0.1")
    return h.apply(h.coordinator.consumer.heartbeat(req))


def subscribed(response: dict) -> set[str]:
    by_id = {t.topic_id: name for name, t in TOPICS.items()}
    return {by_id[tp["topic_id"]] for tp in response["assignment"]["topic_partitions"]}


def test_a_pattern_re2j_refuses_is_invalid_regular_expression() -> None:
    response = beat(r"(?=orders)\w+-\d")  # Python would take the lookahead
    assert response["error_code"] == ErrorCode.invalid_regular_expression == 128
    assert "is not a valid regular expression" in response["error_message"]


def test_a_pattern_only_re2j_compiles_subscribes_to_the_topics_it_matches() -> None:
    assert subscribed(beat(r"\p{Ll}+-\pN")) == {"orders-1", "orders-2"}
    assert subscribed(beat(r"[[:upper:]][[:lower:]]+|\Qlogs.app\E")) == {"Payments", "logs.app"}


# ------------------------------------------------------------------ DESCRIBE on the topics a regex matches
def test_each_member_gets_only_the_matches_its_principal_may_describe() -> None:
    h = Harness()
    h.coordinator.consumer.topics = lambda: TOPICS

    def beat_as(member_id: str, epoch: int, hidden: set[str], owned: dict | None = None) -> dict:
        req = HeartbeatRequest("g", member_id, epoch, rebalance_timeout_ms=30_000, topic_regex=r"orders-\d",
                               owned={} if owned is None else owned, client_id="c", client_host="/127.0.0.1",
                               denied_topics=lambda names: {n for n in names if n in hidden})
        return h.apply(h.coordinator.consumer.heartbeat(req))

    alice = beat_as("alice", 0, hidden={"orders-2"})
    assert subscribed(alice) == {"orders-1"}
    group = h.coordinator.consumer.groups["g"]
    assert set(group.subscription_metadata) == {"orders-1"}
    bob = beat_as("bob", 0, hidden=set())
    assert set(h.coordinator.consumer.groups["g"].subscription_metadata) == {"orders-1", "orders-2"}
    # alice's next heartbeat keeps her principal's view: orders-2 stays out of what she subscribes to
    again = beat_as("alice", alice["member_epoch"], hidden={"orders-2"},
                    owned={TOPICS["orders-1"].topic_id: frozenset({0})})
    assert again["error_code"] == ErrorCode.none
    assert bob["error_code"] == ErrorCode.none
    targets = h.coordinator.consumer.groups["g"].targets
    assert TOPICS["orders-2"].topic_id not in targets["alice"]
    assert set(targets["alice"]) | set(targets["bob"]) == {TOPICS["orders-1"].topic_id, TOPICS["orders-2"].topic_id}
    # allowed now: at her next heartbeat the group subscribes her to it
    beat_as("alice", again["member_epoch"], hidden=set(), owned={})
    assert set(h.coordinator.consumer.groups["g"].subscription_metadata) == {"orders-1", "orders-2"}


def test_without_an_authorizer_nothing_is_hidden() -> None:
    assert subscribed(beat(r"orders-\d")) == {"orders-1", "orders-2"}


# ------------------------------------------------------------------ linear time, and both matchers agree
@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(a|a)*b", r"(a*)*b", r"(\w+\w+)+b", r".*a.*a.*a.*a.*a.*b",
                                     r"(a?){100}a{100}b", r"((a{1,5}){1,5}){1,5}b"])
def test_a_pattern_that_backtracks_in_python_matches_in_polynomial_time(pattern: str) -> None:
    compiled = compile_re2j(pattern)
    assert compiled.backtracks  # not handed to Python's re
    started = time.perf_counter()
    assert not compiled.fullmatch("a" * 200 + "c")
    assert compiled.fullmatch("a" * 120 + "b")
    assert time.perf_counter() - started < 5


SUBJECTS = ["", "a", "b", "ab", "aab", "abab", "ababab", "orders-1", "Orders-12", "a.b", "a-b_c", "aaaa", "ba",
            "t\n", "foo bar", "x" * 7]
PATTERNS = [r"(ab){2,3}", r"(a?){3}", r"(aa|a){3}", r"x{0}", r"x{2,}y?", r"\bfoo\b.*", r"^a$", r"(?m)^a$",
            r"(?s).+", r".+", r"[a-c]+|\d", r"(a|b)*b", r"(?i)(A|ORDERS)-\d+", r"(?:a*)*", r"((ab)*|a)*b",
            r"\B.", r"(x{2}){1,3}", r"a{0,2}b{1,}", r"\pL+(-\pN+)?", r"(\w+\.)*\w+"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_memoised_matcher_agrees_with_python_re(pattern: str) -> None:
    compiled = compile_re2j(pattern)
    python = re.compile(_python(compiled.tree), re.ASCII | re.DOTALL)
    for subject in SUBJECTS:
        by_matcher = len(subject) in _Matcher(subject).ends(compiled.tree, 0)
        assert by_matcher == (python.fullmatch(subject) is not None) == compiled.fullmatch(subject), subject
