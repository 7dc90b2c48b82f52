"""The core HTTP table API every node serves: lookups, scans, metadata, health, metrics.

The node's ASGI application that mounts it is assembled in ``kiq.server``.
"""
