"""twlog: a distributed, log-structured publish/subscribe system on Twisted.

The names most programs need are importable from here (C{from twlog import
Producer}); they load on first use, so C{import twlog.storage} stays light.
"""

from importlib import import_module

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "Producer": "twlog.producer",
    "SimpleConsumer": "twlog.consumer.simple",
    "GroupConsumer": "twlog.consumer.group",
    "BlockingProducer": "twlog.blocking",
    "BlockingConsumer": "twlog.blocking",
    "BlockingGroupConsumer": "twlog.blocking",
    "TopicPartition": "twlog.partition",
    "EARLIEST": "twlog.protocol.codec",
    "LATEST": "twlog.protocol.codec",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'twlog' has no attribute {name!r}")
    return getattr(import_module(module), name)
