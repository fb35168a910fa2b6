"""What a webhook's answer means for the messages of its POST.

- 2xx: published.
- 5xx, 408, 429, a timeout, a network error: the receiver cannot take them now
  (BrokerUnavailable). A Retry-After on a 429 or 503 is honoured: nothing is POSTed before it
  (at most LONGEST_RETRY_AFTER ahead).
- 401, 403, 407 refuse the sender (its password or signing secret), and a 3xx (redirects are
  not followed), 404, 405 or 410 says the URL is wrong: properties of the endpoint, not of a
  message, so they wait too, with a reason that says what to fix, and park nothing.
- 413: the body is too large for the receiver (a batch is split; one message alone is
  refused for good).
- Any other 4xx refuses the message (or the batch) for good: parked with "HTTP 422: <the
  answer's start>".

Only the first ANSWER_LIMIT bytes of an answer are read, whatever it declares or sends: a
receiver answering a huge body must not hold the relay's memory or its event loop.
"""

import email.utils
import time

import httpx

from outbox_relays.target import BrokerUnavailable

ANSWER_LIMIT = 4096
"""Bytes of an answer's body the relay reads at most."""

LONGEST_RETRY_AFTER = 600.0
"""Seconds a Retry-After may hold the relay at most: a receiver's typo must not stop it for a
day."""

_REASON_LENGTH = 200
"""How much of a refusing answer's body its reason quotes."""

_SENDER_REFUSED = frozenset({401, 403, 407})
_WRONG_ENDPOINT = frozenset({404, 405, 410})
_NOT_NOW = frozenset({408, 429})
TOO_LARGE = 413


async def read_start(response: httpx.Response) -> bytes:
    """The first ANSWER_LIMIT bytes of the answer's body; the rest is never read (closing the
    response drops its connection)."""
    start = bytearray()
    async for chunk in response.aiter_raw():
        start += chunk
        if len(start) >= ANSWER_LIMIT:
            break
    return bytes(start[:ANSWER_LIMIT])


def meaning(endpoint: str, response: httpx.Response, body: bytes) -> str | None:
    """None when published, the reason when refused for good; raises BrokerUnavailable for
    an answer that is not about the message."""
    status = response.status_code
    if 200 <= status < 300:
        return None
    text = " ".join(body.decode(errors="replace").split())[:_REASON_LENGTH]
    answer = f"HTTP {status}: {text or response.reason_phrase}"
    if 300 <= status < 400:
        location = response.headers.get("location", "nowhere")
        raise BrokerUnavailable(
            "refused",
            f"{endpoint} answered HTTP {status}, a redirect to {location!r}; redirects are not"
            " followed: give the relay the URL that takes the POST",
        )
    if status in _WRONG_ENDPOINT:
        raise BrokerUnavailable(
            "missing",
            f"{endpoint} answered {answer} (the endpoint, not a message: check the URL and that"
            " it takes POST)",
        )
    if status >= 500 or status in _NOT_NOW:
        raise BrokerUnavailable("server_error", f"{endpoint} answered {answer}")
    if status in _SENDER_REFUSED:
        raise BrokerUnavailable("refused", f"{endpoint} answered {answer}")
    return answer


def retry_after(response: httpx.Response, now: float) -> float | None:
    """The time.monotonic() before which nothing may be POSTed, from a 429's or 503's
    Retry-After (seconds, or an HTTP date); None when there is none to honour."""
    if response.status_code not in (429, 503):
        return None
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds or seconds <= 0:  # nan, or already past
        return None
    return now + min(seconds, LONGEST_RETRY_AFTER)
