"""A client's metadata write: the metadata log's fsync runs beside the event loop, and the answer follows it."""

from __future__ import annotations

import threading

import pytest

from klamm.storage.log import FlushJob
from tests.integration.conftest import BrokerThread, create_topic, topic_names


def test_create_and_delete_topics_fsync_the_metadata_log_off_the_loop(broker: BrokerThread,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    run = FlushJob.run

    def recorded(job: FlushJob) -> None:
        if job.directory.name == "__cluster_metadata-0":
            threads.append(threading.current_thread().name)
        run(job)

    with broker.connect() as client:
        monkeypatch.setattr(FlushJob, "run", recorded)
        create_topic(client, "fsynced-aside", partitions=4)
        assert "fsynced-aside" in topic_names(client)  # published before the answer
        response = client.request(20, 6, {"topics": [{"name": "fsynced-aside", "topic_id": None}],
                                          "timeout_ms": 10_000})
        assert [t.error_code for t in response.responses] == [0]
        assert "fsynced-aside" not in topic_names(client)
        monkeypatch.undo()
    assert len(threads) == 2 and all(name.startswith("klamm-metadata-flush") for name in threads), threads
    assert broker.broker is not None
    log = broker.broker.controller.log
    assert log.committed_end_offset == log.end_offset
