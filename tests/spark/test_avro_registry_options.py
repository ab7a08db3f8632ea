"""The Spark source's registry HTTPS and basic auth options: known to the source, for valueFormat avro only, and
carried to the executors with the decoder."""

from __future__ import annotations

import json
import pickle

from twisted.trial.unittest import SynchronousTestCase

from twlog.spark.avro import AvroValues, _client
from twlog.spark.options import check_options

V1 = {"type": "record", "name": "U", "fields": [{"name": "name", "type": "string"}]}


class RegistryOptionsTests(SynchronousTestCase):
    def test_known_in_any_case(self) -> None:
        given = check_options({"schema.registry.ssl.ca.location": "ca.pem",
                               "Schema.Registry.Basic.Auth.User.Info": "bob:pw"})
        self.assertEqual(given, {"schema.registry.ssl.ca.location": "ca.pem",
                                 "schema.registry.basic.auth.user.info": "bob:pw"})

    def test_binary_refuses_them(self) -> None:
        for key in ("schema.registry.ssl.ca.location", "schema.registry.basic.auth.user.info"):
            with self.assertRaises(ValueError) as raised:
                AvroValues.for_options({key: "x"}, ["t"], True)
            self.assertIn('are for .option("valueFormat", "avro")', str(raised.exception))

    def test_carried_to_executors(self) -> None:
        values = AvroValues("https://r:8081", "t-value", json.dumps(V1), 1, 1, True, "ca.pem", "bob:pw")
        copy = pickle.loads(pickle.dumps(values))
        self.assertEqual((copy.registry_ca, copy.registry_user_info), ("ca.pem", "bob:pw"))
        client = _client(copy.url, copy.registry_ca, copy.registry_user_info)
        self.assertEqual((client.url, client.user, client.tls.ca_file), ("https://r:8081", "bob", "ca.pem"))

    def test_bad_settings_one_line(self) -> None:
        for url, ca, user_info, why in [("http://r:8081", "ca.pem", None, "need an https:// URL"),
                                        ("https://r:8081", None, "bob", "must be user:password")]:
            with self.assertRaises(ValueError) as raised:
                _client(url, ca, user_info)
            self.assertIn(why, str(raised.exception))
            self.assertTrue(str(raised.exception).startswith("valueFormat avro: "))
