"""dumps_json writes the same text whether json's encoder takes the object as it is or after jsonable."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from veotrace.render import export


class Kind(str, enum.Enum):
    A = "a"


class Level(enum.IntEnum):
    LOW = 1


class Plain(enum.Enum):
    X = "x"


@dataclasses.dataclass
class Point:
    x: float
    tags: tuple


class WithDict:
    def to_dict(self):
        return {"n": np.int64(3), "f": np.float32(0.5)}


def _obj(bad: float | None):
    return {
        "ints": [1, np.int64(2), Level.LOW, True, np.bool_(False)],
        "floats": [1.5, np.float64(2.25), np.float32(0.5)] + ([bad] if bad is not None else []),
        "keys": {3: "i", 2.5: "f", True: "b", None: "n", Kind.A: "e", "s": "s"},
        "enums": [Kind.A, Plain.X], "path": Path("/tmp/x"), "point": Point(0.25, (1, 2)),
        "obj": WithDict(), "array": np.arange(3), "scalar": pa.scalar(7), "none": None,
    }


def test_fast_and_walked_paths_write_the_same_text():
    fast = export.dumps_json(_obj(None))
    walked = json.dumps(export.jsonable(_obj(None)), allow_nan=False) + "\n"
    assert fast == walked
    doc = json.loads(fast)
    assert doc["keys"] == {"3": "i", "2.5": "f", "true": "b", "null": "n", "a": "e", "s": "s"}
    assert doc["ints"] == [1, 2, 1, True, False] and doc["path"] == "/tmp/x"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_become_null(bad):
    doc = json.loads(export.dumps_json(_obj(bad)))
    assert doc["floats"][-1] is None and doc["floats"][:3] == [1.5, 2.25, 0.5]


def test_keys_json_refuses_fall_back_to_their_text():
    assert json.loads(export.dumps_json({(1, 2): 3, Path("p"): 4})) == {"(1, 2)": 3, "p": 4}
