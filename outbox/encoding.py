"""JSON encoding for message data and headers.

`json_default` is the documented hook: it turns datetimes, dates, times, UUIDs, Decimals,
enums, dataclasses, sets and pydantic models into JSON values. Pass your own hook to `append`
to support more types; call `json_default` from it as the fallback.
"""

import dataclasses
import datetime
import decimal
import enum
import functools
import json
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from outbox.errors import InvalidMessageError

JsonDefault = Callable[[Any], Any]

# jsonb rejects the escaped NUL character ("unsupported Unicode escape sequence"). In encoded
# JSON it appears as \u0000 preceded by an even number of backslashes (an odd number would mean
# the backslash itself was escaped and the text only looks like an escape).
_ENCODED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# The deepest nesting of objects and arrays a message may have. PostgreSQL 15's jsonb parser
# recurses once per level and gives up at max_stack_depth (2MB by default: 10,000 levels parse,
# 20,000 do not; a server with a smaller setting gives up sooner, and that error aborts the
# caller's transaction). Python's json encoder and decoder recurse once per level too, under a
# default recursion limit of 1000, so a consumer could not decode anything deeper anyway.
# Nothing on the usual path counts levels: under that default limit the encoder itself gives up
# past 1000 levels, and only then is the value walked to name where it went too deep.
MAX_JSON_DEPTH = 1000


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


_orjson_dumps: Callable[[Any], bytes] | None
try:
    # Optional (the `orjson` extra; the daemon's extra has it too): several times faster than
    # json.dumps on the usual payload. Without it the json module encodes every value, to the
    # same JSON value.
    import orjson
except ModuleNotFoundError:
    _orjson_dumps = None
else:
    # orjson hands datetimes and dataclasses to the hook, so they encode exactly as
    # `json_default` says (isoformat, dataclasses.asdict). What it encodes itself (UUIDs, enums,
    # subclasses of str, int, dict and list) comes out as `json_default` and the json module
    # would write it.
    _orjson_dumps = functools.partial(
        orjson.dumps,
        default=json_default,
        option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS,
    )

# json.dumps builds an encoder per call when given options; the built-in hook's is made once.
_DEFAULT_ENCODER = json.JSONEncoder(
    default=json_default, allow_nan=False, ensure_ascii=False, separators=(",", ":")
)


def encode_json(field: str, value: Any, default: JsonDefault = json_default) -> str:
    """Encode `value` as compact JSON text that jsonb will accept, or raise naming the field."""
    if default is json_default and _orjson_dumps is not None:
        fast = _encode_with_orjson(_orjson_dumps, value)
        if fast is not None:
            return fast
    encoder = _DEFAULT_ENCODER if default is json_default else _encoder(default)
    try:
        text = encoder.encode(value)
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(field, value, f"cannot be encoded as JSON: {error}") from None
    except RecursionError:
        raise _too_deep(field, value) from None
    # isascii() reads a flag the string already carries, so ASCII payloads pay nothing; only
    # other text can hold a lone surrogate, which psycopg would fail to encode at execute time.
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as error:
            raise _unencodable(field, text, error) from None
    # The substring test is cheap and almost always false; the regex then rules out an escaped
    # backslash that merely looks like the escape.
    if "\\u0000" in text and _ENCODED_NUL.search(text):
        path, found = _first_text(json.loads(text), lambda item: "\x00" in item)
        raise InvalidMessageError(
            f"{field}{path}", found, "contains \\u0000, which PostgreSQL jsonb cannot store"
        )
    return text


def _encoder(default: JsonDefault) -> json.JSONEncoder:
    return json.JSONEncoder(
        default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":")
    )


def _encode_with_orjson(dumps: Callable[[Any], bytes], value: Any) -> str | None:
    """The usual payload in one C call, or None for the json module to encode or refuse.

    orjson is several times faster than json.dumps but differs at the edges, each of which
    returns None here: it refuses integers beyond 64 bits, non-str keys and nesting past 254
    levels (json.dumps takes them); it writes NaN and infinities as null where json.dumps
    refuses them (so any null goes the slow way, which decides); and it refuses lone surrogates,
    which the slow way names. A custom `default` never comes here: orjson encodes UUIDs and
    enums itself and would not ask that hook about them.
    """
    try:
        encoded = dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return None
    # "\u0000" is an escaped NUL (or text that merely looks like one): the slow way decides.
    if b"null" in encoded or b"\\u0000" in encoded:
        return None
    return encoded.decode()


def _too_deep(field: str, value: Any) -> InvalidMessageError:
    """The encoder ran out of recursion: name the container past MAX_JSON_DEPTH."""
    for path, item, depth in _walk(value):
        if depth == MAX_JSON_DEPTH and isinstance(item, Mapping | list | tuple):
            return InvalidMessageError(
                f"{field}{path}", item, f"is nested more than {MAX_JSON_DEPTH} levels deep"
            )
    # Within the limit, yet the encoder gave up: the caller's own stack was already deep, or the
    # depth is inside objects the `default` hook expands, where the walk cannot see.
    return InvalidMessageError(
        field,
        value,
        "is nested too deeply to encode at this call depth"
        f" (Python's recursion limit is {sys.getrecursionlimit()})",
    )


def _unencodable(field: str, text: str, error: UnicodeEncodeError) -> InvalidMessageError:
    """Name the string or key holding the lone surrogate that UTF-8 could not encode."""
    path, found = _first_text(json.loads(text), _has_surrogate)
    surrogate = ord(text[error.start])
    return InvalidMessageError(
        f"{field}{path}",
        found,
        f"contains a lone surrogate (U+{surrogate:04X}), which UTF-8 cannot encode",
    )


def _has_surrogate(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _first_text(value: Any, wanted: Callable[[str], bool]) -> tuple[str, str]:
    """The path (like `.items[2].name`) and text of the first string or key that is `wanted`."""
    return next(
        (path, item) for path, item, _ in _walk(value) if isinstance(item, str) and wanted(item)
    )


def _walk(value: Any) -> Iterator[tuple[str, Any, int]]:
    """Every value, key and container in document order, as (path, item, depth).

    A loop over an explicit stack, not recursion: the value may be nested far deeper than
    Python's recursion limit. A key comes just before its value, with the same path.
    """
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        yield path, item, depth
        if isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                stack.append((f"{path}.{key}", child, depth + 1))
                stack.append((f"{path}.{key}", key, depth + 1))
        elif isinstance(item, list | tuple):
            for index in reversed(range(len(item))):
                stack.append((f"{path}[{index}]", item[index], depth + 1))
