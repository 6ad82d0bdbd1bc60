"""examples/clickstream (make pipeline), small: the job's per-minute page counts equal the generator's."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(300)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream" / "pipeline.py"


def load_example():
    spec = importlib.util.spec_from_file_location("clickstream_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clickstream_counts_are_exact(spark, spark_broker, topic_name, tmp_path):
    pipeline = load_example()
    bs = spark_broker.bootstrap_servers
    clicks, counts = topic_name, topic_name + "-counts"
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([NewTopic(clicks, 3, 1), NewTopic(counts, 1, 1)]).values():
        future.result(30)
    expected = pipeline.generate(bs, clicks, events=3000, minutes=4)
    pipeline.run_job(spark, bs, clicks, counts, tmp_path / "out", tmp_path / "checkpoint")
    got = pipeline.check(spark, bs, counts, tmp_path / "out", expected)
    assert sum(got.values()) == 3000 and len({page for _, page in got}) == len(pipeline.PAGES)
