"""Replicated topics in ZooKeeper (foundations): their values, their assignment, the controller's decisions.

docs/replication.md describes the layout, the decisions and the controller's state table.
"""
