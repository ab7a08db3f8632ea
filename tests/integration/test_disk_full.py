"""Issue 21, findings 4 to 6, end to end: a broker whose log directory is a small tmpfs, written until the
disk is full (or its inodes are all taken), over real TCP.

  - the producer gets StorageFailed (13), not RequestTimedOut, and it is true: every set acknowledged is
    in the log, and no set refused is, not even after the broker restarts;
  - once space is freed the partition takes writes again after --storage-retry-s, without a restart;
  - a segment roll that finds no inode left fails only its part of an ACK_PRODUCE with StorageFailed, in
    one log line without a traceback; the request's other parts are stored and say so.

The tmpfs is mounted in a temporary directory and unmounted after; without the right to mount one (not
root, no CAP_SYS_ADMIN) the test is skipped, saying so.
"""

from __future__ import annotations

import os
import subprocess

from twisted.internet import reactor
from twisted.internet.task import Clock, deferLater
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.broker import raw_connect, start_broker
from twlog.config import LogConfig
from twlog.errors import StorageFailed
from twlog.producer import Producer
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, ProduceRequest
from twlog.storage.log import Log
from twlog.storage.message import encode_message_set, iter_messages

TOPIC = "full"
#: The tmpfs: 1 MiB, of which FILLER bytes are taken by a file the test deletes to free space.
TMPFS_BYTES = 1024 * 1024
FILLER_BYTES = 400 * 1024
#: Each batch: 20 messages of 200 bytes (4,180 bytes on disk), below the 64 KiB write buffer.
BATCH = 20
MAX_BATCHES = 400  # bounds the loop: 1 MiB holds about 250 batches at most


def mount_tmpfs(testcase, inodes: int = 64) -> str:
    """A fresh 1 MiB tmpfs, unmounted when the test ends; SkipTest when mounting is not allowed here."""
    directory = os.path.abspath(testcase.mktemp())
    os.makedirs(directory)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES},nr_inodes={inodes}", "tmpfs",
                             directory],
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise SkipTest(f"cannot mount a tmpfs to fill ({result.stderr.strip() or result.returncode}): needs root")
    testcase.addCleanup(subprocess.run, ["umount", "-l", directory], capture_output=True, timeout=30)
    return directory


def stored_payloads(directory: str) -> list[bytes]:
    """Every payload in the partition log at C{directory}, as a restarted broker's recovery finds it."""
    log = Log.open(directory, LogConfig(os.path.dirname(directory), segment_bytes=64 * 1024), Clock(),
                   lambda f, *a: f(*a))
    try:
        payloads = []
        for segment in log.segments:
            data = segment.pread(0, segment.size)
            payloads += [m.payload for m in iter_messages(data, segment.base_offset)]
        return payloads
    finally:
        log.close()


class DiskFullTests(TestCase):
    timeout = 120

    async def test_full_disk_is_true_and_recovers(self) -> None:
        mount = mount_tmpfs(self)
        log_dir = os.path.join(mount, "logs")
        filler = os.path.join(mount, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * FILLER_BYTES)
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        service = await start_broker(self, log_dir, segment_bytes=64 * 1024, storage_retry_s=0.5,
                                     num_partitions=1)
        producer = Producer(f"127.0.0.1:{service.broker.port}", ack="flushed", retries=0)
        self.addCleanup(producer.close)

        acknowledged: list[bytes] = []
        refused: list[bytes] = []
        error = None
        for n in range(MAX_BATCHES):
            batch = [(b"%06d-%03d" % (n, i)).ljust(200, b".") for i in range(BATCH)]
            try:
                await producer.send(TOPIC, batch, partition_index=0)
            except StorageFailed as e:
                refused += batch
                error = e
                break
            acknowledged += batch
        self.assertIsNotNone(error, f"{MAX_BATCHES} batches fitted in a {TMPFS_BYTES}-byte tmpfs")
        self.assertGreater(len(acknowledged), 0)
        self.assertIn("StorageFailed (error 13)", str(error))
        self.assertTrue(error.retriable)  # nothing was stored: resending later cannot duplicate it
        # The broker names the cause in one line per partition, without a traceback.
        causes = [formatEvent(e) for e in events if "No space left on device" in formatEvent(e)]
        self.assertEqual(len(causes), 1, causes)
        self.assertEqual(causes[0].splitlines(), [causes[0]])
        self.assertFalse([e for e in events if "log_failure" in e])

        # Refused at once while the retry time has not passed, without trying the disk.
        again = [b"again".ljust(200, b".")]
        await self.assertFailure(producer.send(TOPIC, again, partition_index=0), StorageFailed)

        # Space is back: after --storage-retry-s the partition takes writes again, without a restart.
        os.remove(filler)
        await deferLater(reactor, 0.6, lambda: None)
        later = [(b"later-%03d" % i).ljust(200, b".") for i in range(BATCH)]
        result = await producer.send(TOPIC, later, partition_index=0)
        self.assertEqual(result.error, 0)
        acknowledged += later

        await producer.close()
        await service.stopService()
        # Exactly what was acknowledged is stored: nothing refused reappears after a restart.
        self.assertEqual(stored_payloads(os.path.join(log_dir, f"{TOPIC}-0")), acknowledged)

    async def test_roll_without_inodes_fails_only_its_part(self) -> None:
        mount = mount_tmpfs(self, inodes=200)
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        service = await start_broker(self, os.path.join(mount, "logs"), segment_bytes=1024, num_partitions=2,
                                     storage_retry_s=0.5)
        client = await raw_connect(self, service)

        def produce(*parts: tuple[int, bytes]) -> AckProduceRequest:
            return AckProduceRequest(ACK_APPENDED, 1000, tuple(ProduceRequest(TOPIC, partition, encode_message_set(
                [payload])) for partition, payload in parts))

        async def answer(request: AckProduceRequest, count: int) -> list[tuple[int, int]]:
            client.send(request)
            frame = (await client.responses(count))[-1]
            return [(r.error, r.offset) for r in codec.decode_ack_produce_response(frame).results]

        # Partition 0's segment is full (1,019 of 1,024 bytes): its next set needs a new segment file.
        self.assertEqual(await answer(produce((0, b"x" * 1010), (1, b"a")), 1), [(0, 0), (0, 0)])
        fillers = []
        for n in range(1000):  # take every inode left
            try:
                fillers.append(open(os.path.join(mount, f"inode-{n}"), "x"))
            except OSError:
                break
            fillers[-1].close()
        self.assertLess(len(fillers), 1000)

        parts = await answer(produce((1, b"b"), (0, b"c"), (1, b"d")), 2)
        self.assertEqual(parts, [(0, 10), (StorageFailed.code, -1), (0, 20)])
        self.assertEqual(service.logs.get_log(TOPIC, 0).end_offset, 1019)
        self.assertEqual(service.logs.get_log(TOPIC, 1).end_offset, 30)
        causes = [formatEvent(e) for e in events if "No space left on device" in formatEvent(e)]
        self.assertEqual(len(causes), 1, causes)
        self.assertIn("to a new segment", causes[0])
        self.assertFalse([e for e in events if "log_failure" in e])

        # An inode is free again: after --storage-retry-s the roll succeeds, without a restart.
        os.remove(fillers[-1].name)
        await deferLater(reactor, 0.6, lambda: None)
        self.assertEqual(await answer(produce((0, b"c")), 3), [(0, 1019)])
        self.assertEqual(len(service.logs.get_log(TOPIC, 0).segments), 2)
        for filler in fillers[:-1]:  # room for the clean-shutdown marker when the broker stops
            os.remove(filler.name)
