"""Loading `package.module:callable` handlers, and what kind of handler one is."""

import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outbox.shadowed_packages import shadowing_line, shadowing_module
from poller.batch_handlers import batch_options
from poller.printable import safe_repr

# A Message for a one-message handler, a list of them for a batch handler (batch_handlers.py).
Handler = Callable[..., Any]


class HandlerNotFoundError(ValueError):
    """The --handler value does not name an importable callable."""


class HandlerSignatureError(ValueError):
    """The handler cannot be called with one message (a batch handler: one list of them)."""


class PackageShadowedError(ValueError):
    """A module or package of the application's is named as one of ours (`poller`)."""


class HandlerExited(Exception):  # noqa: N818 - names what the handler did
    """The handler called sys.exit(): a failed delivery, never the end of the daemon."""

    def __init__(self, code: object) -> None:
        super().__init__(f"the handler called sys.exit({safe_repr(code)})")


def load_handler(spec: str) -> Handler:
    """Import `package.module:callable` (the form `python -m` tools such as uvicorn take)."""
    module_name, separator, attribute = spec.partition(":")
    if not separator or not module_name or not attribute:
        raise HandlerNotFoundError(f"handler {spec!r} is not of the form package.module:callable")
    refuse_shadowed_packages(spec, module_name)
    try:
        target = pkgutil.resolve_name(spec)
    except ImportError as error:
        raise HandlerNotFoundError(
            f"handler {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    except AttributeError:
        raise HandlerNotFoundError(
            f"handler {spec!r}: {module_name!r} has no {attribute!r}"
        ) from None
    except ValueError:  # not a dotted name: a path, spaces, an empty part
        raise HandlerNotFoundError(
            f"handler {spec!r} is not of the form package.module:callable"
        ) from None
    if not callable(target):
        raise HandlerNotFoundError(f"handler {spec!r} is a {type(target).__name__}, not callable")
    handler: Handler = target
    check_signature(handler, repr(spec))
    return handler


def refuse_shadowed_packages(spec: str, module_name: str) -> None:
    """Refuse an application's own `poller` (or `outbox`) module or package, beside the
    handler or on the import path: ours is already imported, so the handler's `import
    poller` would get ours and every message would park with an AttributeError."""
    if module := shadowing_module([*sys.path, *_handler_folder(module_name)]):
        raise PackageShadowedError(f"handler {spec!r}: {shadowing_line(module)}")


def _handler_folder(module_name: str) -> list[str]:
    """The folder the handler's module lives in, found without running it (its parent
    packages are imported, as loading it would)."""
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return []  # loading it says why
    if found is None or found.origin is None:
        return []
    return [str(Path(found.origin).parent)]


def check_signature(handler: Handler, name: str) -> None:
    """Refuse, before any delivery, a handler the daemon cannot call with one message (a batch
    handler: with one list): each call would fail and every message would park. Defaults,
    `*args`, callable objects, `functools.partial` and `batch_handler` objects all pass; a
    callable whose signature cannot be read (some built-ins) is left to its first call."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)  # what the daemon passes, as it passes it: one positional
    except TypeError as error:
        taken = "a list of messages" if batch_options(handler) is not None else "one message"
        parameters = signature.replace(return_annotation=inspect.Signature.empty)
        raise HandlerSignatureError(
            f"handler {name} cannot be called with {taken}: it takes {parameters}: {error}"
        ) from None


def is_async(handler: object) -> bool:
    """An `async def` function, or a callable object with an `async def __call__`."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )
