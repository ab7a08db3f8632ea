"""Talking to brokers: one connection (Twisted), one blocking socket client, broker discovery."""
