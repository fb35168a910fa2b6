import pytest

from poller.daemon.handlers import HandlerNotFoundError, load_handler
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
