"""The sink's options as Spark's Kafka sink checks them, and where exactly-once keeps its batch ids."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from klamm.spark.options import OptionError
from klamm.spark.writing import sink_options

WITH_TOPIC = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
BS = {"kafka.bootstrap.servers": "b:9092"}


def test_exactly_once_keeps_batch_ids_on_the_topic_option_or_exactly_once_topic():
    assert sink_options({**BS, "topic": "out", "exactlyOnce": "true"}, WITH_TOPIC).bookkeeping_topic == "out"
    options = sink_options({**BS, "exactlyOnce": "true", "exactlyOnceTopic": "ids"}, WITH_TOPIC)
    assert (options.topic, options.bookkeeping_topic) == (None, "ids")
    with pytest.raises(OptionError, match="exactlyOnceTopic"):
        sink_options({**BS, "exactlyOnce": "true"}, WITH_TOPIC)
    assert not sink_options({**BS}, WITH_TOPIC).exactly_once  # at-least-once needs no bookkeeping
