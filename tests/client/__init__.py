"""Tests of the Twisted client: protocol, connection, producer, simple consumer."""
