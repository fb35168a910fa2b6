"""A relay's `--to` URL, read once at start: scheme, address, credentials and settings.

Every query parameter must be one its target knows (`outbox_relays/kinds.py` lists them), so a
misspelt `subjet=` is refused at start rather than ignored; a parameter given twice is
refused too. Credentials never leave this object unmasked: `masked`, the URL with its whole
user-info as ***, is what logs, status, errors and metrics labels show. The user-info ends at
the authority's last '@', so a password with an unencoded '/' or '@' is still read (and
masked) as a password, never as a host or a path.
"""

import dataclasses
import urllib.parse

from outbox.database_url import mask_userinfo, userinfo_end


class RelayUrlError(ValueError):
    """The --to URL cannot be relayed to: bad scheme, unknown parameter, bad template."""


@dataclasses.dataclass(frozen=True)
class TargetUrl:
    scheme: str
    host: str
    port: int | None
    username: str | None
    password: str | None = dataclasses.field(repr=False)
    path: str
    """The URL's path as given (`/vhost` for RabbitMQ, `/0` for Redis, `/hook` for HTTP)."""
    parameters: dict[str, str]
    masked: str
    """The URL with its user-info (user and password, or a token) replaced by ***."""
    text: str = dataclasses.field(repr=False)
    """The URL as given, password included: only for the client library's connect call."""

    @classmethod
    def parse(cls, text: str, allowed: frozenset[str]) -> "TargetUrl":
        masked = mask_userinfo(text)
        scheme, separator, rest = text.partition("://")
        at = userinfo_end(rest, 0) if separator else -1
        userinfo, rest = (rest[:at], rest[at + 1 :]) if at >= 0 else ("", rest)
        username, colon, password = userinfo.partition(":")
        try:
            # Parsed without the user-info: what is left holds no secret to quote.
            parts = urllib.parse.urlsplit(f"{scheme}{separator}{rest}")
            port = parts.port
        except ValueError as error:
            raise RelayUrlError(f"--to {masked}: {error}") from None
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        parameters: dict[str, str] = {}
        for name, value in pairs:
            if name not in allowed:
                known = ", ".join(sorted(allowed)) or "none"
                raise RelayUrlError(
                    f"--to {masked}: unknown parameter {name!r} (this target takes: {known})"
                )
            if name in parameters:
                raise RelayUrlError(f"--to {masked}: parameter {name!r} is given twice")
            parameters[name] = value
        if not parts.hostname:
            raise RelayUrlError(f"--to {masked}: no host")
        return cls(
            scheme=parts.scheme.lower(),
            host=parts.hostname,
            port=port,
            username=urllib.parse.unquote(username) if username else None,
            password=urllib.parse.unquote(password) if colon and password else None,
            path=parts.path,
            parameters=parameters,
            masked=masked,
            text=text,
        )

    def required(self, name: str) -> str:
        value = self.parameters.get(name)
        if not value:
            raise RelayUrlError(f"--to {self.masked}: the parameter {name}= is required")
        return value

    def number(self, name: str, default: float, minimum: float, maximum: float) -> float:
        """A numeric parameter within [minimum, maximum], or its default when absent."""
        text = self.parameters.get(name)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not minimum <= value <= maximum:  # nan fails both comparisons
            raise RelayUrlError(
                f"--to {self.masked}: {name}={text!r} must be a number from {_plain(minimum)}"
                f" to {_plain(maximum)}"
            )
        return value

    def whole_number(self, name: str, default: int, minimum: int, maximum: int) -> int:
        value = float(self.number(name, default, minimum, maximum))
        if not value.is_integer():
            raise RelayUrlError(f"--to {self.masked}: {name}={value:g} must be a whole number")
        return int(value)

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        """A parameter that is one of `choices`, or the first of them when absent."""
        value = self.parameters.get(name, choices[0])
        if value not in choices:
            raise RelayUrlError(
                f"--to {self.masked}: {name}={value!r} must be {' or '.join(choices)}"
            )
        return value

    def cloud_events(self) -> bool:
        """format=cloudevents (else format=outbox, the default)."""
        return self.choice("format", ("outbox", "cloudevents")) == "cloudevents"

    def dedup_generation(self) -> int:
        """dedup_generation=N (default 0): part of every de-duplication id, so an operator
        who rebuilds a stream bumps it and the ids published before count as new."""
        return self.whole_number("dedup_generation", 0, 0, 1_000_000_000)

    def address(self, default_port: int) -> str:
        """`scheme://host:port` without credentials, path or query."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port or default_port}"


def _plain(number: float) -> str:
    """2592000, not 2.592e+06: a limit as a user would type it."""
    return str(int(number)) if number == int(number) else str(number)
