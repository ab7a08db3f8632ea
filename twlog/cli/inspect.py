# -*- test-case-name: tests.integration.test_cli -*-
"""C{twlog offsets} and C{twlog topics}: what a broker holds, asked of the broker itself."""

from __future__ import annotations

from twlog.cli.common import parse_time, single_broker
from twlog.client.connection import BrokerConnection
from twlog.client.discovery import parse_brokers
from twlog.consumer.simple import SimpleConsumer
from twlog.protocol.codec import MetadataRequest


async def offsets(reactor, args) -> None:
    """Print the offsets OFFSETS answers, newest first, one per line."""
    host, port = single_broker(args.broker)
    consumer = SimpleConsumer(host, port, reactor=reactor)
    try:
        for offset in await consumer.offsets(args.topic, args.partition, parse_time(args.time), args.max):
            print(offset)
    finally:
        await consumer.close()


async def topics(reactor, args) -> None:
    """Print what each broker holds: its id and address, then a line per topic."""
    for host, port in parse_brokers(args.broker):
        connection = BrokerConnection(host, port, reactor=reactor)
        try:
            metadata = await connection.request(MetadataRequest())  # a broker error raises here
        finally:
            await connection.close()
        print(f"broker {metadata.broker_id} at {metadata.host}:{metadata.port} ({host}:{port})")
        for topic in metadata.topics:
            print(f"  {topic.topic}\t{topic.partitions} partitions")
        if not metadata.topics:
            print("  (no topics)")
