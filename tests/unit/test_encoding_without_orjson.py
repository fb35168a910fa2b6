"""Without orjson (an optional package) the writer encodes with the json module: the same
JSON values, the same refusals."""

import dataclasses
import datetime
import decimal
import enum
import json
import uuid

import pytest

from outbox import encoding
from outbox.encoding import encode_json
from outbox.errors import InvalidMessageError


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Line:
    sku: str
    amount: decimal.Decimal


VALUES = [
    {"order_id": 42, "total": "99.50", "lines": [{"sku": "a", "qty": 2}], "paid": True},
    {"at": datetime.datetime(2026, 1, 2, 3, 4, 5, 6), "line": Line("s", decimal.Decimal(1))},
    {"colour": Colour.RED, "id": uuid.UUID(int=7), "note": None, "ratio": 1e16, "tags": {"b"}},
    {"text": "naïve ☃", "big": 2**70, 1: "int key"},
]


@pytest.fixture
def without_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding, "_orjson_dumps", None)


def test_orjson_is_used_here() -> None:
    # The comparisons below mean something only if the other side is orjson's.
    assert encoding._orjson_dumps is not None


@pytest.mark.parametrize("value", VALUES)
def test_the_json_module_writes_the_same_values(
    value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = encode_json("data", value)
    monkeypatch.setattr(encoding, "_orjson_dumps", None)
    assert json.loads(encode_json("data", value)) == json.loads(fast)


@pytest.mark.usefixtures("without_orjson")
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"a": float("nan")}, "cannot be encoded as JSON"),
        ({"a": "x\x00"}, "contains \\u0000"),
        ({"a": object()}, "cannot be encoded as JSON"),
    ],
)
def test_the_same_values_are_refused(value: object, reason: str) -> None:
    with pytest.raises(InvalidMessageError, match="data") as refused:
        encode_json("data", value)
    assert reason in str(refused.value)
