"""pytest plugin (entry point `pytest11: klamm`): the `klamm_broker` fixture.

    def test_roundtrip(klamm_broker):
        producer = Producer({"bootstrap.servers": klamm_broker.bootstrap_servers})

Each test gets a fresh broker (it starts in well under a second) running on its
own thread, so the fixture serves sync tests and async ones alike. Broker
configs for one test: `@pytest.mark.klamm_broker(num_partitions=3)` (keyword
arguments as for `klamm.testing.run_broker`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from klamm.testing import EmbeddedBroker, run_broker


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "klamm_broker(**overrides): broker configs for the klamm_broker fixture")


@pytest.fixture
def klamm_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    """A klamm broker in this process for the test; `.bootstrap_servers` is its address."""
    marker = request.node.get_closest_marker("klamm_broker")
    overrides = dict(marker.kwargs) if marker is not None else {}
    with run_broker(**overrides) as running:
        yield running
