"""The producer: batches of messages to a topic's partitions, acknowledged or fire-and-forget."""

from twlog.producer.producer import Partition, Producer, hash_partitioner

__all__ = ["Partition", "Producer", "hash_partitioner"]
