"""How the SIGSTOP row finds the metadata (Raft) leader: from the nodes' logs,
which are the only place a Liftbridge v1.9.0 cluster names it."""

from __future__ import annotations

from pathlib import Path

import liftbridge
from chaos.rows import leads_metadata, metadata_leader, move_metadata_leader
from liftbridge.testing import LocalCluster

_START = "=== liftbridge.testing: starting /bin/liftbridge --config x.yaml\n"
_BECAME = 'time="t" level=info msg="Server became metadata leader, performing leader promotion"\n'
_LOST = 'time="t" level=warning msg="Server lost metadata leadership, performing stepdown"\n'
_OTHER = 'time="t" level=info msg="fsm: Created partition [stream=s, partition=0]"\n'


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "liftbridge.log"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_a_node_leads_from_becoming_leader_until_it_loses_it_or_restarts(
    tmp_path: Path,
) -> None:
    assert leads_metadata(_log(tmp_path, _START, _OTHER, _BECAME, _OTHER))
    assert not leads_metadata(_log(tmp_path, _START, _OTHER))
    assert not leads_metadata(_log(tmp_path, _START, _BECAME, _LOST))
    assert leads_metadata(_log(tmp_path, _START, _BECAME, _LOST, _BECAME))
    # A restart appends to the log: leadership from the previous run is gone.
    assert not leads_metadata(_log(tmp_path, _START, _BECAME, _START, _OTHER))


def test_the_metadata_leader_of_a_real_cluster_is_found_and_moved() -> None:
    # A cluster of its own: the module-scoped one is shared, and this restarts a node.
    with LocalCluster(3) as cluster:
        leader = metadata_leader(cluster)
        assert leader in {"a", "b", "c"}
        follower = next(n.server_id for n in cluster.nodes if n.server_id != leader)
        assert not move_metadata_leader(cluster, follower)  # nothing to move
        assert move_metadata_leader(cluster, leader)
        after = metadata_leader(cluster)
        assert after in {"a", "b", "c"}
        assert after != leader
        # The cluster still answers, with the restarted node listed.
        with liftbridge.Client(cluster.addresses, rpc_timeout=5.0) as client:
            assert leader in {b.id for b in client.metadata.brokers}
