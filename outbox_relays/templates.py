"""Subject, stream, exchange and routing-key templates over a message's own fields."""

import string

from poller.message import Message

FIELDS = ("publication", "message_type", "partition_key")


class TemplateError(ValueError):
    """A template names a field that does not exist, or is not a template at all."""


class Template:
    """`orders.{message_type}`: each `{field}` is one of FIELDS; a keyless message's
    `{partition_key}` is empty. Checked when the relay starts, so a typo never reaches a
    broker."""

    __slots__ = ("_literal", "text")

    def __init__(self, parameter: str, text: str) -> None:
        self.text = text
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as error:
            raise TemplateError(f"{parameter}={text!r} is not a valid template: {error}") from None
        for _, field, spec, conversion in parts:
            if field is None:
                continue
            if field not in FIELDS:
                raise TemplateError(
                    f"{parameter}={text!r} names {{{field}}}; a template may name only"
                    f" {', '.join('{' + name + '}' for name in FIELDS)}"
                )
            if spec or conversion:
                raise TemplateError(
                    f"{parameter}={text!r}: {{{field}}} takes no format spec or conversion"
                )
        # A template without fields renders the same for every message: computed once.
        fixed = all(field is None for _, field, _, _ in parts)
        self._literal = text.format() if fixed else None

    def render(self, message: Message) -> str:
        if self._literal is not None:
            return self._literal
        return self.text.format(
            publication=message.publication,
            message_type=message.message_type,
            partition_key=message.partition_key or "",
        )

    def __repr__(self) -> str:
        return f"Template({self.text!r})"
