"""The relay's envelope fields, without a broker: header values exactly as PostgreSQL stored
them, and names every target can carry."""

import pytest

from outbox_relays import fields


def test_a_non_string_value_goes_as_the_json_text_postgresql_stored() -> None:
    big = "123456789012345678901234567890"
    stored = f'{{"a": 1.10, "b": "x", "c": [1, 2], "d": {{"e": null}}, "f": {big}}}'
    assert fields.header_texts(stored) == [
        ("a", "1.10", True),
        ("b", "x", False),
        ("c", "[1, 2]", True),
        ("d", '{"e": null}', True),
        ("f", big, True),
    ]
    assert fields.header_texts("{}") == []


@pytest.mark.parametrize(
    ("name", "naming", "sent"),
    [
        ("tenant", fields.HTTP_NAMES, "tenant"),
        ("Tenant", fields.HTTP_NAMES, "%54enant"),
        ("Tenant", fields.AMQP_NAMES, "Tenant"),
        ("a b", fields.NATS_NAMES, "a%20b"),
        ("a b", fields.REDIS_NAMES, "a b"),
        ("ü", fields.HTTP_NAMES, "%c3%bc"),
        ("ü", fields.AMQP_NAMES, "ü"),
        ("50%", fields.REDIS_NAMES, "50%25"),
        ("a,b", fields.AMQP_NAMES, "a%2Cb"),
        ("content-length", fields.HTTP_NAMES, "%63ontent-length"),
        ("content-length", fields.NATS_NAMES, "content-length"),
        ("data", fields.REDIS_NAMES, "%64ata"),
        ("outbox-position", fields.REDIS_NAMES, "%6Futbox-position"),
        ("CE-ID", fields.AMQP_NAMES, "%43E-ID"),
        ("x-death", fields.AMQP_NAMES, "%78-death"),
    ],
)
def test_a_name_goes_as_it_is_unless_the_target_would_alter_or_act_on_it(
    name: str, naming: fields.Naming, sent: str
) -> None:
    from tests.unit.daemon.test_handlers import a_message

    message = a_message()
    message._headers_text = f'{{"{name}": "v"}}'
    headers = fields.application_headers(message, naming)
    assert list(headers) == [sent, fields.HEADER_NAMES]
    assert fields.read_application_headers(headers) == {name: "v"}
