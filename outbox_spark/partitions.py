"""How one batch `(start, end]` is cut into Spark tasks. Pure, no I/O.

Every row of the batch must be read by exactly one task, or a replayed batch would lose or
double rows. Two ways:

- range: consecutive keyset ranges `(after, until]` between split points, so the tasks hold
  about as many rows each (the split points are rows at evenly spaced positions of the
  batch, found by index probes in SQL);
- key: every task scans the whole range and keeps the rows whose partition key hashes to its
  bucket, so all messages of a key land in one task, in (transaction_id, position) order.
  Keyless rows carry no order promise and are spread by position.
"""

import dataclasses
from collections.abc import Sequence
from itertools import pairwise

from pyspark.sql.datasource import InputPartition

from outbox.archive.layout import ArchivedFile
from outbox.positions import Position
from outbox.read_servers import ReadProof


@dataclasses.dataclass(frozen=True)
class Slice:
    """The rows of one task: `(after, until]`, and of those, the ones in `bucket` of `buckets`."""

    after: Position
    until: Position
    bucket: int = 0
    buckets: int = 1

    def __post_init__(self) -> None:
        if not self.after < self.until:
            raise ValueError(f"a slice needs after < until, got ({self.after}, {self.until}]")
        if not 0 <= self.bucket < self.buckets:
            raise ValueError(f"bucket {self.bucket} is not in 0..{self.buckets - 1}")

    @property
    def by_key(self) -> bool:
        return self.buckets > 1


def range_slices(start: Position, end: Position, split_points: Sequence[Position]) -> list[Slice]:
    """Consecutive slices of `(start, end]` cut after each split point.

    Split points must ascend strictly inside `(start, end)`: one outside would leave a gap or
    an overlap, so it is refused rather than clipped.
    """
    if start == end:
        return []
    bounds = [start, *split_points, end]
    for lower, upper in pairwise(bounds):
        if not lower < upper:
            raise ValueError(
                f"split points {[str(p) for p in split_points]} do not ascend strictly"
                f" inside ({start}, {end}]"
            )
    return [Slice(lower, upper) for lower, upper in pairwise(bounds)]


def key_slices(start: Position, end: Position, buckets: int) -> list[Slice]:
    """One slice per hash bucket, each over the whole of `(start, end]`."""
    if start == end:
        return []
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    return [Slice(start, end, bucket, buckets) for bucket in range(buckets)]


class SlicePartition(InputPartition):
    """A task as the driver plans it: its slice (`value`), and what the server it is read
    from must prove first (`proof`; None: it is read from the database itself)."""

    value: Slice

    def __init__(self, part: Slice, proof: ReadProof | None) -> None:
        super().__init__(part)
        self.proof = proof

    @staticmethod
    def of(partition: InputPartition) -> "SlicePartition":
        """The task Spark hands an executor: one of these, never a bare InputPartition (its
        slice would be read without the proof)."""
        if not isinstance(partition, SlicePartition):
            raise TypeError(f"the outbox source plans SlicePartitions, got {partition!r}")
        return partition


@dataclasses.dataclass(frozen=True)
class ArchiveSlice:
    """The rows of one task read from the archive: those of `files` (a slice of a range) in
    `(after, until]`, with the archive at `uri` as the executors reach it."""

    after: Position
    until: Position
    files: tuple[ArchivedFile, ...]
    uri: str
