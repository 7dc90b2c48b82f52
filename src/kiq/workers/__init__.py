"""Read workers: more processes answering a node's port, reading its stores as secondaries.

``home.py`` is the node's side (its private listener, starting and keeping its workers),
``main.py`` a worker's process, ``mirror.py`` its copy of the node, ``app.py`` what it
answers and what it hands back, ``state.py`` what the node tells it.
"""
