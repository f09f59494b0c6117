"""RouteInfoManager: RocketMQ 4.9.7's routing rules, with an injected clock and no sockets."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.namesrv.route_info import (
    DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
    BrokerRemoved,
    RegisterOutcome,
    RemovalReason,
    RouteInfoManager,
)
from tidemq.client.protocol.models import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
)

M, M_HA = "10.0.0.1:10911", "10.0.0.1:10912"
S, S_HA = "10.0.0.2:10911", "10.0.0.2:10912"
B, B_HA = "10.0.0.3:10911", "10.0.0.3:10912"


@dataclass
class Clock:
    now: int = 1_000_000

    def __call__(self) -> int:
        return self.now


@dataclass(eq=False)
class Conn:
    """A stand-in connection: compared by identity, as the manager does."""

    name: str = ""


@dataclass
class World:
    clock: Clock = field(default_factory=Clock)
    routes: RouteInfoManager = field(init=False)

    def __post_init__(self) -> None:
        self.routes = RouteInfoManager(broker_channel_expired_time=1000, clock=self.clock)

    def register(
        self,
        addr: str,
        broker_id: int,
        topics: dict[str, int] | None,
        *,
        name: str = "broker-a",
        cluster: str = "C1",
        ha: str | None = None,
        counter: int = 1,
        conn: Conn | None = None,
        filters: list[str] | None = None,
    ) -> RegisterOutcome:
        wrapper = None
        if topics is not None:
            wrapper = TopicConfigSerializeWrapper(
                {t: TopicConfig(t, q, q) for t, q in topics.items()}, DataVersion(7, counter)
            )
        return self.routes.register_broker(
            cluster_name=cluster,
            broker_addr=addr,
            broker_name=name,
            broker_id=broker_id,
            ha_server_addr=ha or addr.replace("10911", "10912"),
            topic_config_wrapper=wrapper,
            filter_server_list=filters,
            connection=conn if conn is not None else Conn(addr),
        )

    def queues(self, topic: str) -> dict[str, tuple[int, int, int]]:
        route = self.routes.get_route(topic)
        assert route is not None
        return {
            q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm)
            for q in route.queue_datas
        }

    def members(self, name: str = "broker-a") -> dict[int, str]:
        return dict(self.routes.broker_addr_table[name].broker_addrs)


@pytest.fixture
def world() -> World:
    return World()


# --- registration ---------------------------------------------------------------------------


def test_first_master_registration_fills_every_table(world: World) -> None:
    conn = Conn()
    outcome = world.register(M, 0, {"T1": 4, "T2": 8}, conn=conn)
    assert outcome == RegisterOutcome(None, None, new_broker=True, topics_updated=True)
    routes = world.routes
    assert routes.cluster_addr_table == {"C1": {"broker-a"}}
    assert world.members() == {0: M}
    assert routes.broker_addr_table["broker-a"].cluster == "C1"
    live = routes.broker_live_table[M]
    assert (
        live.last_update_timestamp,
        live.data_version,
        live.connection,
        live.ha_server_addr,
    ) == (
        world.clock.now,
        DataVersion(7, 1),
        conn,
        M_HA,
    )
    assert world.queues("T1") == {"broker-a": (4, 4, PERM_READ_WRITE)}
    assert world.queues("T2") == {"broker-a": (8, 8, PERM_READ_WRITE)}


def test_reregistration_with_the_same_version_refreshes_only_liveness(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.clock.now += 500
    # Same data version, different table: RocketMQ trusts the version and keeps the queue data.
    outcome = world.register(M, 0, {"T1": 16})
    assert (outcome.new_broker, outcome.topics_updated) == (False, False)
    assert world.queues("T1") == {"broker-a": (4, 4, PERM_READ_WRITE)}
    assert world.routes.broker_live_table[M].last_update_timestamp == world.clock.now


def test_a_new_data_version_rebuilds_the_queue_data(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    outcome = world.register(M, 0, {"T1": 16, "T3": 1}, counter=2)
    assert outcome.topics_updated
    assert world.queues("T1") == {"broker-a": (16, 16, PERM_READ_WRITE)}
    assert world.queues("T3") == {"broker-a": (1, 1, PERM_READ_WRITE)}


def test_a_shrunk_topic_table_keeps_the_missing_topics_as_in_4_9_7(world: World) -> None:
    world.register(M, 0, {"T1": 4, "Gone": 4})
    world.register(M, 0, {"T1": 4}, counter=2)
    assert world.queues("Gone") == {"broker-a": (4, 4, PERM_READ_WRITE)}


def test_a_shrunk_topic_table_drops_the_missing_topics_with_the_5x_option() -> None:
    world = World()
    world.routes.delete_topic_with_broker_registration = True
    world.register(M, 0, {"T1": 4, "Gone": 4, "Both": 4})
    world.register(B, 0, {"Both": 2}, name="broker-b")
    world.register(M, 0, {"T1": 4}, counter=2)
    assert world.routes.get_route("Gone") is None
    assert world.queues("Both") == {"broker-b": (2, 2, PERM_READ_WRITE)}
    assert world.queues("T1") == {"broker-a": (4, 4, PERM_READ_WRITE)}


def test_only_the_master_provides_queue_data(world: World) -> None:
    outcome = world.register(S, 1, {"SlaveOnly": 2})
    assert outcome == RegisterOutcome(None, None, new_broker=True, topics_updated=False)
    assert world.routes.get_route("SlaveOnly") is None  # broker data, but no queue data
    assert world.members() == {1: S}
    assert world.routes.topic_queue_table == {}


def test_a_slave_learns_its_live_masters_addresses(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    outcome = world.register(S, 1, {"T1": 4})
    assert (outcome.ha_server_addr, outcome.master_addr) == (M_HA, M)
    assert world.members() == {0: M, 1: S}
    world.routes.unregister_broker(
        cluster_name="C1", broker_addr=M, broker_name="broker-a", broker_id=0
    )
    outcome = world.register(S, 1, {"T1": 4})
    assert (outcome.ha_server_addr, outcome.master_addr) == (None, None)


def test_a_slave_promoted_at_the_same_address_keeps_one_entry(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(S, 1, {"T1": 4})
    world.routes.on_connection_destroyed(world.routes.broker_live_table[M].connection)
    outcome = world.register(S, 0, {"T1": 4, "New": 2}, counter=5)
    assert world.members() == {0: S}
    assert outcome.topics_updated  # first registration as id 0
    assert world.queues("New") == {"broker-a": (2, 2, PERM_READ_WRITE)}


def test_a_new_master_address_takes_id_0_and_the_old_one_lingers_only_as_live_entry(
    world: World,
) -> None:
    old = Conn("old")
    world.register(M, 0, {"T1": 4}, conn=old)
    outcome = world.register(B, 0, {"T1": 8}, counter=1)
    assert outcome.topics_updated  # a new address has no version on record
    assert world.members() == {0: B}
    assert world.queues("T1") == {"broker-a": (8, 8, PERM_READ_WRITE)}
    [removed] = world.routes.on_connection_destroyed(old)
    assert (removed.broker_addr, removed.broker_name, removed.group_removed) == (M, None, False)
    assert world.members() == {0: B}


def test_a_registration_without_a_body_has_version_zero_and_no_topics(world: World) -> None:
    outcome = world.register(M, 0, None)
    assert outcome.topics_updated is False
    assert world.routes.query_data_version(M) == DataVersion(0, 0)
    assert world.routes.topic_queue_table == {}


def test_filter_servers_are_kept_replaced_and_cleared(world: World) -> None:
    world.register(M, 0, {"T1": 4}, filters=["10.0.0.9:1"])
    route = world.routes.get_route("T1")
    assert route is not None and route.filter_server_table == {M: ["10.0.0.9:1"]}
    world.register(M, 0, {"T1": 4}, filters=None)  # not sent: unchanged
    assert world.routes.filter_server_table == {M: ["10.0.0.9:1"]}
    world.register(M, 0, {"T1": 4}, filters=[])
    assert world.routes.filter_server_table == {}


def test_data_version_queries_and_touch(world: World) -> None:
    assert world.routes.is_topic_config_changed(M, DataVersion(7, 1))
    world.register(M, 0, {"T1": 4})
    assert not world.routes.is_topic_config_changed(M, DataVersion(7, 1))
    assert world.routes.is_topic_config_changed(M, DataVersion(7, 2))
    assert world.routes.is_topic_config_changed(M, DataVersion(8, 1))
    world.clock.now += 900
    world.routes.touch(M)
    world.routes.touch(B)  # unknown: nothing happens
    assert world.routes.broker_live_table[M].last_update_timestamp == world.clock.now
    assert B not in world.routes.broker_live_table


# --- removal --------------------------------------------------------------------------------


def test_closing_the_masters_connection_keeps_the_group_with_its_slave(world: World) -> None:
    master, slave = Conn("m"), Conn("s")
    world.register(M, 0, {"T1": 4}, conn=master)
    world.register(S, 1, {"T1": 4}, conn=slave)
    [removed] = world.routes.on_connection_destroyed(master)
    assert removed == BrokerRemoved(
        M, "broker-a", "C1", 0, RemovalReason.CONNECTION_CLOSED, False, master
    )
    assert world.members() == {1: S}
    assert world.queues("T1") == {"broker-a": (4, 4, PERM_READ_WRITE)}
    assert M not in world.routes.broker_live_table


def test_closing_the_last_members_connection_drops_group_cluster_and_topics(world: World) -> None:
    conn = Conn()
    world.register(M, 0, {"T1": 4, "Shared": 4}, conn=conn)
    world.register(B, 0, {"Shared": 2}, name="broker-b", cluster="C2")
    [removed] = world.routes.on_connection_destroyed(conn)
    assert removed.group_removed
    routes = world.routes
    assert set(routes.broker_addr_table) == {"broker-b"}
    assert routes.cluster_addr_table == {"C2": {"broker-b"}}
    assert routes.get_route("T1") is None
    assert set(routes.topic_queue_table) == {"Shared"}
    assert world.queues("Shared") == {"broker-b": (2, 2, PERM_READ_WRITE)}


def test_an_unknown_connection_removes_nothing(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    assert world.routes.on_connection_destroyed(Conn("client")) == []
    assert world.members() == {0: M}


def test_every_address_registered_through_a_connection_goes_with_it(world: World) -> None:
    shared = Conn()
    world.register(M, 0, {"T1": 4}, conn=shared)
    world.register(S, 1, {"T1": 4}, conn=shared)
    removed = world.routes.on_connection_destroyed(shared)
    assert [r.broker_addr for r in removed] == [M, S]
    assert removed[-1].group_removed
    assert world.routes.broker_addr_table == {}


def test_a_group_in_two_clusters_leaves_both(world: World) -> None:
    conn = Conn()
    world.register(M, 0, {"T1": 4}, conn=conn, cluster="C1")
    world.register(M, 0, {"T1": 4}, conn=conn, cluster="C2")
    assert world.routes.cluster_addr_table == {"C1": {"broker-a"}, "C2": {"broker-a"}}
    world.routes.on_connection_destroyed(conn)
    assert world.routes.cluster_addr_table == {}


def test_expiry_is_strictly_after_the_expired_time(world: World) -> None:
    conn = Conn()
    world.register(M, 0, {"T1": 4}, conn=conn)
    registered = world.clock.now
    assert world.routes.scan_not_active_brokers(registered + 1000) == []
    [removed] = world.routes.scan_not_active_brokers(registered + 1001)
    assert removed == BrokerRemoved(M, "broker-a", "C1", 0, RemovalReason.expired(1001), True, conn)
    assert world.routes.get_route("T1") is None
    assert world.routes.broker_live_table == {}


def test_expiry_uses_the_clock_and_registration_or_touch_postpones_it(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(S, 1, {"T1": 4})
    world.clock.now += 800
    world.register(M, 0, {"T1": 4})  # M's last sign of life: 800
    world.clock.now += 150
    world.routes.touch(S)  # S's: 950
    world.clock.now += 700  # 1650 since the first registrations, which alone would expire both
    assert world.routes.scan_not_active_brokers() == []
    world.clock.now += 200
    assert [r.broker_addr for r in world.routes.scan_not_active_brokers()] == [M]
    world.clock.now += 200
    assert [r.broker_addr for r in world.routes.scan_not_active_brokers()] == [S]


def test_the_default_expiry_is_rocketmqs_two_minutes() -> None:
    routes = RouteInfoManager(clock=lambda: 0)
    assert routes.broker_channel_expired_time == DEFAULT_BROKER_CHANNEL_EXPIRED_TIME == 120_000


def test_unregister_removes_that_member_and_an_emptied_group(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(S, 1, {"T1": 4}, filters=["f:1"])
    removed = world.routes.unregister_broker(
        cluster_name="C1", broker_addr=S, broker_name="broker-a", broker_id=1
    )
    assert removed is not None and not removed.group_removed
    assert removed.reason == RemovalReason.UNREGISTERED
    assert world.members() == {0: M}
    assert S not in world.routes.broker_live_table and S not in world.routes.filter_server_table
    removed = world.routes.unregister_broker(
        cluster_name="C1", broker_addr=M, broker_name="broker-a", broker_id=0
    )
    assert removed is not None and removed.group_removed
    assert (world.routes.broker_addr_table, world.routes.cluster_addr_table) == ({}, {})
    assert world.routes.topic_queue_table == {}


def test_an_address_in_two_groups_leaves_both_when_it_unregisters(world: World) -> None:
    # A broker restarted under another brokerName at the same address, within the expiry time.
    world.register(M, 0, {"T1": 4}, name="broker-old")
    world.register(M, 0, {"T2": 4})
    removed = world.routes.unregister_broker(
        cluster_name="C1", broker_addr=M, broker_name="broker-a", broker_id=0
    )
    assert removed is not None and removed.group_removed
    assert world.routes.broker_addr_table == {} and world.routes.topic_queue_table == {}


def test_a_late_or_wrong_goodbye_changes_nothing(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(S, 1, {"T1": 4})
    for name, addr, broker_id in [("broker-a", B, 1), ("broker-a", M, 1), ("nope", M, 0)]:
        assert (
            world.routes.unregister_broker(
                cluster_name="C1", broker_addr=addr, broker_name=name, broker_id=broker_id
            )
            is None
        )
    assert world.members() == {0: M, 1: S}
    assert set(world.routes.broker_live_table) == {M, S}


# --- topics and queries ---------------------------------------------------------------------


def test_routes_are_copies(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(S, 1, {"T1": 4})
    route = world.routes.get_route("T1")
    assert route is not None
    route.broker_datas[0].broker_addrs[5] = "x"
    route.queue_datas[0].perm = 0
    assert world.members() == {0: M, 1: S}
    assert world.queues("T1") == {"broker-a": (4, 4, PERM_READ_WRITE)}
    info = world.routes.cluster_info()
    info.broker_addr_table["broker-a"].broker_addrs.clear()
    info.cluster_addr_table["C1"].clear()
    assert world.members() == {0: M, 1: S}
    assert world.routes.cluster_addr_table == {"C1": {"broker-a"}}


def test_a_route_spans_every_group_serving_the_topic(world: World) -> None:
    world.register(M, 0, {"T1": 4})
    world.register(B, 0, {"T1": 2}, name="broker-b", cluster="C2")
    route = world.routes.get_route("T1")
    assert route is not None
    assert {b.broker_name: b.broker_addrs for b in route.broker_datas} == {
        "broker-a": {0: M},
        "broker-b": {0: B},
    }
    assert route.filter_server_table == {}
    assert route.order_topic_conf is None


def test_delete_topic_everywhere_or_on_one_cluster(world: World) -> None:
    world.register(M, 0, {"T1": 4, "T2": 1})
    world.register(B, 0, {"T1": 2}, name="broker-b", cluster="C2")
    assert not world.routes.delete_topic("T1", "nope")
    assert world.routes.delete_topic("T1", "C1")
    assert world.queues("T1") == {"broker-b": (2, 2, PERM_READ_WRITE)}
    assert not world.routes.delete_topic("T1", "C1")
    assert world.routes.delete_topic("T1", "C2")
    assert "T1" not in world.routes.topic_queue_table
    assert world.routes.delete_topic("T2")
    assert not world.routes.delete_topic("T2")
    assert world.routes.topic_queue_table == {}


def test_topic_lists(world: World) -> None:
    world.register(M, 0, {"T1": 4, "Shared": 4})
    world.register(S, 1, {})
    world.register(B, 0, {"Shared": 2, "T3": 1}, name="broker-b", cluster="C2")
    assert set(world.routes.all_topics().topic_list) == {"T1", "Shared", "T3"}
    assert world.routes.all_topics().broker_addr is None
    assert set(world.routes.topics_by_cluster("C1").topic_list) == {"T1", "Shared"}
    assert set(world.routes.topics_by_cluster("C2").topic_list) == {"Shared", "T3"}
    assert world.routes.topics_by_cluster("nope").topic_list == []
    system = world.routes.system_topic_list()
    assert system.topic_list == ["C1", "broker-a", "C2", "broker-b"]
    assert system.broker_addr == M  # the first group's lowest id


def test_topics_by_sys_flag(world: World) -> None:
    wrapper = TopicConfigSerializeWrapper(
        {
            "plain": TopicConfig("plain", 1, 1),
            "unit": TopicConfig("unit", 1, 1, topic_sys_flag=0x1),
            "unitsub": TopicConfig("unitsub", 1, 1, topic_sys_flag=0x2),
            "both": TopicConfig("both", 1, 1, topic_sys_flag=0x3),
        },
        DataVersion(1, 1),
    )
    world.routes.register_broker(
        cluster_name="C1",
        broker_addr=M,
        broker_name="broker-a",
        broker_id=0,
        ha_server_addr=M_HA,
        topic_config_wrapper=wrapper,
        filter_server_list=None,
        connection=Conn(),
    )

    def pick(unit: bool | None, unit_sub: bool | None) -> set[str]:
        return set(world.routes.topics_with_flags(unit=unit, unit_sub=unit_sub).topic_list)

    assert pick(True, None) == {"unit", "both"}
    assert pick(None, True) == {"unitsub", "both"}
    assert pick(False, True) == {"unitsub"}


def test_wipe_and_add_write_permission(world: World) -> None:
    world.register(M, 0, {"T1": 4, "T2": 4})
    world.register(B, 0, {"T1": 2}, name="broker-b")
    assert world.routes.wipe_write_perm("broker-a") == 2
    assert world.queues("T1") == {
        "broker-a": (4, 4, PERM_READ),
        "broker-b": (2, 2, PERM_READ_WRITE),
    }
    assert world.routes.wipe_write_perm("nope") == 0
    assert world.routes.add_write_perm("broker-a") == 2
    assert world.queues("T2") == {"broker-a": (4, 4, PERM_READ | PERM_WRITE)}


# --- invariants under any sequence of events ------------------------------------------------

ADDRS = [M, S, B]
NAMES = ["broker-a", "broker-b"]
CLUSTERS = ["C1", "C2"]
TOPICS = ["T1", "T2", "T3"]

events = st.one_of(
    st.tuples(
        st.just("register"),
        st.sampled_from(ADDRS),
        st.integers(0, 2),
        st.sampled_from(NAMES),
        st.sampled_from(CLUSTERS),
        st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 8), max_size=3),
        st.integers(1, 3),
    ),
    st.tuples(
        st.just("unregister"),
        st.sampled_from(ADDRS),
        st.integers(0, 2),
        st.sampled_from(NAMES),
        st.sampled_from(CLUSTERS),
    ),
    st.tuples(st.just("close"), st.sampled_from(ADDRS)),
    st.tuples(st.just("advance"), st.integers(0, 1500)),
    st.tuples(st.just("delete"), st.sampled_from(TOPICS), st.sampled_from([None, *CLUSTERS])),
)


def apply(world: World, conns: dict[str, Conn], event: tuple[object, ...]) -> None:
    kind = event[0]
    if kind == "register":
        _, addr, broker_id, name, cluster, topics, counter = event
        assert isinstance(addr, str) and isinstance(topics, dict)
        world.register(
            addr,
            int(str(broker_id)),
            topics,
            name=str(name),
            cluster=str(cluster),
            counter=int(str(counter)),
            conn=conns.setdefault(addr, Conn(addr)),
        )
    elif kind == "unregister":
        _, addr, broker_id, name, cluster = event
        world.routes.unregister_broker(
            cluster_name=str(cluster),
            broker_addr=str(addr),
            broker_name=str(name),
            broker_id=int(str(broker_id)),
        )
    elif kind == "close":
        conn = conns.pop(str(event[1]), None)
        if conn is not None:
            world.routes.on_connection_destroyed(conn)
    elif kind == "advance":
        world.clock.now += int(str(event[1]))
        world.routes.scan_not_active_brokers()
    else:
        cluster = event[2]
        world.routes.delete_topic(str(event[1]), None if cluster is None else str(cluster))


def check_invariants(routes: RouteInfoManager) -> None:
    # No empty containers, no dangling names, no address without a live entry (which could never
    # expire), and an address serves one id per group.
    for name, broker_data in routes.broker_addr_table.items():
        assert broker_data.broker_addrs, name
        assert len(set(broker_data.broker_addrs.values())) == len(broker_data.broker_addrs)
        for addr in broker_data.broker_addrs.values():
            assert addr in routes.broker_live_table
    for cluster, names in routes.cluster_addr_table.items():
        assert names, cluster
        assert names <= routes.broker_addr_table.keys()
    for topic, queues in routes.topic_queue_table.items():
        assert queues, topic
        assert queues.keys() <= routes.broker_addr_table.keys()
        assert routes.get_route(topic) is not None
    named = set().union(*routes.cluster_addr_table.values()) if routes.cluster_addr_table else set()
    assert routes.broker_addr_table.keys() <= named


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=40))
def test_tables_stay_consistent_under_any_events(sequence: list[tuple[object, ...]]) -> None:
    world = World()
    conns: dict[str, Conn] = {}
    for event in sequence:
        apply(world, conns, event)
        check_invariants(world.routes)
    # Closing every connection and letting time pass empties every table.
    for conn in list(conns.values()):
        world.routes.on_connection_destroyed(conn)
    world.clock.now += 10_000
    world.routes.scan_not_active_brokers()
    routes = world.routes
    assert routes.broker_addr_table == {} and routes.cluster_addr_table == {}
    assert routes.topic_queue_table == {} and routes.broker_live_table == {}


# --- incremental and split registrations (tidemq) ------------------------------------------


def _increment(
    world: World,
    base: DataVersion,
    topics: dict[str, int],
    counter: int,
    deleted: tuple[str, ...] = (),
) -> RegisterOutcome:
    return world.routes.register_increment(
        cluster_name="C1",
        broker_addr=M,
        broker_name="broker-a",
        broker_id=0,
        ha_server_addr=M_HA,
        base_version=base,
        topic_config_wrapper=TopicConfigSerializeWrapper(
            {t: TopicConfig(t, q, q) for t, q in topics.items()}, DataVersion(7, counter)
        ),
        deleted_topics=deleted,
        connection=Conn(),
    )


def test_an_increment_on_the_held_version_applies_only_its_topics() -> None:
    world = World()
    world.register(M, 0, {"A": 4, "B": 4}, counter=1)
    world.clock.now += 900
    outcome = _increment(world, DataVersion(7, 1), {"C": 2}, counter=2, deleted=("A",))
    assert outcome.topics_updated and not outcome.full_registration_needed
    assert world.routes.get_route("A") is None
    assert world.routes.get_route("B") is not None and world.routes.get_route("C") is not None
    assert world.routes.query_data_version(M) == DataVersion(7, 2)
    world.clock.now += 900  # 1800 after the full one: alive thanks to the increment
    assert not world.routes.scan_not_active_brokers()
    # A heartbeat: nothing changed, the version stays, the broker stays alive.
    assert not _increment(world, DataVersion(7, 2), {}, counter=2).topics_updated


def test_an_increment_on_another_version_asks_for_a_full_registration() -> None:
    world = World()
    assert _increment(world, DataVersion(7, 1), {"C": 2}, counter=2).full_registration_needed
    assert world.routes.get_route("C") is None and world.routes.query_data_version(M) is None
    world.register(M, 0, {"A": 4}, counter=1)
    missed = _increment(world, DataVersion(7, 5), {"C": 2}, counter=6)
    assert missed.full_registration_needed and world.routes.get_route("C") is None


def test_a_split_registration_holds_its_version_only_after_the_last_part() -> None:
    world = World()
    world.routes.delete_topic_with_broker_registration = True
    world.register(M, 0, {"Old": 1}, counter=1)
    parts = [{"A": 1, "B": 1}, {"C": 1}, {"D": 1}]
    for index, part in enumerate(parts):
        world.routes.register_broker(
            cluster_name="C1",
            broker_addr=M,
            broker_name="broker-a",
            broker_id=0,
            ha_server_addr=M_HA,
            topic_config_wrapper=TopicConfigSerializeWrapper(
                {t: TopicConfig(t, q, q) for t, q in part.items()}, DataVersion(7, 9)
            ),
            filter_server_list=None,
            connection=Conn(),
            split=(index, len(parts)),
        )
        if index < len(parts) - 1:
            # Not the broker's version yet: an increment now would miss parts.
            assert world.routes.query_data_version(M) != DataVersion(7, 9)
            assert _increment(world, DataVersion(7, 9), {}, 10).full_registration_needed
    assert world.routes.query_data_version(M) == DataVersion(7, 9)
    assert {t for t in "ABCD" if world.routes.get_route(t)} == set("ABCD")
    assert world.routes.get_route("Old") is None  # not in the whole table the parts made


def test_topics_of_equal_queue_data_share_one_value_never_changed_in_place(world: World) -> None:
    world.register(M, 0, {f"T{i}": 4 for i in range(1000)} | {"Eight": 8})
    world.register(B, 0, {"T1": 4}, name="broker-b")
    values = {id(queues["broker-a"]) for queues in world.routes.topic_queue_table.values()}
    assert len(values) == 2  # 4 queues and 8 queues: two objects for 1,001 topics
    shared = world.routes.topic_queue_table["T0"]["broker-a"]
    route = world.routes.get_route("T0")
    assert route is not None
    route.queue_datas[0].perm = 0  # a route is a copy
    assert world.routes.wipe_write_perm("broker-a") == 1001
    assert shared.perm == PERM_READ_WRITE  # replaced, not changed: a value held elsewhere stays
    assert world.queues("T1") == {
        "broker-a": (4, 4, PERM_READ),
        "broker-b": (4, 4, PERM_READ_WRITE),
    }
    assert world.queues("Eight") == {"broker-a": (8, 8, PERM_READ)}
    world.register(M, 0, {"T0": 4, "T1": 2}, counter=2)
    assert world.queues("T0") == {"broker-a": (4, 4, PERM_READ_WRITE)}
    assert world.queues("T1") == {"broker-a": (2, 2, PERM_READ_WRITE), "broker-b": (4, 4, 6)}


def test_topics_read_as_rows_share_one_mapping_that_no_change_alters(world: World) -> None:
    """Topics registered as `topic_queue_rows` (a name server's reading of a brokers'-shape
    body): one {brokerName: QueueData} for all that one group serves with equal counts; every
    change to one topic (another group, a deletion on a cluster, a group leaving, a perm
    change) gives that topic a new mapping and leaves the shared one as it was."""
    names = [f"T{i}" for i in range(1000)]

    def register(
        addr: str, name: str, cluster: str, topics: list[str], q: int, counter: int = 1
    ) -> None:
        world.routes.register_broker(
            cluster_name=cluster,
            broker_addr=addr,
            broker_name=name,
            broker_id=0,
            ha_server_addr=addr,
            topic_config_wrapper=TopicConfigSerializeWrapper({}, DataVersion(7, counter)),
            filter_server_list=None,
            connection=Conn(addr),
            topic_queue_rows=[((q, q, PERM_READ_WRITE, 0), topics)],
        )

    register(M, "broker-a", "C1", names, 8)
    table = world.routes.topic_queue_table
    shared = table["T0"]
    assert all(table[name] is shared for name in names)
    assert dict(shared) == {"broker-a": shared["broker-a"]}
    register(B, "broker-b", "C2", ["T1", "T2"], 4)
    assert world.queues("T1") == {"broker-a": (8, 8, 6), "broker-b": (4, 4, 6)}
    assert world.routes.delete_topic("T2", "C2")
    assert not world.routes.delete_topic("T3", "C2")  # not on that cluster: nothing removed
    assert world.queues("T2") == {"broker-a": (8, 8, 6)}
    assert world.routes.wipe_write_perm("broker-a") == 1000
    wiped = table["T0"]
    # those that shared a mapping share its replacement (T1 and T2 got their own above)
    assert wiped is not shared
    assert all(table[name] is wiped for name in names if name not in ("T1", "T2"))
    assert world.queues("T1") == {"broker-a": (8, 8, PERM_READ), "broker-b": (4, 4, 6)}
    assert world.routes.unregister_broker(
        cluster_name="C2", broker_addr=B, broker_name="broker-b", broker_id=0
    )
    assert world.queues("T1") == {"broker-a": (8, 8, PERM_READ)}
    register(M, "broker-a", "C1", ["T5"], 2, counter=2)  # one topic's counts changed
    assert world.queues("T5") == {"broker-a": (2, 2, PERM_READ_WRITE)}
    assert world.queues("T6") == {"broker-a": (8, 8, PERM_READ)}
    assert dict(shared) == {"broker-a": shared["broker-a"]}  # never changed in place
    assert shared["broker-a"].perm == PERM_READ_WRITE
    assert world.routes.delete_topic("T7")
    assert world.routes.get_route("T7") is None and world.routes.get_route("T8") is not None
    assert world.routes.delete_topic("T9", "C1")  # a topic of a shared mapping, on its cluster
    assert world.routes.get_route("T9") is None
    assert world.queues("T8") == {"broker-a": (8, 8, PERM_READ)}
    # a group whose topics share one mapping leaves: every one of them goes, none left empty
    register(S, "broker-c", "C3", ["X0", "X1", "X2", "T8"], 3)
    assert world.routes.unregister_broker(
        cluster_name="C3", broker_addr=S, broker_name="broker-c", broker_id=0
    )
    assert not {"X0", "X1", "X2"} & table.keys()
    assert world.queues("T8") == {"broker-a": (8, 8, PERM_READ)}
