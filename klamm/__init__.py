"""klamm: a Kafka-compatible broker on asyncio."""
