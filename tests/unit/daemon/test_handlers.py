import pytest

from poller.daemon.handlers import HandlerNotFoundError, HandlerSignatureError, load_handler
from poller.message import Message


def sync_handler(_message: Message) -> None:
    pass


NOT_CALLABLE = 3


def a_message(data_text: str = '{"a": 1}') -> Message:
    import datetime

    return Message(
        position=1,
        transaction_id=2,
        publication="p",
        message_id="m",
        message_type="T",
        partition_key=None,
        data_text=data_text,
        headers_text="{}",
        appended_at=datetime.datetime.now(datetime.UTC),
    )


def test_a_handler_is_loaded_by_module_and_name() -> None:
    assert load_handler(f"{__name__}:sync_handler") is sync_handler


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "package.module:callable"),
        ("not.a.module.anywhere:f", "cannot import"),
        (f"{__name__}:missing", "has no 'missing'"),
        (f"{__name__}:NOT_CALLABLE", "not callable"),
    ],
)
def test_bad_handler_specs_name_the_value(spec: str, says: str) -> None:
    with pytest.raises(HandlerNotFoundError, match=says) as refused:
        load_handler(spec)
    assert repr(spec) in str(refused.value)


def test_data_is_decoded_only_when_asked() -> None:
    import orjson

    message = a_message(data_text="{not json")
    assert message.with_attempt(3).delivery_attempt == 3  # routing never decodes the payload
    with pytest.raises(orjson.JSONDecodeError):
        _ = message.data
    assert a_message().data == {"a": 1}


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("takes_nothing", "takes (): too many positional arguments"),
        ("takes_two", "missing a required argument: 'other'"),
        ("wants_a_keyword", "missing a required argument: 'reply_to'"),
        ("batch_of_two", "with a list of messages: it takes (messages"),
        ("calls_with_nothing", "takes (): too many positional arguments"),
    ],
)
def test_a_handler_that_cannot_take_a_message_is_refused_when_loaded(name: str, says: str) -> None:
    spec = f"tests.support.handler_shapes:{name}"
    with pytest.raises(HandlerSignatureError) as refused:
        load_handler(spec)
    text = str(refused.value)
    assert text.startswith(f"handler {spec!r} cannot be called with"), text
    assert says in text
    assert "\n" not in text


@pytest.mark.parametrize(
    "name",
    [
        "takes_one",
        "takes_one_async",
        "takes_any",
        "takes_one_and_defaults",
        "calls_with_one",
        "second_given",
        "batch_of_one",
        "batches",
    ],
)
def test_every_handler_that_can_take_a_message_is_loaded(name: str) -> None:
    load_handler(f"tests.support.handler_shapes:{name}")
