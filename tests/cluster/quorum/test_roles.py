"""Role transitions of one Raft node, driven by real RPCs on the simulated network: votes
and pre-votes, BeginQuorumEpoch and EndQuorumEpoch, fetch validation, DescribeQuorum. Node 3
of a 3-voter quorum is stopped and the test speaks as it, so the other two answer a real
peer's requests."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from cluster.protocol.versions import ApiKey
from cluster.quorum import rpc
from cluster.quorum.quorum_state_store import ElectionState, QuorumStateStore
from cluster.quorum.raft import Role
from cluster.sim.quorum_harness import DATA_DIR, QuorumSim

ME = 3  # the node the test speaks as


def quorum_without_me(seed: int = 1, **properties: str) -> QuorumSim:
    props = {"controller.quorum.election.timeout.ms": "100000", **properties}  # nobody stands on its own
    sim = QuorumSim(3, seed, props)
    sim.kill(ME)
    return sim


def vote(sim: QuorumSim, to: int, epoch: int, last_epoch: int, last_offset: int, pre_vote: bool = False) -> tuple[ErrorCode, bool, int, int]:
    body = sim.call(to, ApiKey.VOTE, rpc.VOTE_VERSION, rpc.vote_request(ME, to, epoch, last_epoch, last_offset, pre_vote))
    answer = rpc.first_partition(body)
    return answer.error_code, answer.vote_granted, answer.leader_epoch, answer.leader_id


def stored(sim: QuorumSim, node_id: int) -> ElectionState:
    return QuorumStateStore(sim._slots[node_id].disk, DATA_DIR).read()


def test_a_vote_is_granted_once_per_epoch_and_is_durable_before_the_answer() -> None:
    sim = quorum_without_me()
    assert sim.node(1).role is Role.UNATTACHED and sim.node(1).epoch == 0
    assert vote(sim, 1, epoch=1, last_epoch=-1, last_offset=0) == (ErrorCode.none, True, 1, -1)
    assert stored(sim, 1) == ElectionState(1, ME, None)
    assert sim.node(1).voted_for == ME
    # the same candidate again: still granted; another candidate in epoch 1 would not be
    assert vote(sim, 1, epoch=1, last_epoch=-1, last_offset=0)[1] is True
    sim.restart(1)  # the vote survives a crash
    assert sim.node(1).voted_for == ME and sim.node(1).epoch == 1


def test_a_vote_for_a_less_fresh_log_is_refused_and_an_older_epoch_is_fenced() -> None:
    sim = quorum_without_me(**{"controller.quorum.election.timeout.ms": "100"})
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    assert leader is not None
    sim.propose(b"x")
    sim.run_for(100)
    voter = next(n for n in (1, 2) if n != leader.node_id)
    epoch = sim.node(voter).epoch
    end = sim.node(voter).log.end_offset
    # older epoch: fenced, told the current epoch and leader
    assert epoch >= 1
    assert vote(sim, voter, epoch=epoch - 1, last_epoch=epoch, last_offset=end)[:3] == (ErrorCode.fenced_leader_epoch, False, epoch)
    # a higher epoch moves the voter there; a shorter log of the same last epoch is refused
    error, granted, answered_epoch, _ = vote(sim, voter, epoch=epoch + 1, last_epoch=epoch, last_offset=end - 1)
    assert (error, granted, answered_epoch) == (ErrorCode.none, False, epoch + 1)
    assert sim.node(voter).role is Role.UNATTACHED and sim.node(voter).voted_for is None
    # a fresh enough log in the next epoch is granted
    assert vote(sim, voter, epoch=epoch + 2, last_epoch=epoch, last_offset=end)[1] is True


def test_a_pre_vote_changes_nothing_and_is_refused_while_the_leader_answers() -> None:
    sim = quorum_without_me(**{"controller.quorum.election.timeout.ms": "100"})
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    assert leader is not None
    follower = next(n for n in (1, 2) if n != leader.node_id)
    sim.run_for(100)
    epoch = sim.node(follower).epoch
    writes = sim._slots[follower].disk.fsync_count
    error, granted, answered_epoch, leader_id = vote(sim, follower, epoch=epoch + 1, last_epoch=epoch, last_offset=100, pre_vote=True)
    assert (error, granted, answered_epoch, leader_id) == (ErrorCode.none, False, epoch, leader.node_id)
    assert sim.node(follower).epoch == epoch and sim.node(follower).role is Role.FOLLOWER
    assert sim._slots[follower].disk.fsync_count == writes  # nothing persisted for a pre-vote
    # the leader itself refuses pre-votes too
    assert vote(sim, leader.node_id, epoch=epoch + 1, last_epoch=epoch, last_offset=100, pre_vote=True)[1] is False


def test_begin_quorum_epoch_makes_a_follower_and_end_quorum_epoch_starts_an_election() -> None:
    sim = quorum_without_me()
    body = sim.call(1, ApiKey.BEGIN_QUORUM_EPOCH, 0, rpc.begin_quorum_epoch_request(ME, 4, 1))
    assert rpc.first_partition(body).error_code == ErrorCode.none
    node = sim.node(1)
    assert (node.role, node.epoch, node.state.leader_id) == (Role.FOLLOWER, 4, ME)
    assert stored(sim, 1) == ElectionState(4, None, ME)
    # an older epoch's leader is fenced
    body = sim.call(1, ApiKey.BEGIN_QUORUM_EPOCH, 0, rpc.begin_quorum_epoch_request(ME, 3, 1))
    assert rpc.first_partition(body).error_code == ErrorCode.fenced_leader_epoch
    # the leader resigns naming node 1 first: node 1 stands at once (and wins with node 2)
    body = sim.call(1, ApiKey.END_QUORUM_EPOCH, 0, rpc.end_quorum_epoch_request(ME, 4, [1, 2]))
    assert rpc.first_partition(body).error_code == ErrorCode.none
    sim.run_until(lambda: sim.node(1).is_leader, 2_000, step_ms=1, what="node 1 leading")
    assert sim.node(1).epoch == 5


def test_the_leader_fences_a_stale_fetch_and_answers_divergence_and_describe_quorum() -> None:
    sim = quorum_without_me(**{"controller.quorum.election.timeout.ms": "100"})
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    assert leader is not None
    for i in range(3):
        sim.propose(f"{i}".encode())
    sim.run_for(100)
    epoch, end = leader.epoch, leader.log.end_offset

    def fetch(current_epoch: int, offset: int, last_epoch: int):  # noqa: ANN202
        body = sim.call(leader.node_id, ApiKey.FETCH, rpc.FETCH_VERSION,
                        rpc.fetch_request(ME, current_epoch, offset, last_epoch, 0, 0, 1 << 20))
        return rpc.fetch_partition(rpc.FETCH_VERSION, body)

    stale = fetch(epoch - 1, 0, -1)
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    assert (stale.current_leader.leader_id, stale.current_leader.leader_epoch) == (leader.node_id, epoch)
    # a log claiming offsets of an epoch the leader never had: told where to cut
    diverged = fetch(epoch, end + 5, epoch - 1 if epoch > 1 else 0)
    assert diverged.error_code == ErrorCode.none and diverged.diverging_epoch.end_offset >= 0
    assert diverged.diverging_epoch.end_offset <= end
    fine = fetch(epoch, 0, -1)
    assert fine.error_code == ErrorCode.none and fine.records and fine.high_watermark == leader.high_watermark
    described = rpc.first_partition(sim.call(leader.node_id, ApiKey.DESCRIBE_QUORUM, 0, rpc.describe_quorum_request()))
    assert (described.error_code, described.leader_id, described.leader_epoch, described.high_watermark) == \
        (ErrorCode.none, leader.node_id, epoch, leader.high_watermark)
    assert {v.replica_id for v in described.current_voters} == {1, 2, 3}
    follower = next(n for n in (1, 2) if n != leader.node_id)
    assert rpc.first_partition(sim.call(follower, ApiKey.DESCRIBE_QUORUM, 0, rpc.describe_quorum_request())).error_code == \
        ErrorCode.not_leader_or_follower


def test_a_brokers_metadata_fetch_is_left_to_the_controller() -> None:
    sim = quorum_without_me()
    from cluster.protocol.codec import decode_request, encode_request

    frame = encode_request(ApiKey.FETCH, rpc.FETCH_VERSION, 1, "broker", rpc.fetch_request(0, -1, 0, -1, 0, 0, 1024))
    request = decode_request(frame[4:], rpc.QUORUM_VERSIONS)
    assert sim.node(1).handle(request, None, lambda _: None) is False  # type: ignore[arg-type]


def test_append_is_refused_off_the_leader() -> None:
    sim = quorum_without_me()
    assert sim.node(1).append([b"x"], lambda *_: None) is None


def test_a_candidate_that_gets_no_votes_pre_votes_again_and_wins_a_later_epoch() -> None:
    sim = QuorumSim(3, seed=5, node_properties={1: {"controller.quorum.election.timeout.ms": "200"},
                                                2: {"controller.quorum.election.timeout.ms": "100000"}})
    sim.kill(ME)
    sim.run_until(lambda: sim.node(1).role is Role.CANDIDATE, 10_000, step_ms=0.05, what="node 1 standing")
    sim.isolate([[1], [2]])  # its Vote request is lost on the way
    sim.run_for(1_000)
    sim.heal()
    sim.run_until(lambda: sim.node(1).is_leader, 10_000, what="node 1 leading")
    roles = [(t.epoch, t.role) for t in sim.node(1).transitions]
    lost = roles.index((1, "candidate"))
    assert roles[lost + 1] == (1, "prospective")  # no majority within the election timeout: pre-vote again
    assert roles[-2:] == [(2, "candidate"), (2, "leader")]  # the epoch rose only once pre-votes said it could win
    assert sim.check() == []
