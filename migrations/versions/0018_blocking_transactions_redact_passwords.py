"""outbox.blocking_transactions redacts password literals from the start of each session's SQL.

The view shows the start of a blocking session's SQL (`query_start`), and a session in another
database of the cluster may be running `ALTER ROLE ... PASSWORD '...'` (or a conninfo with
password=..., or a URL with a password) when it holds back delivery: the daemon logged it.
The daemon no longer reads it at all; the view, which `outbox status --show-query` and
operators' SQL read, now replaces everything after the word password, and a URL's user-info
password, with ***.

Revision ID: 0018
Revises: 0017
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

VIEW = """
-- Every transaction in the cluster that holds an xid, in any database: each one holds back
-- pg_snapshot_xmin and so every poller. query_start: password literals redacted (0018).
CREATE OR REPLACE VIEW outbox.blocking_transactions AS
SELECT 'session'::text AS kind,
       a.pid,
       a.datname AS database,
       a.usename AS user_name,
       a.application_name,
       a.client_addr::text AS client_address,
       a.state,
       a.xact_start AS transaction_start,
       clock_timestamp() - a.xact_start AS transaction_age,
       {query_start} AS query_start,
       outbox.widen_xid(a.backend_xid) AS transaction_id
FROM pg_stat_activity AS a
WHERE a.backend_xid IS NOT NULL
UNION ALL
SELECT 'prepared transaction',
       NULL,
       p.database,
       p.owner,
       p.gid,
       NULL,
       'prepared',
       p.prepared,
       clock_timestamp() - p.prepared,
       NULL,
       outbox.widen_xid(p.transaction)
FROM pg_prepared_xacts AS p;
"""

REDACTED = (
    r"left(regexp_replace(regexp_replace(a.query, '(password).*$', '\1 ***', 'i'),"
    r" '(://[^\s/@'']*:)[^\s'']*@', '\1***@', 'g'), 200)"
)


def upgrade() -> None:
    op.execute(VIEW.format(query_start=REDACTED))


def downgrade() -> None:
    op.execute(VIEW.format(query_start="left(a.query, 200)"))
