"""subscribePattern in Java's regex dialect, read by Python's re."""

from __future__ import annotations

import re

import pytest

from klamm.spark.java_regex import to_python


@pytest.mark.parametrize("java, matching, other", [
    ("events-.*", "events-clicks", "other"),
    ("\\Qa.b\\E-[0-9]+", "a.b-12", "axb-12"),  # \Q...\E quotes
    ("(?<kind>orders|payments)-\\d+", "orders-7", "refunds-7"),  # a named group
    ("\\p{Lower}+-\\p{Digit}+", "abc-42", "ABC-42"),  # POSIX classes
    ("[\\p{Upper}_]+", "AB_C", "ab"),  # inside a character class
    ("\\P{Digit}+", "abc", "a1"),
    ("logs\\z", "logs", "logsx"),
    ("(?<=x)y|t.*", "topic", "y"),  # a lookbehind stays one
    ("a++b", "aab", "aa"),  # possessive: Python 3.11 reads it as Java does
])
def test_java_patterns_match_as_in_java(java, matching, other):
    python = to_python(java)
    assert re.fullmatch(python, matching) and not re.fullmatch(python, other)
