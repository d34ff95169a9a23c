"""Cluster metadata in ZooKeeper: the znode layout, versioned records, and the kazoo store.

This is the only package that imports kazoo.
"""
