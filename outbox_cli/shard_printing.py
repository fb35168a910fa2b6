"""How shards read on a terminal: in `status`, `subscription list` and `subscription show`."""

from rich.table import Table

from outbox.positions import readable
from outbox_cli.printing import cell, table
from poller.membership import Layout
from poller.operations import ShardLeadership, ShardStatus


def leadership_text(shards: ShardLeadership) -> str:
    """`3/4 led`: shards a live process leads, of the count; during a change, the draining
    count's too."""
    text = f"{shards.led}/{shards.shard_count} led"
    if shards.draining_shard_count is not None:
        text += f", draining {shards.draining_led}/{shards.draining_shard_count} led"
    return text


def layout_text(layout: Layout) -> str:
    """`4`, or `2 (4 draining up to TX:POS)` during a change from 4 shards to 2."""
    if layout.draining_shard_count is None:
        return str(layout.shard_count)
    assert layout.barrier is not None  # a draining layout has its barrier
    barrier = readable(layout.barrier)
    return f"{layout.shard_count} ({layout.draining_shard_count} draining up to {barrier})"


def shard_table(shards: list[ShardStatus]) -> Table:
    """One line per shard, as outbox.subscription_shard_status has it."""
    shown = table(("shard", "checkpoint", "behind", "leader", "alive"))
    for shard in shards:
        unit = f"{shard.unit.shard}/{shard.unit.shard_count}"
        leader = "-" if shard.leader_host is None else f"{shard.leader_host} pid {shard.leader_pid}"
        shown.add_row(
            cell(f"{unit} draining" if shard.draining else unit),
            cell(readable(shard.checkpoint)),
            cell(shard.messages_behind),
            cell(leader),
            cell("yes" if shard.leader_alive else "no"),
        )
    return shown
