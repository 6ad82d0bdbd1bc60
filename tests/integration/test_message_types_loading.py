"""load_message_types: a broker makes every version's message types before a request needs them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import klamm.protocol.api as api
from tests.conftest import BrokerProcess, free_port


def _fake_types(made: list[tuple[int, int]]) -> Callable[[int, int], SimpleNamespace]:
    def message_types(key: int, version: int) -> SimpleNamespace:
        made.append((key, version))
        return SimpleNamespace(request=("request", key, version), response=("response", key, version),
                               flexible=version >= 5)
    return message_types


def test_newest_versions_first_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[int, int]] = []
    encoders: list[Any] = []
    checks: list[Any] = []
    monkeypatch.setattr(api, "message_types", _fake_types(made))
    monkeypatch.setattr(api, "entity_encoder", encoders.append)
    monkeypatch.setattr(api, "struct_check", checks.append)
    versions = {0: (3, 5), 1: (4, 6), 20: (1, 2)}

    assert api.load_message_types(versions) == 8
    # each API's newest version, then the one below it, ...: what clients negotiate comes first
    assert made == [(0, 5), (1, 6), (20, 2), (0, 4), (1, 5), (20, 1), (0, 3), (1, 4)]
    # with each response's encoder, and each flexible request's length check: compiled off the loop too
    assert encoders == [("response", *pair) for pair in made]
    assert checks == [("request", 0, 5), ("request", 1, 6), ("request", 1, 5)]

    made.clear()
    assert api.load_message_types(versions, stopped=lambda: len(made) == 2) == 2
    assert made == [(0, 5), (1, 6)]


def test_a_version_kio_lacks_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_types([])

    def message_types(key: int, version: int) -> SimpleNamespace:
        if version == 2:
            raise ImportError("no such version")
        return fake(key, version)
    monkeypatch.setattr(api, "message_types", message_types)
    monkeypatch.setattr(api, "entity_encoder", lambda types: None)
    assert api.load_message_types({20: (1, 3)}) == 2


def test_klamm_serve_makes_every_version_it_advertises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from klamm.broker.handlers import registry

    advertised = sum(a.max_version - a.min_version + 1 for a in registry().values())
    monkeypatch.setenv("KLAMM_LOG_LEVEL", "DEBUG")
    broker = BrokerProcess(free_port(), tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"message types of (\d+) API versions made", broker.log_text())):
            assert time.monotonic() < deadline, "klamm serve did not make its message types"
            time.sleep(0.1)
    finally:
        broker.stop()
    assert int(found.group(1)) == advertised
