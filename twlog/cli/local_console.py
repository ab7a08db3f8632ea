# -*- test-case-name: tests.integration.test_console_cluster -*-
"""C{twlog local --console}: the web console (L{twlog.console}) in C{twlog local}'s process, beside the cluster,
on 127.0.0.1:C{--console-port}; with C{--secure}, as the admin user (its TLS and SASL settings, the cluster's
ZooKeeper identity)."""

from __future__ import annotations

import os

from twlog.client.kafka_settings import read_settings_file, security_settings
from twlog.client.options import ClientOptions
from twlog.console.service import ConsoleService, cannot_listen
from twlog.coord.zkauth import read_credentials_file
from twlog.errors import TwlogError

#: Seconds between the console's samples in C{twlog local} (the charts move faster than the default 10 s).
SAMPLE_INTERVAL_S = 5.0


class LocalConsoleError(TwlogError):
    """The console of C{twlog local} cannot start (one line naming the option to change)."""


def console_options(data: str, secure) -> ClientOptions:
    """How the console reaches the brokers: plainly, or with C{--secure} as the admin (DATA/client.properties)."""
    if secure is None:
        return ClientOptions()
    path = os.path.join(data, "client.properties")
    settings = read_settings_file(path, "client.properties", also=("bootstrap.servers",))
    settings.pop("bootstrap.servers", None)
    tls, sasl = security_settings(settings, path)
    return ClientOptions(tls=tls, sasl=sasl,
                         zookeeper_credentials=read_credentials_file(secure.zookeeper_credentials_file))


async def start_console(reactor, zookeeper: str, port: int, data: str, secure=None) -> ConsoleService:
    """The console of the cluster at C{zookeeper}, listening on 127.0.0.1:C{port}.

    @raise LocalConsoleError: it cannot listen (the port taken, say).
    """
    service = ConsoleService(zookeeper=zookeeper, port=port, interface="127.0.0.1", reactor=reactor,
                             options=console_options(data, secure), sample_interval_s=SAMPLE_INTERVAL_S)
    service.startService()
    try:
        await service.listening
    except Exception as e:
        line = cannot_listen(service, e).replace("--port", "--console-port")
        raise LocalConsoleError(line) from None
    return service
