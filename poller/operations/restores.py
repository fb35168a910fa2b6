"""`outbox rebase`: after a restore into another cluster, renumbering the stored transaction
ids so delivery resumes (the rewrite and its refusals in poller.store.rebase_store)."""

from dataclasses import dataclass
from typing import Any

import psycopg

from poller.store import rebase_store


@dataclass(frozen=True)
class RebaseResult:
    restored_ids: int
    written_here_ids: int
    messages_rewritten: int
    first_id: int
    advanced_by: int


def rebase(conn: psycopg.Connection[Any]) -> RebaseResult | None:
    """Rebase the outbox on `conn` (an autocommit connection); None when no stored id is
    ahead of the cluster, which leaves everything as it was. Raises RebaseRefusedError, having
    changed nothing, when it cannot."""
    done = rebase_store.rebase(conn)
    if done is None:
        return None
    return RebaseResult(
        done.restored_ids,
        done.written_here_ids,
        done.messages_rewritten,
        done.first_id,
        done.advanced_by,
    )
