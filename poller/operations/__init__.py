"""The operator façade: every verb an operator's front end runs (the `outbox` command line,
the console in a browser) and the types they read back, in one place. Front ends import this
package, never poller.store or the daemon's internals (an import-linter contract in
pyproject.toml says so), as procrastinate's JobManager serves its CLI, its Django admin and
its worker alike.

The rules live in this package's modules, one topic each: subscriptions (create, read, update,
delete), seeks, skips, parked messages, shard_changes (a change of the shard count),
subscription_status (where subscriptions stand) and shard_views (their shards), pollable
(whether `outbox poll` may deliver one), message_lookup and messages (reading messages),
previews (what an action would change) and confirmed (the actions taken only as previewed),
privileges (what the connected role may do), figures (what the console samples),
read_replica, retention, archives, restores (`outbox rebase`); the refusals they raise in
refusals, the places an operator types in places, the retired-up-to mark's rule in
retired_mark. The SQL lives in poller.store; what the façade returns is its own, made from the
store's rows at this boundary, so the store's types can change for the daemon alone.
"""

from poller.blockers import Blocker
from poller.operations.archives import ArchiveStatus, archives, delete_archive
from poller.operations.confirmed import (
    ChangedSinceShownError,
    SkipTaken,
    purge_as_shown,
    replay_as_shown,
    seek_as_shown,
    skip_as_shown,
)
from poller.operations.figures import (
    Runtime,
    ShardCheckpoint,
    messages_between,
    runtime,
    shard_checkpoints,
)
from poller.operations.message_lookup import delete_publication_messages, find_message
from poller.operations.messages import (
    MAX_LATEST,
    MessageExcerpt,
    ParkedExcerpt,
    latest_messages,
    parked_message_excerpt,
    publications,
    read_messages,
    tail,
)
from poller.operations.parked import (
    ParkedMessage,
    ParkedRow,
    ReplayRequested,
    list_parked,
    parked_message,
    parked_target,
    purge_parked,
    request_replay,
)
from poller.operations.places import parse_place, parse_time
from poller.operations.pollable import NotPollableError, check_pollable
from poller.operations.previews import (
    ParkedPreview,
    SeekPreview,
    SkipPreview,
    parked_count,
    preview_parked,
    preview_seek,
    preview_skip,
)
from poller.operations.privileges import Privileges, privileges
from poller.operations.read_replica import ReadReplica, check_read_server, read_replica
from poller.operations.refusals import (
    NotFoundError,
    RefusedValueError,
    SubscriptionError,
    quoted,
)
from poller.operations.restores import RebaseResult, rebase
from poller.operations.retention import (
    PartitionHolder,
    RetentionHolder,
    RetentionPass,
    partition_holders,
    retention_holders,
    retention_pass,
)
from poller.operations.seeks import seek, seek_to_message, seek_to_time
from poller.operations.shard_changes import ShardChange, change_shard_count
from poller.operations.shard_views import ShardLeader, ShardLeadership, ShardStatus
from poller.operations.skips import PendingSkip, SkipRequested, request_skip, skip_request
from poller.operations.subscription_status import (
    ReadServerStatus,
    SubscriptionStatus,
    read_server,
    shards,
    status,
)
from poller.operations.subscriptions import (
    Subscription,
    create,
    delete,
    get,
    list_all,
    update_settings,
)

# Raised or checked, not returned: front ends catch the store's own errors.
from poller.store.rebase_store import RebaseRefusedError
from poller.store.restore_check import RestoredDatabaseError, ensure_not_restored

__all__ = [
    "MAX_LATEST",
    "ArchiveStatus",
    "Blocker",
    "ChangedSinceShownError",
    "MessageExcerpt",
    "NotFoundError",
    "NotPollableError",
    "ParkedExcerpt",
    "ParkedMessage",
    "ParkedPreview",
    "ParkedRow",
    "PartitionHolder",
    "PendingSkip",
    "Privileges",
    "ReadReplica",
    "ReadServerStatus",
    "RebaseRefusedError",
    "RebaseResult",
    "RefusedValueError",
    "ReplayRequested",
    "RestoredDatabaseError",
    "RetentionHolder",
    "RetentionPass",
    "Runtime",
    "SeekPreview",
    "ShardChange",
    "ShardCheckpoint",
    "ShardLeader",
    "ShardLeadership",
    "ShardStatus",
    "SkipPreview",
    "SkipRequested",
    "SkipTaken",
    "Subscription",
    "SubscriptionError",
    "SubscriptionStatus",
    "archives",
    "change_shard_count",
    "check_pollable",
    "check_read_server",
    "create",
    "delete",
    "delete_archive",
    "delete_publication_messages",
    "ensure_not_restored",
    "find_message",
    "get",
    "latest_messages",
    "list_all",
    "list_parked",
    "messages_between",
    "parked_count",
    "parked_message",
    "parked_message_excerpt",
    "parked_target",
    "parse_place",
    "parse_time",
    "partition_holders",
    "preview_parked",
    "preview_seek",
    "preview_skip",
    "privileges",
    "publications",
    "purge_as_shown",
    "purge_parked",
    "quoted",
    "read_messages",
    "read_replica",
    "read_server",
    "rebase",
    "replay_as_shown",
    "request_replay",
    "request_skip",
    "retention_holders",
    "retention_pass",
    "runtime",
    "seek",
    "seek_as_shown",
    "seek_to_message",
    "seek_to_time",
    "shard_checkpoints",
    "shards",
    "skip_as_shown",
    "skip_request",
    "status",
    "tail",
    "update_settings",
]
