"""kiq.testing: an application's pipelines and routes tested in seconds, without a broker.

    run_pipeline(build, inputs)   a pipeline function over rows given in Python, in one
                                  local Spark batch, through the same ``Context`` as
                                  ``kiq pipeline run``: → ``Run`` (``tables``,
                                  ``dead_letters``, ``topics``, ``declared``)
    TestClient(endpoints, tables) the routes ``[app] endpoints`` declares, on one kiq node
                                  in process whose tables are the dicts given; with
                                  ``principal=caller(...)``, a node that checks tokens

``import kiq`` does not import this module; importing it does not start Spark (the first
``run_pipeline`` does). The reference, with what a batch computes differently from a
stream: docs/api.md, "Testing: kiq.testing".
"""

from kiq.testing._client import Response, TestClient, caller
from kiq.testing._node import DeadLetter, Written
from kiq.testing._pipeline import Message, Record, Run, run_pipeline

__all__ = [
    "DeadLetter",
    "Message",
    "Record",
    "Response",
    "Run",
    "TestClient",
    "Written",
    "caller",
    "run_pipeline",
]
