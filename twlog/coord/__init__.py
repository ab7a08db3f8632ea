"""Coordination through ZooKeeper: the kazoo adapter, the ZooKeeper layout, and a local server."""
