"""twlog bench broker --tls: its certificates and its table (the run itself: tests.integration.test_tls_bench)."""

from __future__ import annotations

import ssl

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.broker import BrokerRow
from twlog.bench.broker_tls import TLSCell, format_tls_table, make_certificates
from twlog.cli.main import build_parser


def cell(what: str, tls: bool, seconds: float) -> TLSCell:
    return TLSCell(what, tls, BrokerRow(what, 1_000_000, seconds, 200_000_000, 0.209))


class TLSBenchTests(SynchronousTestCase):
    def test_option(self) -> None:
        self.assertTrue(build_parser().parse_args(["bench", "broker", "--tls"]).tls)
        self.assertFalse(build_parser().parse_args(["bench", "broker"]).tls)

    def test_certificates(self) -> None:
        """The CA signs the broker's certificate for 127.0.0.1 and the key matches: the standard library loads
        them as a server and trusts them as a client."""
        ca, cert, key = make_certificates(self.mktemp())
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(cert, key)
        client = ssl.create_default_context(cafile=ca)
        self.assertEqual(len(client.get_ca_certs()), 1)

    def test_table(self) -> None:
        """One row per measurement, plaintext beside TLS, the ratio TLS over plaintext (medians)."""
        cells = [cell("produce", False, 2.0), cell("produce", True, 4.0),
                 cell("consume, 1 MB fetches", False, 1.0), cell("consume, 1 MB fetches", True, 1.6),
                 cell("consume, 1 MB fetches", False, 1.0), cell("consume, 1 MB fetches", True, 1.4)]
        table = format_tls_table(cells, 200)
        self.assertEqual([row[0] for row in table.rows], ["produce", "consume, 1 MB fetches"])
        self.assertEqual(table.rows[0][1:4], ["500,000", "250,000", "0.50"])
        self.assertEqual(table.rows[1][1:4], ["1,000,000", "669,643", "0.67"])
        self.assertEqual(table.problems(), [])
