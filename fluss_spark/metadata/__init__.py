"""Cluster metadata in ZooKeeper: the znode layout, versioned records, and the kazoo store.

This is the only package that imports kazoo (besides the test support's fault injection).
"""
