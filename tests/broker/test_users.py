"""The broker's authentication options (--sasl-mechanisms, --require-auth, --inter-broker-*) and what they build:
the connections' Authentication and the followers' authenticated client options."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from tests.broker.test_tap_tls import parse
from tests.protocol.test_server import BrokerTestMixin
from twlog.broker.users import BrokerUsers, inter_broker_options
from twlog.client.sasl import SASLSettings
from twlog.errors import TwlogError
from twlog.protocol.factory import BrokerFactory


class OptionsTests(SynchronousTestCase):
    def test_options_reach_the_config(self) -> None:
        config = parse("--zookeeper", "z:2181", "--sasl-mechanisms", "scram-sha-256, PLAIN", "--require-auth",
                       "--inter-broker-user", "broker", "--inter-broker-password-file", "p",
                       "--inter-broker-mechanism", "scram-sha-256").config
        self.assertEqual((config.sasl_mechanisms, config.require_auth, config.inter_broker_user,
                          config.inter_broker_password_file, config.inter_broker_mechanism),
                         (("SCRAM-SHA-256", "PLAIN"), True, "broker", "p", "SCRAM-SHA-256"))
        plain = parse().config
        self.assertEqual((plain.sasl_mechanisms, plain.require_auth, plain.inter_broker_user), ((), False, None))

    def test_inconsistent_options_name_the_option(self) -> None:
        cases = {
            ("--sasl-mechanisms", "SCRAM-SHA-256"): "--sasl-mechanisms need --zookeeper",
            ("--zookeeper", "z:1", "--sasl-mechanisms", "GSSAPI"): "--sasl-mechanisms: unknown GSSAPI",
            ("--require-auth",): "--require-auth needs --sasl-mechanisms or --tls-client-ca",
            ("--zookeeper", "z:1", "--inter-broker-user", "b"): "--inter-broker-user and --inter-broker-password-file",
            ("--zookeeper", "z:1", "--inter-broker-user", "b", "--inter-broker-password-file", "p",
             "--inter-broker-mechanism", "PLAIN"): "--inter-broker-mechanism PLAIN is not SCRAM",
        }
        for argv, expected in cases.items():
            with self.assertRaises(usage.UsageError) as raised:
                parse(*argv)
            self.assertIn(expected, str(raised.exception))


class BuildTests(BrokerTestMixin, SynchronousTestCase):
    def test_authentication_only_when_asked(self) -> None:
        """A broker without the options builds plain connections; with them, an Authentication."""
        self.make_broker()
        factory = BrokerFactory(self.broker)
        self.assertIsNone(BrokerUsers(self.broker.config, Clock(), factory).authentication)
        self.assertIsNone(factory.authentication)
        self.make_broker(zookeeper="z:1", sasl_mechanisms=("SCRAM-SHA-512",), require_auth=True)
        factory = BrokerFactory(self.broker)
        users = BrokerUsers(self.broker.config, Clock(), factory)
        self.assertIs(factory.authentication, users.authentication)
        self.assertEqual((users.authentication.mechanisms, users.authentication.require), (("SCRAM-SHA-512",), True))
        self.assertIsNone(users.lookup("bob"))  # nothing read from ZooKeeper yet: nobody authenticates

    def test_inter_broker_options(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("s3cret\r\nignored\n")
        self.make_broker(zookeeper="z:1", inter_broker_user="broker", inter_broker_password_file=path)
        self.assertEqual(inter_broker_options(self.broker.config).sasl,
                         SASLSettings("SCRAM-SHA-512", "broker", "s3cret"))
        self.make_broker(zookeeper="z:1", inter_broker_user="broker", inter_broker_password_file=self.mktemp())
        with self.assertRaises(TwlogError) as raised:
            inter_broker_options(self.broker.config)
        self.assertIn("cannot read --inter-broker-password-file", str(raised.exception))
        self.make_broker()
        self.assertIsNone(inter_broker_options(self.broker.config))
