"""JSON encoding for message data and headers.

`json_default` is the documented hook: it turns datetimes, dates, times, UUIDs, Decimals,
enums, dataclasses, sets and pydantic models into JSON values. Pass your own hook to `append`
to support more types; call `json_default` from it as the fallback.
"""

import dataclasses
import datetime
import decimal
import enum
import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from outbox.errors import InvalidMessageError

JsonDefault = Callable[[Any], Any]

# jsonb rejects the escaped NUL character ("unsupported Unicode escape sequence"). In encoded
# JSON it appears as \u0000 preceded by an even number of backslashes (an odd number would mean
# the backslash itself was escaped and the text only looks like an escape).
_ENCODED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def json_default(value: Any) -> Any:
    """Encode the values applications usually put in events; refuse everything else."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        # A string keeps every digit; a float would round 0.1 + 0.2 money amounts.
        if not value.is_finite():
            raise ValueError(f"non-finite Decimal {value}")
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):  # pydantic v2 models, without importing pydantic here
        return model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_json(field: str, value: Any, default: JsonDefault = json_default) -> str:
    """Encode `value` as compact JSON text that jsonb will accept, or raise naming the field."""
    try:
        text = json.dumps(
            value, default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(field, value, f"cannot be encoded as JSON: {error}") from None
    except RecursionError:
        raise InvalidMessageError(field, value, "is nested too deeply to encode") from None
    # The substring test is cheap and almost always false; the regex then rules out an escaped
    # backslash that merely looks like the escape.
    if "\\u0000" in text and _ENCODED_NUL.search(text):
        path = _path_to_nul(json.loads(text))
        raise InvalidMessageError(
            f"{field}{path}", value, "contains \\u0000, which PostgreSQL jsonb cannot store"
        )
    return text


def _path_to_nul(value: Any, path: str = "") -> str:
    """Where the first NUL character sits, as a path like `.items[2].name`."""
    if isinstance(value, str):
        return path if "\x00" in value else ""
    if isinstance(value, Mapping):
        for key, item in value.items():
            key_path = f"{path}.{key}"
            if "\x00" in key:
                return key_path
            found = _path_to_nul(item, key_path)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _path_to_nul(item, f"{path}[{index}]")
            if found:
                return found
    return ""
