"""The three database roles the outbox migration creates, and how their names are chosen.

Roles belong to the whole cluster, not to one database, so their names are a deployment's
choice: `outbox migrate --role-prefix shop` makes shop_writer, shop_poller and shop_reader.
The migration reads the prefix from the `outbox.role_prefix` setting of its transaction, which
is also how a DBA running sql/schema.sql by hand picks one (PGOPTIONS='-c outbox.role_prefix=shop').
"""

import re
from dataclasses import dataclass

# The prefix when none is given. The migration and sql/schema.sql fall back to the same word
# when the setting is unset (tests/unit/test_roles.py keeps them in step).
DEFAULT_ROLE_PREFIX = "outbox"

# The setting the migration's SQL reads the prefix from (a custom, dotted GUC).
ROLE_PREFIX_SETTING = "outbox.role_prefix"

# PostgreSQL truncates identifiers to 63 bytes; the longest suffix is 7 characters.
_SUFFIX_LENGTH = len("_writer")
_PREFIX = re.compile(rf"[a-z_][a-z0-9_]{{0,{62 - _SUFFIX_LENGTH}}}")


@dataclass(frozen=True)
class RoleNames:
    writer: str
    poller: str
    reader: str


def role_names(prefix: str = DEFAULT_ROLE_PREFIX) -> RoleNames:
    """The roles for `prefix`; a ValueError names a prefix that would not make plain names."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"role prefix {prefix!r} must be lower-case letters, digits and underscores, not"
            f" starting with a digit, at most {63 - _SUFFIX_LENGTH} characters"
        )
    return RoleNames(
        writer=f"{prefix}_writer", poller=f"{prefix}_poller", reader=f"{prefix}_reader"
    )
