"""The hunt that exposes each unsafe switch the simulation can show: its fault kinds, the
run's shape and the cluster and client settings (the README's fault mixes, on short
simulated runs so that each example costs a few wall seconds). bench/bench_hunt.py times
them; tests/harness/test_hunt.py runs them (truncation to the HWM in CI, the others soak).

Not in SWITCH_HUNTS, and why: `unclean.leader.election.enable=true`, `min.insync.replicas=1`,
`eligible.leader.replicas.version=0` (with unflushed crashes) and `log.crash.lose.unflushed=true`
(min ISR brokers crashing at once) lose data Kafka documents as possible, so the claims allow
it and their runs are valid (a hunt stops only at an invalid verdict): they are in FIND_HUNTS
below, hunted with `--find`.

The three transaction switches are hunted on the simulated transactional workloads, whose
transactional producer is workloads/clients/kio_txn_producer.py (librdkafka's transaction
manager on our protocol layer; aiokafka 0.14's could show neither of the last two):
`transaction.lso.ignore.open.transactions` needs no fault; `transaction.partition.verification.enable=false`
needs a Produce that reaches its partition after its transaction was aborted with the epoch
still current, which a client's timed-out Produce does when link faults hold it up between
the client and the leader but not the abort's EndTxn (the producer then aborts, and bumps its
epoch, without waiting for it, as librdkafka does): its hunt draws the live link target
client>primary (`--live-links`); `transaction.offset.commit.skip.generation.check=true`
needs a copier that lost its partitions and still commits its offsets, which the eos
workload's stalled copies are (`stall_p`: past max.poll.interval.ms, with TxnOffsetCommit v3
carrying the generation the copy was polled in).

The metadata quorum's switches run on three controllers with faults on the controllers
(`--nemesis-option node_kinds=controller`, logquake.strategies): the vote switch, and the
Figure 8 one (commit by count), which needs the chasing partition raft-leaders.
"""

from __future__ import annotations

from pathlib import Path

# The Figure 8 hunt's base schedule (`logquake hunt --base-schedule`): a 100-ms delay on all
# six controller links for the whole main phase, kept in every example.
FIGURE_8_BASE = str(Path(__file__).with_name("hunt_base_figure8.json"))

SWITCH_HUNTS: dict[str, list[str]] = {
    "replica.truncate.to.high.watermark": [
        "--nemesis", "kill,partition", "--time-limit", "8", "--final-time-limit", "5", "--quiet-period", "1",
        "--rate", "50", "--concurrency", "3", "--max-faults", "3",
        "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000",
        "--cluster-config", "replica.truncate.to.high.watermark=true"],
    "fetch.read.past.high.watermark": [
        "--nemesis", "partition", "--time-limit", "8", "--final-time-limit", "5", "--quiet-period", "1",
        "--rate", "50", "--concurrency", "3", "--max-faults", "2", "--client-config", "isolation.level=read_uncommitted",
        "--cluster-config", "broker.session.timeout.ms=3000", "--cluster-config", "broker.heartbeat.interval.ms=1000",
        "--cluster-config", "fetch.read.past.high.watermark=true"],
    # No fault needed: read_committed polls read open transactions' records, some of which
    # abort (the generator's intentional aborts), from the first run on; a pause is the
    # cheapest kind to name.
    "transaction.lso.ignore.open.transactions": [
        "--workload-option", "txn=true", "--nemesis", "pause", "--time-limit", "3", "--final-time-limit", "5",
        "--quiet-period", "0.5", "--rate", "50", "--concurrency", "3", "--max-faults", "1",
        "--cluster-config", "transaction.lso.ignore.open.transactions=true"],
    # No fault needed either: a stalled copy (9 s without a poll, max.poll.interval.ms 6 s)
    # loses its partitions to another copier, which copies the same records; the zombie then
    # commits its offsets with its old generation. The check refuses them (UNKNOWN_MEMBER_ID,
    # the copy aborts); skipped, both copies commit (eos-duplicate). A pause is the cheapest
    # kind to name.
    "transaction.offset.commit.skip.generation.check": [
        "--workload", "eos", "--workload-option", "stall_p=0.2", "--nemesis", "pause", "--time-limit", "12",
        "--final-time-limit", "10", "--quiet-period", "1", "--rate", "50", "--concurrency", "5", "--max-faults", "1",
        "--cluster-config", "transaction.offset.commit.skip.generation.check=true"],
    # A Produce lost on the client's link to its leader is retransmitted by TCP 200 ms later;
    # its request (100 ms) and its message (100 ms) have timed out by then, and the producer
    # has aborted through the coordinator (whose own requests got through) and bumped its
    # epoch: the late Produce opens a transaction on the partition that the producer's next
    # commit there commits (G1a), or that hangs the LSO (unseen). With a 150-ms message
    # timeout the abort had 50 ms to finish before the retransmission, and a fault often
    # showed nothing. Loss, not delay: it strikes message by message, so a Produce is held
    # while the EndTxn is not. The link is drawn as the live target client>primary (the
    # client's link to the busiest leader, --live-links) besides explicit link sets: over all
    # 18 directed links the right shape was rare (seed 1 found nothing in 23 and 83 runs; the
    # entry's history in README "What a hunt can find"). One fault (two took 4-14 runs to
    # find, seeds 1-5) on a 4-s run (a second of loss there shows it; the final phase of 3 s
    # reads everything back).
    "transaction.partition.verification.enable": [
        "--workload-option", "txn=true", "--nemesis", "link-loss", "--live-links", "client>primary",
        "--time-limit", "4", "--final-time-limit", "3", "--quiet-period", "1", "--rate", "100", "--concurrency", "5",
        "--max-faults", "1",
        "--client-config", "request.timeout.ms=100", "--client-config", "message.timeout.ms=100",
        "--cluster-config", "transaction.partition.verification.enable=false"],
    # The metadata quorum's vote switch (three controllers, faults on the controllers only:
    # node_kinds=controller). The loss needs a controller left behind while the other two
    # commit metadata, then their leader gone: a partition cutting two controllers off from
    # the brokers and the third (their leader fences every broker it no longer hears: records
    # the third misses), then the active controller cut off or killed; with votes granted
    # without the log check the stale third is elected and the fences vanish
    # (metadata-committed-lost). Timeouts shortened against the simulation's and KRaft's
    # defaults so that each step fits a 4-s run: a broker is fenced 500 ms after its last
    # heartbeat (every 100 ms; simulation 1000/200), a follower stands after 500 ms without
    # its leader (controller.quorum.fetch.timeout.ms, KRaft 2000), an election round lasts
    # 250-500 ms (controller.quorum.election.timeout.ms, KRaft 1000). One client at 10 ops/s, as
    # for Figure 8 below: the loss is in the metadata log, and fewer clients asking for metadata
    # while partitions have no leader made the median to find and shrink 35.3 s -> 15.3 s.
    "controller.quorum.vote.skip.log.check": [
        "--controllers", "3", "--nemesis-option", "node_kinds=controller", "--nemesis", "partition,kill",
        "--time-limit", "4", "--final-time-limit", "4", "--quiet-period", "1", "--rate", "10", "--concurrency", "1",
        "--max-faults", "3",
        "--cluster-config", "broker.session.timeout.ms=500", "--cluster-config", "broker.heartbeat.interval.ms=100",
        "--cluster-config", "controller.quorum.fetch.timeout.ms=500",
        "--cluster-config", "controller.quorum.election.timeout.ms=250",
        "--cluster-config", "controller.quorum.vote.skip.log.check=true"],
    # Raft's Figure 8 (counting replicas commits an older epoch's record;
    # tests/cluster/quorum/test_unsafe_switches.py drives it on the Raft cores): the leader A,
    # cut off, appends records alone (it fences the brokers it no longer hears); the other two
    # elect B, whose LeaderChange must never reach the third, C: B is cut off before it does; A
    # is re-elected with C, which fetches A's old records one batch a fetch
    # (controller.quorum.fetch.max.bytes=1); counting replicas commits them, and A is cut off
    # before its own LeaderChange reaches C, so that B (its last record is newer) wins with C's
    # vote and truncates them. Each cut must land in a window of ~0.3 s after an election,
    # which a 100-ms delay on every controller link opens (the base schedule FIGURE_8_BASE,
    # kept in every example; without it ~2 ms). Cuts at drawn times hit both windows about once
    # in 1,000 schedules, and no hunt with them found it in ~600 runs (sessions 10-12: the live
    # target raft-leader, up to 6 partitions); the chasing partition raft-leaders
    # (`--live-nodes`: the leader cut off, then each later election's winner after_ms, then
    # then_ms, after it won) hits them whenever after_ms is 0-400 and then_ms 700-1000 (seed 1,
    # tests/harness/test_hunt_quorum.py). controller.quorum.fetch.max.wait.ms=100: at the
    # default 500, the fetch timeout here, followers time out on every long poll, and a link
    # delay then keeps the quorum in split votes. One client at 10 ops/s (not 3 at 50): the loss
    # is in the metadata log, and these settings keep brokers flapping between fenced and
    # unfenced, so partitions lose their leader and every aiokafka consumer and producer asks
    # for metadata as soon as an answer arrives (~2,000 requests a simulated second). Fewer
    # clients made a run ~2.5x faster; the median to find and shrink went from 146 s to ~50 s
    # (README, Performance).
    "controller.quorum.commit.previous.epoch.by.count": [
        "--controllers", "3", "--nemesis-option", "node_kinds=controller", "--nemesis", "partition",
        "--live-nodes", "raft-leaders", "--base-schedule", FIGURE_8_BASE,
        "--time-limit", "8", "--final-time-limit", "4", "--quiet-period", "1", "--rate", "10", "--concurrency", "1",
        "--max-faults", "6",
        "--cluster-config", "broker.session.timeout.ms=500", "--cluster-config", "broker.heartbeat.interval.ms=100",
        "--cluster-config", "controller.quorum.fetch.timeout.ms=500",
        "--cluster-config", "controller.quorum.election.timeout.ms=250",
        "--cluster-config", "controller.quorum.fetch.max.wait.ms=100",
        "--cluster-config", "controller.quorum.fetch.max.bytes=1",
        "--cluster-config", "controller.quorum.commit.previous.epoch.by.count=true"],
}


def without_switch(argv: list[str]) -> list[str]:
    """The same hunt on the safe cluster: the switch's own setting left out."""
    out: list[str] = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item == "--cluster-config" and i + 1 < len(argv) and argv[i + 1].split("=")[0] in SWITCH_HUNTS:
            skip = True
            continue
        out.append(item)
    return out


# Hunts for a loss Kafka documents, which the claims allow (`logquake hunt --find`): with the
# switch on, the hunt stops at the first run showing an acknowledged write lost (lost-write or
# unseen: the write is gone; inconsistent-offsets: its offset now holds another record), allowed
# (exit 3); on the safe cluster (`safe_find_hunt`: the switch off, min ISR 2) the same search
# finds none. bench/bench_hunt.py times them; tests/harness/test_hunt_find.py runs them (soak).
LOSS_ANOMALIES = "lost-write,unseen,inconsistent-offsets"
# The min ISR 1 and ELR=0 hunts share their form: pauses and one kill at a time of brokers that
# lose their unflushed tail (flushed every 80 ms), 1-s session timeout, 8-s runs. Up to five
# faults (three until session 12): the loss needs a kill of the broker the controller fences
# last inside a pause of every broker past the session timeout (in the simulation the fencing
# goes in broker order, so that is broker 2); drawn from the strategy without running them,
# 8 in 1,000 schedules of three faults have that shape, 34 in 1,000 of five. Seeds 1-3 of the
# ELR=0 hunt, which found nothing in 240 s with three, then found it at 26, 52 and 61 s, and
# min ISR 1 at 32, 56, 58 and 22 s (seeds 1-4); the safe forms found nothing in 20 runs.
_PAUSE_THEN_KILL_UNFLUSHED: list[str] = [
        "--find", LOSS_ANOMALIES, "--nemesis", "pause,kill", "--time-limit", "8", "--final-time-limit", "3",
        "--quiet-period", "1", "--rate", "100", "--concurrency", "3", "--max-faults", "5", "--max-fault-targets", "kill=1",
        "--max-fault-duration", "3",
        "--cluster-config", "broker.session.timeout.ms=1000", "--cluster-config", "broker.heartbeat.interval.ms=250",
        "--cluster-config", "log.crash.lose.unflushed=true", "--cluster-config", "log.flush.interval.ms=80",
        "--cluster-config", "log.flush.scheduler.interval.ms=10"
]
FIND_HUNTS: dict[str, list[str]] = {
    # Brokers that lose their unflushed tail when killed: with min ISR 2 and eligible leader
    # replicas one kill at a time loses nothing, two of the ISR down at once can lose what they
    # both acknowledged, which Kafka documents (durability rests on replication, not fsync) and
    # the claims allow once the history shows min ISR brokers down at once from such crashes
    # (checkers/crashes.py; until session 11 it was a SWITCH_HUNTS entry stopping at an invalid
    # verdict). The safe form leaves the switch out: a SIGKILL keeps the page cache.
    "log.crash.lose.unflushed": [
        "--find", LOSS_ANOMALIES, "--nemesis", "kill", "--time-limit", "2", "--final-time-limit", "3",
        "--quiet-period", "0.5", "--rate", "50", "--concurrency", "2", "--max-faults", "2",
        "--cluster-config", "min.insync.replicas=2", "--cluster-config", "log.crash.lose.unflushed=true"],
    # A kill of two brokers leaves the third the partitions' lone in-sync leader; a kill of it
    # that restarts the other two lets unclean election make one of them leader without what
    # the lone leader acknowledged. A 1-s session timeout fences the killed brokers promptly;
    # at most two brokers down at once (kill=2), since killing all three shows nothing more.
    "unclean.leader.election.enable": [
        "--find", LOSS_ANOMALIES, "--nemesis", "kill", "--time-limit", "8", "--final-time-limit", "3",
        "--quiet-period", "1", "--rate", "50", "--concurrency", "3", "--max-faults", "2", "--max-fault-targets", "kill=2",
        "--cluster-config", "broker.session.timeout.ms=1000", "--cluster-config", "broker.heartbeat.interval.ms=250",
        "--cluster-config", "unclean.leader.election.enable=true"],
    # A cluster whose killed brokers lose what they had not flushed: with min ISR 1 the lone
    # in-sync leader acknowledges alone, and its kill loses that. Pauses shrink the ISR and
    # lose nothing; one kill at a time (kill=1) so that the safe form is sound: min ISR 2 with
    # eligible leader replicas (KIP-966, the default) tolerates min ISR - 1 unclean shutdowns,
    # while two kills at once of the whole ISR lose with any min ISR, since every copy drops
    # its unflushed tail (seed 2 of the older kill=2 form found kill[0] 0+1.4s; kill[1,2]
    # 1.4+0.1s, invalid at min ISR 2 with ELR). Flushing every 80 ms (checked every 10) bounds
    # the unflushed tail; 100 ops/s so that the lone leader's last 90 ms hold writes. Seed 1 of
    # this form found pause[primaries] 4+1s; kill[1] 4.3+1.8s at run 141 (522 s, session 9);
    # the same shape is valid at min ISR 2 with ELR and loses without it (the entry below).
    # Kills of at most 3 s: the lone leader comes back within the main phase and its lost
    # offsets go to new writes, which is what shows the loss (the final phase only reads).
    "min.insync.replicas": [*_PAUSE_THEN_KILL_UNFLUSHED, "--cluster-config", "min.insync.replicas=1"],
    # KIP-966's last replica standing: without eligible leader replicas (Kafka before 4.1) the
    # ISR keeps its last member when the others are fenced (paused past the session timeout),
    # and that member, crashing with its unflushed tail lost, is elected again: one kill loses
    # what min ISR 2 acknowledged (tests/harness/test_last_replica_standing_run.py replays such
    # a schedule). The safe form is the default, ELR on.
    "eligible.leader.replicas.version": [*_PAUSE_THEN_KILL_UNFLUSHED, "--cluster-config", "min.insync.replicas=2",
                                         "--cluster-config", "eligible.leader.replicas.version=0"],
}
# The switch's setting on the safe cluster (None: left out).
SAFE_SETTING: dict[str, str | None] = {"log.crash.lose.unflushed": None, "unclean.leader.election.enable": None, "min.insync.replicas": "2",
                                       "eligible.leader.replicas.version": None}


def safe_find_hunt(switch: str) -> list[str]:
    """FIND_HUNTS[switch] on the safe cluster: the switch's setting left out or made safe."""
    out: list[str] = []
    argv = FIND_HUNTS[switch]
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item == "--cluster-config" and i + 1 < len(argv) and argv[i + 1].split("=")[0] == switch:
            skip = True
            if SAFE_SETTING[switch] is not None:
                out += [item, f"{switch}={SAFE_SETTING[switch]}"]
            continue
        out.append(item)
    return out
