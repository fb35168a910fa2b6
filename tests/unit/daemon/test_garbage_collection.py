"""The collector settings `outbox poll` sets for its process (restored after each test)."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from poller.daemon.garbage_collection import YOUNG_COLLECTION_EVERY, set_for_daemon


@pytest.fixture(autouse=True)
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_startup_objects_are_frozen_and_young_collections_come_less_often() -> None:
    _young, middle, old = gc.get_threshold()
    set_for_daemon()
    assert gc.get_freeze_count() > 1000  # the modules imported so far, at least
    assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, middle, old)


def test_garbage_made_before_is_collected_not_frozen() -> None:
    class Node:
        other: "Node"

    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle only the collector frees
    watch = weakref.ref(first)
    del first, second
    set_for_daemon()
    assert watch() is None
