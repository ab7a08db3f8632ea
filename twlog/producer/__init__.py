"""The producer: batches of messages to a topic's partitions, acknowledged or fire-and-forget."""

from twlog.producer.producer import Producer
from twlog.producer.router import Partitioner, hash_partitioner

__all__ = ["Partitioner", "Producer", "hash_partitioner"]
