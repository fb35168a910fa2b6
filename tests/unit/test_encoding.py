import dataclasses
import datetime
import decimal
import enum
import json
import uuid

import pydantic
import pytest

from outbox.encoding import MAX_JSON_DEPTH, encode_json, json_default
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


def nested(depth: int, leaf: object = 0) -> object:
    """`leaf` inside `depth` lists, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("a\ud800", "data"),
        ({"items": [{}, {"name": "x\udfffy"}]}, "data.items[1].name"),
        ({"ke\ud83dy": 1}, "data.ke\ud83dy"),
        (Line("sku-\udc80", decimal.Decimal(1)), "data.sku"),  # found after the hook ran
    ],
)
def test_lone_surrogates_are_refused_with_their_path(value: object, field: str) -> None:
    with pytest.raises(InvalidMessageError, match="lone surrogate") as refused:
        encode_json("data", value)
    assert refused.value.field == field


def test_the_surrogate_named_is_the_one_utf8_could_not_encode() -> None:
    with pytest.raises(InvalidMessageError, match=r"\(U\+DFFF\)"):
        encode_json("data", ["é", "\udfff"])


def test_text_beyond_ascii_still_encodes() -> None:
    assert encode_json("data", {"clé": "Zoë \U0001f600"}) == '{"clé":"Zoë \U0001f600"}'


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_nesting_past_the_limit_is_refused_where_it_goes_too_deep(depth: int) -> None:
    with pytest.raises(InvalidMessageError, match="more than 1000 levels deep") as refused:
        encode_json("data", {"items": [1, nested(depth - 2)]})
    assert refused.value.field == "data.items[1]" + "[0]" * (MAX_JSON_DEPTH - 2)


def test_nesting_through_dict_keys_is_named_by_its_keys() -> None:
    value: object = {}
    for _ in range(5000):
        value = {"a": value}
    with pytest.raises(InvalidMessageError) as refused:
        encode_json("data", value)
    assert refused.value.field == "data" + ".a" * MAX_JSON_DEPTH


def test_depth_the_walk_cannot_see_is_still_refused_by_field() -> None:
    class Chain:
        """Each one encodes as a list holding another: endless depth behind the hook."""

    with pytest.raises(InvalidMessageError, match="too deeply to encode") as refused:
        encode_json("data", Chain(), lambda _: [Chain()])
    assert refused.value.field == "data"


def test_the_limit_itself_is_not_called_too_deep() -> None:
    # Exactly MAX_JSON_DEPTH levels: within the limit, but the test's own stack leaves the
    # encoder too little room, so the refusal blames the call depth and not the value.
    with pytest.raises(InvalidMessageError, match="at this call depth") as refused:
        encode_json("data", nested(MAX_JSON_DEPTH))
    assert refused.value.field == "data"


@pytest.mark.parametrize(
    "value",
    [
        {"order_id": 42, "total": "99.50", "lines": [{"sku": "a", "qty": 2}], "paid": True},
        {"big": 2**70, "small": -(2**64)},  # beyond orjson's 64 bits
        {1: "int key", None: "null key", 2.5: "float key"},  # keys orjson refuses
        {"at": datetime.datetime(2026, 1, 2, 3, 4, 5, 6), "line": Line("s", decimal.Decimal(1))},
        {"colour": Colour.RED, "id": uuid.UUID(int=7), "note": None, "ratio": 1e16},
        nested(300),  # deeper than orjson goes
    ],
)
def test_the_fast_encoder_agrees_with_the_json_module(value: object) -> None:
    def same_hook(item: object) -> object:
        return json_default(item)  # not json_default itself, so the json module encodes

    assert json.loads(encode_json("data", value)) == json.loads(
        encode_json("data", value, same_hook)
    )


@pytest.mark.parametrize("value", [{"a": float("nan")}, [float("-inf")]])
def test_floats_json_cannot_hold_are_refused_though_orjson_writes_them_as_null(
    value: object,
) -> None:
    with pytest.raises(InvalidMessageError, match="cannot be encoded as JSON"):
        encode_json("data", value)


def test_a_null_beside_a_float_is_kept() -> None:
    assert encode_json("data", {"x": [1.5, None]}) == '{"x":[1.5,null]}'
