"""Arrow schemas: the contract between readers, analyses and renderers.

Every table that crosses a layer has a named schema here, with units in column names, repeated
strings dictionary-encoded, declared nullability and a ``veotrace.schema`` metadata tag such as
``alloc_events/1``. Bump the number when a column changes meaning. The helpers every schema module
builds with (``tagged``, ``DICT_STR``, ``conform``, ...) live in :mod:`veotrace.schemas.base` and are
re-exported here with the most used schemas.
"""

from __future__ import annotations

from veotrace.schemas.base import (
    DICT_STR,
    SCHEMA_KEY,
    conform,
    empty_table,
    repeated,
    schema_tag,
    tagged,
)
from veotrace.schemas.events import ALLOC_EVENTS, Op
from veotrace.schemas.gpu import BLOCKS, GPU_ACTIVITY, SEGMENTS
from veotrace.schemas.metrics import NCU_METRICS

__all__ = [
    "ALLOC_EVENTS",
    "BLOCKS",
    "DICT_STR",
    "GPU_ACTIVITY",
    "NCU_METRICS",
    "SCHEMA_KEY",
    "SEGMENTS",
    "Op",
    "conform",
    "empty_table",
    "repeated",
    "schema_tag",
    "tagged",
]
