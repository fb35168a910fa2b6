"""What a term's helpers (its writes, its operator requests, its graceful end) ask of the
term that runs them: LeadershipTerm is the one implementation."""

from typing import Any, Protocol

from poller.subscription import Command, Outcome


class TermControl(Protocol):
    def carry_out(self, commands: list[Command]) -> None:
        """Hand the machine's commands on: deliveries to the consumers, writes to the queue
        whose one task writes them in order."""

    def report(self, outcomes: list[Outcome]) -> None:
        """A run ended: its outcomes, and what it and its queue hand back unstarted."""

    def watch_runs(self, now: float) -> None:
        """Tell the machine what the running runs finished and started, and let time pass."""

    async def renew(self) -> None:
        """A renewal of the lease now, and what it brings applied (raises LeadershipLost)."""

    def restart(self) -> None:
        """End the term gracefully; the worker starts a new one from the stored state."""

    def runtime_written(self, runtime: dict[str, Any]) -> None:
        """A checkpoint wrote these runtime figures: renewals need not write them again."""
