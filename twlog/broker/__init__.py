"""The broker process: its logs, listener and ZooKeeper registration as one Twisted service."""
