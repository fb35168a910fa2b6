"""What a Redis server must keep for the relay's exactly-once promise, checked at connect.

The relay's de-duplication lives in marker keys beside the streams: Redis confirms an entry
and its marker in memory, so both outlive a crash only with the append-only file, and both
outlive memory pressure only when Redis refuses writes rather than evicting (markers carry an
expiry, so every `volatile-*` policy evicts them first: a retry then adds the entry twice).
"""

import logging

log = logging.getLogger(__name__)

SHORTEST_SAFE_DEDUP_WINDOW = 60 * 60.0
"""A dedup_window below this is warned about: shorter than an outage plus restart that an
operator should plan for."""

SETTINGS = ("appendonly", "appendfsync", "maxmemory-policy")


def window_warning(window: float) -> str | None:
    if window >= SHORTEST_SAFE_DEDUP_WINDOW:
        return None
    return (
        f"dedup_window={window:g} s: a batch published again after an outage plus restart"
        f" longer than that is added twice (the default is 86400 s; {SHORTEST_SAFE_DEDUP_WINDOW:g}"
        " s is the least the relay takes without a warning)"
    )


def durability_warnings(config: dict[str, str]) -> list[str]:
    """Why the server's settings (CONFIG GET of SETTINGS) cannot keep the promise."""
    warnings = []
    if config.get("appendonly") == "no":
        warnings.append(
            "Redis runs without its append-only file (appendonly no): a crash loses the entries"
            " and markers it confirmed since its last snapshot; set appendonly yes"
        )
    elif config.get("appendfsync") == "no":
        warnings.append(
            "Redis leaves fsync to the OS (appendfsync no): a machine crash loses up to ~30 s"
            " of confirmed entries; set appendfsync everysec (up to 1 s) or always"
        )
    policy = config.get("maxmemory-policy", "noeviction")
    if policy.startswith("volatile-"):
        warnings.append(
            f"maxmemory-policy {policy}: under memory pressure Redis evicts the relay's markers"
            " first (they expire), and a batch published again is then added twice; set"
            " noeviction"
        )
    elif policy.startswith("allkeys-"):
        warnings.append(
            f"maxmemory-policy {policy}: under memory pressure Redis evicts stream entries and"
            " markers, confirmed messages included; set noeviction"
        )
    return warnings


def log_durability(config: dict[str, str] | None, refusal: str) -> None:
    """Say what the settings risk; when CONFIG was refused (a managed Redis), say only what
    the promise assumes."""
    if config is None:
        log.info(
            "relay: cannot read Redis' persistence settings (CONFIG GET: %s); exactly once"
            " assumes appendonly yes, appendfsync everysec or always, maxmemory-policy"
            " noeviction",
            refusal,
        )
        return
    for warning in durability_warnings(config):
        log.warning("relay to Redis: %s", warning)
