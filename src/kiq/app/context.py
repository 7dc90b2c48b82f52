"""What a pipeline's function is given (``Context``): the public name of
``kiq.pipelines.context.Context``, so the public API points into ``kiq.app`` alone."""

from kiq.pipelines.context import Context

__all__ = ["Context"]
