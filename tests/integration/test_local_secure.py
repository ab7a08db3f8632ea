"""twlog local --secure as a new user meets it: a secured two-broker cluster (TLS, SASL on every port, ACLs,
ZooKeeper ACLs, replication between brokers that authenticate to each other), usable through the client.properties
it writes, and refusing every other client in one line."""

from __future__ import annotations

import os
import re
import signal
import ssl
import stat
import urllib.request

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.test_cli import one_line, twlog
from tests.integration.test_local import start_local
from twlog.coord.zkserver import free_port, free_ports


class SecureLocalTests(TestCase):
    timeout = 180

    async def test_secure_local_cluster(self) -> None:
        data = os.path.abspath(self.mktemp())
        first = free_ports(4)  # two brokers' plaintext ports, then their TLS ports (--port + --brokers + N)
        local, transport = start_local(self, "--secure", "--brokers", "2", "--replication-factor", "2",
                                       "--data", data, "--port", str(first), "--zookeeper-port", str(free_port()))
        banner = await local.ready
        zookeeper = re.search(r"ZooKeeper at (127\.0\.0\.1:\d+)", banner).group(1)
        config = os.path.join(data, "client.properties")
        self.assertIn(f"TLS at 127.0.0.1:{first + 2},127.0.0.1:{first + 3}", banner)
        self.assertIn(f"twlog topics --client-config {config}", banner)
        settings = dict(line.split("=", 1) for line in open(config).read().splitlines() if not line.startswith("#"))
        self.assertEqual(settings["bootstrap.servers"], f"127.0.0.1:{first + 2},127.0.0.1:{first + 3}")
        self.assertEqual((settings["security.protocol"], settings["sasl.username"]), ("SASL_SSL", "admin"))
        self.assertEqual(stat.S_IMODE(os.stat(config).st_mode), 0o600)

        # The admin's settings are all a client needs: produce (to a topic replicated on both brokers, which
        # authenticate to each other to replicate it), list, consume.
        sent = [b"%d" % i for i in range(100)]
        status, _, err = await twlog("produce", "--client-config", config, "-t", "clicks", "--batch-size", "10",
                                     "--ack", "all", stdin=b"\n".join(sent) + b"\n")
        self.assertEqual(status, 0, err)
        status, topics, err = await twlog("topics", "describe", "--client-config", config, "-t", "clicks")
        self.assertEqual(status, 0, err)
        status, received, err = await twlog("consume", "--client-config", config, "-t", "clicks")
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(received.split()), sorted(sent))

        # Anyone else is refused, in one line: a client without credentials on either port, and ZooKeeper writes.
        for address in (f"127.0.0.1:{first}", f"127.0.0.1:{first + 2}"):
            flags = ["--tls-ca", settings["ssl.ca.location"]] if address.endswith(str(first + 2)) else []
            status, _, err = await twlog("topics", "-b", address, *flags)
            self.assertEqual(status, 1, err)
            one_line(self, err)
            self.assertIn(b"Authentication", err)
        status, _, err = await twlog("consume", "--zookeeper", zookeeper, "--group", "demo", "-t", "clicks")
        self.assertEqual(status, 1, err)
        one_line(self, err)
        self.assertIn(b"ZooKeeper refused", err)

        # The metrics are served over HTTPS, with the cluster's CA.
        context = ssl.create_default_context(cafile=settings["ssl.ca.location"])
        url = re.search(r"metrics:  (https://\S+)", banner).group(1)
        body = await deferToThread(lambda: urllib.request.urlopen(url, context=context, timeout=10).read())
        self.assertIn(b"twlog_broker_info", body)

        transport.signalProcess(signal.SIGINT)
        await local.ended
        self.assertIn(b"twlog local: stopped", local.output)
        self.assertEqual(local.output.count(b"stopped cleanly"), 2)
