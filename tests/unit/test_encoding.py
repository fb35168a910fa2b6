import dataclasses
import datetime
import decimal
import enum
import json
import uuid

import pydantic
import pytest

from outbox.encoding import encode_json
from outbox.errors import InvalidMessageError


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Line:
    sku: str
    amount: decimal.Decimal


class Customer(pydantic.BaseModel):
    id: uuid.UUID
    since: datetime.date


def test_the_default_hook_encodes_the_usual_event_values() -> None:
    customer_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = {
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "id": customer_id,
        "price": decimal.Decimal("0.10"),
        "colour": Colour.RED,
        "line": Line("sku-1", decimal.Decimal("2.50")),
        "customer": Customer(id=customer_id, since=datetime.date(2020, 5, 6)),
        "tags": {"b"},
    }
    assert json.loads(encode_json("data", value)) == {
        "at": "2026-01-02T03:04:05+00:00",
        "id": str(customer_id),
        "price": "0.10",
        "colour": "red",
        "line": {"sku": "sku-1", "amount": "2.50"},
        "customer": {"id": str(customer_id), "since": "2020-05-06"},
        "tags": ["b"],
    }


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("a\x00", "data"),
        ({"outer": [1, {"inner": "x\x00y"}]}, "data.outer[1].inner"),
        ({"ke\x00y": 1}, "data.ke\x00y"),
    ],
)
def test_nul_characters_are_refused_with_their_path(value: object, field: str) -> None:
    with pytest.raises(InvalidMessageError) as refused:
        encode_json("data", value)
    assert refused.value.field == field


def test_a_backslash_followed_by_u0000_text_is_not_a_nul() -> None:
    assert json.loads(encode_json("data", "\\u0000")) == "\\u0000"


@pytest.mark.parametrize(
    "value", [float("inf"), decimal.Decimal("NaN"), object(), {"a": {1, object()}}]
)
def test_values_json_cannot_hold_are_refused(value: object) -> None:
    with pytest.raises(InvalidMessageError, match="cannot be encoded as JSON"):
        encode_json("data", value)


def test_a_custom_hook_extends_the_default() -> None:
    class Money:
        cents = 250

    def hook(value: object) -> object:
        return value.cents if isinstance(value, Money) else None

    assert encode_json("data", {"m": Money()}, hook) == '{"m":250}'
