"""Consumers: the simple consumer (fetch by offset, stream one partition) and, later, group consumers."""

from twlog.consumer.simple import EARLIEST, LATEST, FetchedMessages, MessageStream, SimpleConsumer

__all__ = ["EARLIEST", "LATEST", "FetchedMessages", "MessageStream", "SimpleConsumer"]
