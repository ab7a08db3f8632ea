"""Start a real broker in the test's reactor, on a free loopback port, with its own log directory."""

from __future__ import annotations

import attrs
from twisted.internet import reactor

from twlog.config import BrokerConfig, LogConfig
from twlog.tap import BrokerService

_LOG_FIELDS = {f.name for f in attrs.fields(LogConfig)}


async def start_broker(testcase, log_dir: str | None = None, **overrides) -> BrokerService:
    """A started L{BrokerService} on 127.0.0.1 port 0, stopped (cleanly) when the test ends.

    Keyword arguments name LogConfig or BrokerConfig fields.
    """
    log_settings = {k: v for k, v in overrides.items() if k in _LOG_FIELDS}
    broker_settings = {k: v for k, v in overrides.items() if k not in _LOG_FIELDS}
    config = BrokerConfig(
        log=LogConfig(log_dir or testcase.mktemp(), **log_settings),
        port=0,
        interface="127.0.0.1",
        **broker_settings,
    )
    service = BrokerService(config, reactor)
    service.startService()
    await service.listening
    testcase.addCleanup(lambda: service.stopService() if service.running else None)
    return service
