"""The subscription decision core: a pure state machine the poller daemon drives.

A subscription (consumer group) reads the outbox in Position order, (transaction_id,
position) compared as a tuple. The daemon feeds `SubscriptionMachine` events and carries out
the commands it returns; every decision lives here: which consumer gets which message, what
is in flight, retries and backoff, parking, per-key draining, where the checkpoint may move,
what a seek or a consumer change does. No I/O, no clock (`now` is passed in), no randomness.

Types: `Envelope(position, partition_key, payload)` in, with `Position` the reader's own
outbox.positions.Position (re-exported), so rows pass through unconverted;
`SubscriptionSettings` (with `from_mapping`/`to_mapping` for the stored JSON; every default,
description, unit and bound in `SETTINGS`, one `SettingSpec` per field, for CLI help and the
README); commands out: `Deliver`, `Park`, `ReplayDone`, `WriteCheckpoint`, each carrying the
epoch it was issued in. Modules: settings, envelope, commands,
tracking (message and delivery records), ledger (checkpoint), checkpoint_batching, consumer_pool
(capacity; round-robin and dispatch-to-single picks), key_queues (pinned), retry_timer,
timeouts (deadlines and overrunning calls), strict_order (one slot's walk), message_flow
(the steps every event shares: outcomes, retries, dispatch), machine (the events).

Semantics chosen:
- epochs on writes: WriteCheckpoint, Park and ReplayDone carry the epoch they were issued in,
  and checkpoint_written/parked take it back. The store refuses a WriteCheckpoint whose
  epoch is not its own (one queued before a seek and stamped with the new epoch when it ran
  raised the checkpoint back above the seek target, and those messages were lost); a
  confirmation from an older epoch is ignored. A seek always emits WriteCheckpoint(to).
- checkpoint writes: batched as KurrentDB does (min_checkpoint_count finished and
  checkpoint_after seconds, or max_checkpoint_count at once), and also written once no
  message has finished for checkpoint_after seconds, so an idle subscription never stays
  behind until shutdown.
- checkpoint: the greatest read position with every message at or below it finished
  (acked, skipped by the handler or an admin, or parked durably). A message buffered,
  passed over by a strategy, in flight, backing off or waiting for its parked row is
  unfinished. It only moves back on seek. After a crash, a machine built from the stored
  checkpoint re-reads every unfinished message.
- late and stale outcomes: each delivery has its own id (unique within one machine; one
  rebuilt after a crash may continue the numbering with `first_delivery_id`). An outcome
  for a delivery that already ended (timed out, or failed by a crash around its handler) or
  that no longer counts (its epoch was sought away, or an admin skipped its message) frees
  its consumer and key, and nothing else: it never finishes the message nor moves the
  checkpoint.
- pinned: a key's owner is crc32(key) % consumers. At most one delivery per key is in
  flight anywhere, of any epoch; a key's stream messages go in Position order and a head
  backing off or parking blocks the key. A message whose owner is full stays buffered while
  other keys go past it. Keyless messages go round-robin.
- consumer changes recompute owners; a key in flight keeps its delivery, so the new owner
  gets nothing of the key until that delivery is acked, failed or timed out. Never a
  checkpoint move, a seek or an admin skip releases it (Pulsar #25627).
- consumer_count_changed: deliveries on removed consumers run on and their acks count.
- seek: drops the epoch's buffered, backing-off and parking messages; reads and outcomes of
  the old epoch are ignored (Pulsar PIP-84); a WriteCheckpoint(to) is emitted at once.
- started/withdrawn: message_timeout runs from `started` (the handler call began, n times
  it for a call of n deliveries), not from Deliver: a delivery waiting for a thread never
  times out. An outcome is judged by its `ended_at` (when the call returned), before the
  deadlines due fire. A call past its deadline fails its message there but keeps its
  consumer (one whole slot) and key until its outcome comes: `overran(delivery_id)`. A
  delivery the daemon drops before its handler starts is `withdrawn`: not an attempt; its
  consumer and key are freed and its message, if still current, is queued again ahead of
  the others.
- strict order: with one consumer and max_in_flight 1 (the live count; not pinned), the
  stream goes in Position order: a message in flight, backing off or parking holds back
  every later one until it is finished.
- admin_skip_to(to): every unfinished stream message at or before `to` is finished
  without (another) delivery, as admin_skip does one; unread ones are never delivered
  (reading resumes after `to`). The epoch stays, so messages after `to` are untouched (a
  forward seek would drop and re-deliver them). A skipped delivery in flight keeps its
  consumer and key until it ends (Pulsar #25627).
- replay: a position whose replay is unfinished (queued, in flight, backing off or parking)
  is not queued again, so the daemon needs no set of its own.
- replay: parked messages are delivered before the stream, never touch the checkpoint, and
  on ack or handler skip yield ReplayDone (delete the parked row); exhausting their retries
  parks them again. Under pinned they go to the key's owner when the key is out of flight,
  ahead of the key's stream, but are not held back by a stream head that is backing off.
- max_retry_count counts attempts, the first included; backoff is
  retry_backoff_initial * 2**(attempt-1) capped at retry_backoff_max, without jitter.

Driving it from a daemon:

    machine = SubscriptionMachine(settings, now=clock(), start=stored_checkpoint)
    while running:
        commands = []
        if want := min(machine.read_wanted(), settings.read_batch_size):
            epoch, after = machine.epoch, machine.next_read_position  # before the query
            rows = read_rows_after(after, want)  # a seek meanwhile makes this read stale
            commands += machine.messages_read(rows, epoch, clock())
        for event in pending_events():  # handler outcomes, parked rows and checkpoints
            commands += event.apply_to(machine, clock())  # stored, seeks, consumer changes
        commands += machine.tick(clock())
        for command in commands:  # in order; Park and WriteCheckpoint are reported back
            execute(command)  # through parked(position, epoch) and checkpoint_written(...)
        # outcomes go back a run at a time through machine.finished(outcomes, now), the
        # handler calls still running through machine.started([[id, ...], ...], now)
    execute(machine.final_checkpoint())
"""

from outbox.positions import START, Position
from poller.subscription.commands import Command, Deliver, Park, ReplayDone, WriteCheckpoint
from poller.subscription.delivery_outcomes import Outcome, OutcomeKind
from poller.subscription.envelope import Envelope
from poller.subscription.key_queues import owner_of
from poller.subscription.machine import SubscriptionMachine
from poller.subscription.settings import (
    SETTINGS,
    SETTINGS_BY_NAME,
    SettingSpec,
    Strategy,
    SubscriptionSettings,
)

__all__ = [
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "START",
    "Command",
    "Deliver",
    "Envelope",
    "Outcome",
    "OutcomeKind",
    "Park",
    "Position",
    "ReplayDone",
    "SettingSpec",
    "Strategy",
    "SubscriptionMachine",
    "SubscriptionSettings",
    "WriteCheckpoint",
    "owner_of",
]
