"""How the live processes share a subscription's shards (poller.membership.assign)."""

from hypothesis import given
from hypothesis import strategies as st

from outbox.positions import Position
from poller.membership import Layout, Member, ShardUnit, assign

NOW = 1_000.0


def members(*names: str, expires_at: float = NOW + 3) -> list[Member]:
    return [Member(name, expires_at) for name in names]


def test_a_plain_subscription_is_competed_for_by_every_live_member() -> None:
    shares = assign(Layout(1), members("a", "b"), NOW)
    assert shares == {"a": [ShardUnit(1, 0)], "b": [ShardUnit(1, 0)]}


def test_twelve_shards_over_three_members_are_four_each() -> None:
    shares = assign(Layout(12), members("c", "a", "b"), NOW)
    assert sorted(len(units) for units in shares.values()) == [4, 4, 4]
    assert sorted(u for units in shares.values() for u in units) == Layout(12).units()


def test_an_expired_member_gets_nothing_and_its_shards_go_to_the_others() -> None:
    group = [*members("a", "b"), Member("dead", NOW - 0.1)]
    shares = assign(Layout(4), group, NOW)
    assert set(shares) == {"a", "b"}
    assert sum(len(units) for units in shares.values()) == 4


def test_during_a_change_both_layouts_are_dealt_out() -> None:
    layout = Layout(3, draining_shard_count=2, barrier=Position(10, 5))
    shares = assign(layout, members("a", "b"), NOW)
    dealt = sorted(u for units in shares.values() for u in units)
    assert dealt == sorted([ShardUnit(2, 0), ShardUnit(2, 1), *(ShardUnit(3, s) for s in range(3))])
    assert layout.draining(ShardUnit(2, 1))
    assert not layout.draining(ShardUnit(3, 1))
    assert layout.waits_for_barrier(ShardUnit(3, 0))
    assert not layout.waits_for_barrier(ShardUnit(2, 0))


names = st.lists(st.text(alphabet="abcdef0123456789", min_size=1, max_size=6), unique=True)


@given(
    shard_count=st.integers(2, 256),
    draining=st.one_of(st.none(), st.integers(1, 256)),
    live=names.filter(bool),
    dead=names,
    order=st.randoms(),
)
def test_every_shard_has_one_leader_balanced_and_the_result_depends_only_on_who_is_live(
    shard_count: int, draining: int | None, live: list[str], dead: list[str], order: object
) -> None:
    if draining == shard_count:
        draining = None
    layout = Layout(shard_count, draining, None if draining is None else Position(1, 1))
    group = members(*live) + [Member(name, NOW) for name in dead if name not in live]
    shares = assign(layout, group, NOW)
    dealt = [unit for units in shares.values() for unit in units]
    assert sorted(dealt) == sorted(layout.units())  # each shard exactly once
    sizes = [len(units) for units in shares.values()]
    assert set(shares) == set(live)
    assert max(sizes) - min(sizes) <= 1
    shuffled = list(group)
    order.shuffle(shuffled)  # type: ignore[attr-defined]
    # Later renewals (new expiry times, another order): nothing moves.
    renewed = [Member(m.member, m.expires_at + 5 if m.member in live else NOW) for m in shuffled]
    assert assign(layout, renewed, NOW + 1) == shares


def test_a_layout_has_exactly_the_shards_it_deals() -> None:
    layout = Layout(3, draining_shard_count=2, barrier=Position(10, 5))
    candidates = [ShardUnit(count, shard) for count in range(1, 5) for shard in range(5)]
    assert [u for u in candidates if layout.has(u)] == sorted(layout.units())
    assert Layout(1).has(ShardUnit(1, 0))
    assert not Layout(1).has(ShardUnit(2, 0))
