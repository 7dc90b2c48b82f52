"""The public framework an application writes against: its routes (``Routes``, ``Request``,
``Tables``), what a read returns, live streams, the caller, the errors it raises and the
pipeline context. ``from kiq import ...`` points here and nowhere else inside kiq; each
module is imported when a name of it is first used, so ``import kiq`` stays cheap.
"""
