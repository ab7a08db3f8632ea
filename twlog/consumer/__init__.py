"""Consumers: the simple consumer (fetch by offset, stream one partition) and group consumers (paper 3.2)."""

from twlog.consumer.admin import GroupDescription, GroupMember, PartitionStatus, describe_groups, reset_offsets
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.consumer.simple import EARLIEST, LATEST, FetchedMessages, MessageStream, SimpleConsumer
from twlog.consumer.stream import GroupMessage, GroupStream

__all__ = [
    "EARLIEST",
    "LATEST",
    "FetchedMessages",
    "GroupConsumer",
    "GroupDescription",
    "GroupMember",
    "GroupMessage",
    "GroupState",
    "GroupStream",
    "MessageStream",
    "PartitionStatus",
    "SimpleConsumer",
    "describe_groups",
    "reset_offsets",
]
