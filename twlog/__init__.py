"""twlog: a distributed, log-structured publish/subscribe system on Twisted."""

__version__ = "0.1.0"
