import asyncio
import threading

import pytest

from poller.daemon.handlers import HandlerCaller, HandlerNotFoundError, load_handler
from poller.message import Message

calls: list[tuple[str, int]] = []


def sync_handler(_message: Message) -> None:
    calls.append(("sync", threading.get_ident()))


async def async_handler(_message: Message) -> None:
    calls.append(("async", threading.get_ident()))


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


async def test_sync_handlers_run_off_the_event_loop_and_async_ones_on_it() -> None:
    calls.clear()
    loop_thread = threading.get_ident()
    sync_caller, async_caller = HandlerCaller(sync_handler, 2), HandlerCaller(async_handler, 2)
    await asyncio.gather(sync_caller(a_message()), async_caller(a_message()))
    sync_caller.close()
    threads = dict(calls)
    assert threads["async"] == loop_thread
    assert threads["sync"] != loop_thread


def test_data_is_decoded_only_when_asked() -> None:
    import orjson

    message = a_message(data_text="{not json")
    assert message.with_attempt(3).delivery_attempt == 3  # routing never decodes the payload
    with pytest.raises(orjson.JSONDecodeError):
        _ = message.data
    assert a_message().data == {"a": 1}


async def test_a_handler_thread_outliving_its_cancelled_delivery_is_waited_for() -> None:
    release = threading.Event()
    started = threading.Event()

    def blocking(_message: Message) -> None:
        started.set()
        release.wait(5)

    caller = HandlerCaller(blocking, 2)
    delivery = asyncio.ensure_future(caller(a_message()))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    delivery.cancel()  # the term ended; the thread runs on
    assert not await caller.wait_quiet(0.1)
    release.set()
    assert await caller.wait_quiet(5)
    caller.close()
