"""Which claims a run's configuration makes, and which anomalies each claim forbids.

`ClaimInputs` is the plain, typed slice of spec.json the checkers need (they never import
the harness's RunSpec), plus the fault kinds the run's history shows ran. `claims_for` turns
it into the claims under test; `classify` decides for one anomaly type whether it is
allowed, and which made claims it violates. Fail closed: an anomaly is allowed only where a
documented Kafka rule says it can happen under this configuration and these faults
(`loss_allowance`; README "Claims"). For unflushed crashes at min ISR m >= 2 that rule
needs m brokers down at once, counted from the history's nemesis ops (checkers/crashes.py).

Jepsen's allowed-error-types are kept on top: int-send-skip and G0 are always allowed
(Kafka transactions do not isolate writes); with subscribe, rebalances legally cause
external poll skips and rewinds; with ww-deps, G1c is expected.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from checkers.crashes import CrashPeriod, DownAtOnce, crash_periods, most_down_at_once
from checkers.result import Claim

DELIVERY_MODES = {"after": "at-least-once", "at-least-once": "at-least-once",
                  "before": "at-most-once", "auto": "at-most-once", "at-most-once": "at-most-once"}


class ClaimInputError(ValueError):
    """spec.json does not describe a run the checkers can judge; names the field."""


def _truthy(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class ClaimInputs:
    workload: str = "queue"
    acks: str = "all"  # librdkafka's default is all (-1)
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    replication_factor: int = 1
    idempotence: bool = False
    transactional: bool = False
    isolation_level: str = "read_committed"
    enable_auto_commit: bool = True
    commit_mode: str | None = None  # at-most-once | at-least-once (delivery workload)
    sub_via: tuple[str, ...] = ("assign",)
    ww_deps: bool = True
    # log.crash.lose.unflushed: a SIGKILLed broker also loses what it had not fsynced, as a
    # machine crash would (by default SIGKILL keeps the page cache, as on Linux).
    lose_unflushed_on_crash: bool = False
    # eligible.leader.replicas.version (KIP-966; the bundled cluster's default 1, as Kafka 4.1's
    # new clusters): off, one crash of a lone ISR member loses what min ISR replicas acknowledged.
    eligible_leader_replicas: bool = True
    # Unsafe switches that reproduce Kafka bugs (replica.truncate.to.high.watermark,
    # fetch.read.past.high.watermark): named in reasons, never an allowance.
    bug_switches: tuple[str, ...] = ()
    # Fault kinds that actually ran (the `start-<kind>` nemesis ops of the history, collected
    # by harness/history_parquet.py). Empty until the history is read: nothing is excused.
    faults: frozenset[str] = frozenset()
    # The brokers the history's nemesis ops show down from crashes, and when
    # (checkers/crashes.py): how many unflushed crashes overlapped. Empty until the history
    # is read: no overlap is assumed.
    crashes: tuple[CrashPeriod, ...] = ()
    # Where min ISR, unclean election and the replication factor came from, for the claims'
    # reasons: empty for the bundled cluster (it runs with the typed settings), else the
    # external cluster's report and what it left unconfirmed (`_reported_by_cluster`).
    settings_source: str = ""

    @classmethod
    def from_spec_json(cls, spec: Mapping[str, Any], cluster_settings: Mapping[str, Any] | None = None) -> "ClaimInputs":
        """The inputs of a run from its spec.json and, for an external cluster
        (`bootstrap_servers`), its cluster-config.json (`cluster_settings`; None when the run
        directory has none): an external cluster's settings are what it reported, never what
        the user typed."""
        if not isinstance(spec, Mapping):
            raise ClaimInputError(f"spec must be a JSON object, not {type(spec).__name__}")
        client = spec.get("client_config") or {}
        cluster = spec.get("cluster_config") or {}
        options = spec.get("workload_options") or {}
        for name, value in (("client_config", client), ("cluster_config", cluster), ("workload_options", options)):
            if not isinstance(value, Mapping):
                raise ClaimInputError(f"{name}: {value!r} must be an object")
        workload = spec.get("workload", "queue")
        if not isinstance(workload, str):
            raise ClaimInputError(f"workload: {workload!r} must be a string")

        def int_setting(source: Mapping[str, Any], name: str, default: int) -> int:
            raw = source.get(name)
            if raw is None:
                return default
            try:
                return int(str(raw))
            except ValueError:
                raise ClaimInputError(f"{name}: {raw!r} is not an integer") from None

        acks = str(client.get("acks", client.get("request.required.acks", "all"))).strip().lower()
        if acks == "-1":
            acks = "all"
        if acks not in ("all", "0", "1"):
            raise ClaimInputError(f"acks: {acks!r} must be all, -1, 0 or 1")
        # eos copiers are transactional unless txn=false (workloads/eos.py).
        txn = (_truthy(str(options.get("txn", workload == "eos")), False) or workload == "transactional"
               or "transactional.id" in client)
        mode_raw = options.get("commit_mode")
        commit_mode = None
        if mode_raw is not None:
            if mode_raw not in DELIVERY_MODES:
                raise ClaimInputError(f"workload_options.commit_mode: {mode_raw!r} must be one of "
                                      f"{', '.join(DELIVERY_MODES)}")
            commit_mode = DELIVERY_MODES[mode_raw]
        elif workload == "delivery":
            commit_mode = "at-least-once"
        sub_via_raw = options.get("sub_via", ["subscribe"] if workload == "delivery" else ["assign"])
        if isinstance(sub_via_raw, str):
            # The command line's text form, as the workloads read it: a comma list.
            sub_via_raw = [part.strip() for part in sub_via_raw.split(",") if part.strip()]
        sub_via = tuple(str(s) for s in sub_via_raw)
        for s in sub_via:
            if s not in ("assign", "subscribe"):
                raise ClaimInputError(f"workload_options.sub_via: {s!r} must be assign or subscribe")
        # The workloads create their topics with replication_factor, min(3, brokers) by default
        # (workloads/queue.py, delivery.py); default.replication.factor only governs topics
        # the broker auto-creates.
        brokers = int_setting(spec, "brokers", 3)
        replication_factor = int_setting(options, "replication_factor", min(3, brokers))
        if replication_factor < 1:
            raise ClaimInputError(f"replication_factor: {replication_factor} must be at least 1")
        bug_switches = bug_switches_on(cluster)
        min_isr = int_setting(cluster, "min.insync.replicas", 1)
        unclean = _truthy(cluster.get("unclean.leader.election.enable"), False)
        lose_unflushed = _truthy(cluster.get("log.crash.lose.unflushed"), False)
        elr = str(cluster.get("eligible.leader.replicas.version", "1")).strip() != "0"
        source = ""
        # An external cluster: --bootstrap-servers, or a user's Compose project (--docker-compose).
        if spec.get("bootstrap_servers") is not None or spec.get("docker_compose") is not None:
            reported = _reported_by_cluster(cluster_settings, requested_rf=replication_factor, typed_min_isr=min_isr)
            min_isr, unclean, replication_factor = reported.min_isr, reported.unclean, reported.replication_factor
            lose_unflushed, bug_switches, source = reported.lose_unflushed, reported.bug_switches, reported.source
            elr = True  # not reported: the reading that excuses nothing
        return cls(
            workload=workload,
            acks=acks,
            min_insync_replicas=min_isr,
            unclean_leader_election=unclean,
            replication_factor=replication_factor,
            idempotence=_truthy(client.get("enable.idempotence"), False) or txn,
            transactional=txn,
            isolation_level=str(client.get("isolation.level", "read_committed")),
            enable_auto_commit=_truthy(client.get("enable.auto.commit"), True),
            commit_mode=commit_mode,
            sub_via=sub_via,
            ww_deps=bool(options.get("ww_deps", True)),
            lose_unflushed_on_crash=lose_unflushed,
            eligible_leader_replicas=elr,
            bug_switches=bug_switches,
            settings_source=source,
        )


@dataclass(frozen=True)
class _Reported:
    min_isr: int
    unclean: bool
    replication_factor: int
    lose_unflushed: bool
    bug_switches: tuple[str, ...]
    source: str


# An unconfirmed min ISR is taken as at least 2: the stricter reading makes more claims, so
# a value the cluster never confirmed can only cause a false alarm, never excuse a loss.
UNCONFIRMED_MIN_ISR = 2


def _reported_by_cluster(settings: Mapping[str, Any] | None, *, requested_rf: int, typed_min_isr: int) -> _Reported:
    """An external run's settings from cluster-config.json (harness/cluster_settings.py):
    the weakest over every test topic and every reading (after set-up, end): the smallest
    min ISR and replication factor, unclean election if any topic has it. Fails closed: a
    value the cluster did not report takes the reading that excuses nothing (unclean
    election off, min ISR at least 2, the replication factor the topics were created with),
    and the reason says so, so `valid` never rests on an unconfirmed setting."""
    readings = settings.get("readings") if isinstance(settings, Mapping) else None
    if not isinstance(readings, list):
        readings = []
    min_isrs: list[int] = []
    rfs: list[int] = []
    unclean_topics: set[str] = set()
    unknown: dict[str, set[str]] = {"min.insync.replicas": set(), "unclean.leader.election.enable": set(),
                                    "replication factor": set()}
    topics_seen: set[str] = set()
    broker_values: dict[str, str] = {}  # bug switch → a value some broker reported
    whens: list[str] = []
    lose_unflushed = False
    for reading in readings:
        if not isinstance(reading, Mapping):
            continue
        whens.append(str(reading.get("when", "?")))
        for name, topic in (reading.get("topics") or {}).items():
            topics_seen.add(name)
            configs = (topic.get("configs") or {}) if isinstance(topic, Mapping) else {}
            try:
                min_isrs.append(int(str(configs["min.insync.replicas"])))
            except (KeyError, ValueError):
                unknown["min.insync.replicas"].add(name)
            raw_unclean = configs.get("unclean.leader.election.enable")
            if raw_unclean is None or str(raw_unclean).strip().lower() not in ("true", "false"):
                unknown["unclean.leader.election.enable"].add(name)
            elif _truthy(raw_unclean, False):
                unclean_topics.add(name)
            rf = topic.get("replication_factor") if isinstance(topic, Mapping) else None
            if isinstance(rf, int) and rf >= 1:
                rfs.append(rf)
            else:
                unknown["replication factor"].add(name)
        for broker in (reading.get("brokers") or {}).values():
            for key, value in ((broker.get("configs") or {}) if isinstance(broker, Mapping) else {}).items():
                if key == "log.crash.lose.unflushed" and _truthy(value, False):
                    lose_unflushed = True
                # One broker with a bug switch on is enough: keep that reading.
                if key in BUG_SWITCHES and (key not in broker_values or bug_switches_on({key: value})):
                    broker_values[key] = str(value)
    assumed_min_isr = max(typed_min_isr, UNCONFIRMED_MIN_ISR)
    nothing = not topics_seen
    min_isr = min(min_isrs + ([assumed_min_isr] if unknown["min.insync.replicas"] or nothing else []))
    replication_factor = min(rfs + ([requested_rf] if unknown["replication factor"] or nothing else []))
    unclean = bool(unclean_topics)
    if nothing:
        why = ("cluster-config.json is missing" if settings is None else
               "cluster-config.json holds no test topic (the cluster could not be read)")
        source = (f"settings not reported by the external cluster ({why}): assumed min.insync.replicas="
                  f"{assumed_min_isr}, unclean.leader.election.enable=false, replication factor {requested_rf}, "
                  "the readings that excuse no loss")
    else:
        source = (f"settings reported by the external cluster (Metadata and DescribeConfigs of "
                  f"{len(topics_seen)} test topic(s) at {', '.join(whens)}; the weakest over them)")
        assumed = {"min.insync.replicas": f"assumed {assumed_min_isr}",
                   "unclean.leader.election.enable": "assumed false",
                   "replication factor": f"assumed {requested_rf}"}
        gaps = [f"{key} of {', '.join(sorted(names)[:3])}{' …' if len(names) > 3 else ''} not reported, "
                f"{assumed[key]}" for key, names in unknown.items() if names]
        if gaps:
            source += ("; " + "; ".join(gaps) + " (unconfirmed values take the reading that excuses no loss: "
                       "a false alarm, never a false pass)")
        if unclean_topics:
            source += f"; unclean election on for {', '.join(sorted(unclean_topics)[:3])}"
    return _Reported(min_isr=min_isr, unclean=unclean, replication_factor=replication_factor,
                     lose_unflushed=lose_unflushed, bug_switches=bug_switches_on(broker_values), source=source)


# Claim names.
DURABLE = "acked-writes-durable"
ORDER = "per-partition-order"
CONSISTENT = "consistent-log"
NO_DUPLICATES = "no-duplicates"
NO_ABORTED_READS = "no-aborted-reads"
TXN_ISOLATION = "transaction-isolation"
AT_MOST_ONCE = "at-most-once"
AT_LEAST_ONCE = "at-least-once"
COMMITS_MONOTONIC = "committed-offsets-monotonic"
EXACTLY_ONCE = "exactly-once"


# Fault kinds (nemeses/: `start-<kind>` ops) that can move a partition's leadership: a
# crashed, stalled, cut-off or clock-skewed leader is replaced. Unknown kinds excuse nothing.
LEADERSHIP_FAULTS = frozenset({"kill", "pause", "partition", "clock", "brokers-down", "lone-leader-crash"})
# A disk fault halts a broker (failed log directory) or powers it off with torn writes.
LEADERSHIP_FAULTS |= {"disk"}
# Fault kinds that SIGKILL a broker (the scripted sequences kill leaders).
KILL_FAULTS = frozenset({"kill", "brokers-down", "lone-leader-crash"})
# Unsafe switches that reproduce a Kafka bug, with the value that turns the bug on: named in
# the claims' reasons, never an allowance. Partition verification is Kafka's own setting
# (KIP-890), safe when true; the others are the bundled cluster's, safe when false.
BUG_SWITCHES: dict[str, bool] = {
    "replica.truncate.to.high.watermark": True,
    "fetch.read.past.high.watermark": True,
    "transaction.partition.verification.enable": False,
    "transaction.lso.ignore.open.transactions": True,
    "transaction.offset.commit.skip.generation.check": True,
}


def bug_switches_on(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The bug switches `settings` (property → value) turn on; absent ones are off."""
    return tuple(name for name, unsafe in BUG_SWITCHES.items()
                 if settings.get(name) is not None and _truthy(str(settings[name]), not unsafe) == unsafe)


def with_faults(inputs: ClaimInputs, faults: frozenset[str],
                nemesis_ops: tuple[Mapping[str, Any], ...] = ()) -> ClaimInputs:
    """`inputs` plus the fault kinds the run's history shows ran and, from its nemesis op
    lines (in history order), the crash periods (nemesis ops are not in the Parquet
    history: harness/history_parquet.py collects both while converting)."""
    crashes = crash_periods(nemesis_ops) if nemesis_ops else ()
    return replace(inputs, faults=inputs.faults | frozenset(faults), crashes=inputs.crashes + crashes)


def unflushed_down_at_once(inputs: ClaimInputs) -> DownAtOnce:
    """The most brokers down at one moment from crashes that lost their unflushed data:
    kills when log.crash.lose.unflushed=true, disk torn-crashes (power losses) always."""
    return most_down_at_once(inputs.crashes, kills_lose_unflushed=inputs.lose_unflushed_on_crash)


def loss_allowance(inputs: ClaimInputs) -> str | None:
    """The documented Kafka rule under which an acknowledged write may be lost in this run
    (configuration and the faults that ran), or None: then a lost write is a bug. Fails
    closed: what no rule below allows is bad. Sources: reference/kafka-reliability.md §1.1
    (design.html §4.7, ProducerConfig's acks doc, KIP-966, the log.flush.interval.messages
    doc: durability rests on replication, not fsync)."""
    moved = sorted(inputs.faults & LEADERSHIP_FAULTS)
    if not moved:
        return None  # without a fault nothing replaces a leader: every acknowledged write stays
    faults = ", ".join(moved)
    if inputs.acks in ("0", "1"):
        return (f"acks={inputs.acks} with faults that move leadership ({faults}): ProducerConfig's acks doc, "
                "a record the leader acknowledged before its followers copied it is lost when the leader fails")
    if inputs.unclean_leader_election:
        return (f"unclean.leader.election.enable=true with faults ({faults}): design.html §4.7, an out-of-sync "
                "replica may be elected and committed messages lost")
    kills = sorted(inputs.faults & KILL_FAULTS)
    if inputs.lose_unflushed_on_crash and kills and not inputs.eligible_leader_replicas:
        # KIP-966's "last replica standing": without eligible leader replicas the ISR can
        # shrink to one broker while the others are only stalled, cut off or down (any fault
        # that fences them, kills included), and that broker, crashing with its unflushed
        # tail lost, is still the whole ISR and leads again: one crash, whatever min ISR.
        return (f"log.crash.lose.unflushed=true, kills ({', '.join(kills)}), eligible.leader.replicas.version=0: "
                "KIP-966's last replica standing (Kafka before 4.1, or without the feature), the lone ISR member "
                "crashes losing its unflushed tail and is elected again")
    if (inputs.lose_unflushed_on_crash and kills
            and (inputs.min_insync_replicas <= 1 or inputs.replication_factor <= 1)):
        return (f"log.crash.lose.unflushed=true, kills ({', '.join(kills)}), "
                f"min.insync.replicas={inputs.min_insync_replicas}, replication factor {inputs.replication_factor}: "
                "design.html §4.7 and KIP-966, a lone in-sync copy that crashes loses its unflushed tail")
    if "disk" in inputs.faults and (inputs.min_insync_replicas <= 1 or inputs.replication_factor <= 1):
        # The disk nemesis's torn-crash is a power loss whatever log.crash.lose.unflushed says.
        return (f"disk faults (torn-crash is a power loss), min.insync.replicas={inputs.min_insync_replicas}, "
                f"replication factor {inputs.replication_factor}: design.html §4.7 and KIP-966, a lone in-sync copy "
                "that loses power loses its unflushed tail")
    down = unflushed_down_at_once(inputs)
    if down.count >= inputs.min_insync_replicas >= 2 and inputs.replication_factor >= 2:
        # Eligible leader replicas on (off is the rule above) and min ISR m >= 2: every
        # acknowledged write is on at least m replicas, and one crash at a time loses nothing
        # (KIP-966: a broker back from an unclean shutdown leaves every ISR and ELR, so only
        # an intact copy leads). The write goes only when every copy that could lead lost it:
        # at least m in-sync brokers crashing with their unflushed tails gone, at once. Kafka
        # promises acks=all writes only "as long as at least one in sync replica remains
        # alive" and rests durability on replication, not fsync (design.html §4.7; the
        # log.flush.interval.messages doc). A necessary condition, not a proof: the history
        # does not show the ISR, so m crashes are taken to be able to be the whole ISR.
        why = "".join(("log.crash.lose.unflushed=true, " if set(down.kinds) - {"torn-crash"} else "",
                       "disk torn-crash (a power loss), " if "torn-crash" in down.kinds else ""))
        return (f"{why}{down.count} brokers down at once from unflushed crashes >= min ISR "
                f"{inputs.min_insync_replicas} ({down.describe()}): design.html §4.7, an acks=all write survives "
                "as long as one in-sync replica does, and with every copy that could lead crashed before its "
                "fsync none keeps it (KIP-966: fewer overlapping crashes lose nothing)")
    return None


def _down_note(inputs: ClaimInputs, allowance: str | None) -> str:
    """The overlap of unflushed crashes, when some ran and the allowance does not say it."""
    down = unflushed_down_at_once(inputs)
    if not down.count or (allowance and "down at once" in allowance):
        return ""
    return f"; at most {down.count} broker(s) down at once from unflushed crashes ({down.describe()})"


def claims_for(inputs: ClaimInputs) -> list[Claim]:
    allowance = loss_allowance(inputs)
    durable = allowance is None
    ran = ", ".join(sorted(inputs.faults)) or "none"
    durable_reason = (f"acks={inputs.acks}, min.insync.replicas={inputs.min_insync_replicas}, "
                      f"replication factor {inputs.replication_factor}, "
                      f"unclean.leader.election.enable={str(inputs.unclean_leader_election).lower()}, "
                      f"log.crash.lose.unflushed={str(inputs.lose_unflushed_on_crash).lower()}, faults run: {ran}"
                      + _down_note(inputs, allowance)
                      + (f"; not claimed, {allowance}" if allowance else
                         "; no documented Kafka rule allows losing an acknowledged write here")
                      + (f"; {', '.join(inputs.bug_switches)} on: reproduces a Kafka bug, excuses nothing"
                         if inputs.bug_switches else "")
                      + (f"; {inputs.settings_source}" if inputs.settings_source else ""))
    # Said on the transaction claims too: the transaction bug switches break those.
    bug_note = (f"; {', '.join(inputs.bug_switches)} on: reproduces a Kafka bug, excuses nothing"
                if inputs.bug_switches else "")
    read_committed = inputs.isolation_level == "read_committed"
    delivery = inputs.workload == "delivery"
    manual = not inputs.enable_auto_commit
    claims = [
        Claim(DURABLE, "every acknowledged write survives and is read by consumers that read past it",
              durable_reason, durable),
        # After an allowed loss a new leader hands the lost records' offsets to new records, so a
        # producer's later send can land below its earlier (lost) one and polls around the lost
        # offsets skip or go back: consequences of the documented loss, allowed with it.
        Claim(ORDER, "each partition is one log read and written in offset order",
              "Kafka's per-partition order" + ("" if durable else "; not claimed: after an allowed loss the lost records' "
                                               "offsets go to other records, so sends and polls around them leave offset order"),
              durable),
        Claim(CONSISTENT, "each offset of a partition holds exactly one record",
              "Kafka's log model" + ("" if durable else "; an offset may be reused after an allowed loss"),
              durable),
        Claim(NO_DUPLICATES, "a value sent once appears at one offset only",
              f"enable.idempotence={str(inputs.idempotence).lower()}"
              + ("" if inputs.idempotence else " (retries may duplicate without idempotence)") + bug_note,
              inputs.idempotence),
        Claim(NO_ABORTED_READS, "no poll returns a record whose send failed or whose transaction aborted",
              f"isolation.level={inputs.isolation_level}" + bug_note, read_committed or not inputs.transactional),
        Claim(TXN_ISOLATION, "a transaction's records are invisible until it commits, and reads and writes do "
              "not form dependency cycles (write-write cycles excepted)",
              ("transactional producers with read_committed consumers" if inputs.transactional
               else "no transactions: each op stands alone") + bug_note, read_committed),
    ]
    if delivery:
        mode = inputs.commit_mode
        claims += [
            Claim(AT_MOST_ONCE, "no value is processed twice by the consumer group",
                  f"commit mode {mode}, enable.auto.commit={str(inputs.enable_auto_commit).lower()}",
                  mode == "at-most-once" and manual),
            Claim(AT_LEAST_ONCE, "every acknowledged value is processed at least once by the group",
                  f"commit mode {mode}, enable.auto.commit={str(inputs.enable_auto_commit).lower()}, "
                  f"acked writes {'durable' if durable else 'not durable'}",
                  mode == "at-least-once" and manual and durable),
            Claim(COMMITS_MONOTONIC, "a group's committed offset of a partition never moves backwards",
                  "group coordinator generation checks", True),
        ]
    if inputs.workload == "eos":
        # KIP-98 (transactions) and KIP-447 (offsets committed in the producer's transaction,
        # fenced by the consumer group's generation): a read_committed consume-transform-produce
        # loop copies every record exactly once, if no committed record may be lost.
        exactly = inputs.transactional and read_committed and durable
        claims += [
            Claim(EXACTLY_ONCE, "every input record appears in the output exactly once, and each copy "
                  "transaction's outputs are all visible or none",
                  ("transactional copiers (send_offsets_to_transaction) with read_committed consumers, KIP-98 and "
                   "KIP-447" if inputs.transactional else "copiers without transactions (txn=false): a copy "
                   "repeated after a crash or a refused offset commit duplicates")
                  + f", isolation.level={inputs.isolation_level}"
                  + ("" if durable else f"; not claimed, {allowance}") + bug_note, exactly),
            Claim(AT_LEAST_ONCE, "every acknowledged input record is copied to the output at least once",
                  "copiers commit offsets only after producing" + ("" if durable else f"; not claimed, {allowance}"),
                  durable and read_committed),
        ]
    return claims


# Which claims each anomaly type breaks.
VIOLATES: dict[str, tuple[str, ...]] = {
    "lost-write": (DURABLE, AT_LEAST_ONCE),
    "unseen": (DURABLE, AT_LEAST_ONCE),
    "duplicate": (NO_DUPLICATES, AT_MOST_ONCE),
    "inconsistent-offsets": (CONSISTENT,),
    "poll-skip": (ORDER,),
    "nonmonotonic-poll": (ORDER,),
    "nonmonotonic-send": (ORDER,),
    "int-poll-skip": (ORDER,),
    "int-nonmonotonic-poll": (ORDER,),
    "int-send-skip": (ORDER,),
    "int-nonmonotonic-send": (ORDER,),
    "G1a": (NO_ABORTED_READS,),
    "precommitted-read": (TXN_ISOLATION,),
    "G0": (TXN_ISOLATION,),
    "G0-realtime": (TXN_ISOLATION,),
    "G1c": (TXN_ISOLATION,),
    "G1c-realtime": (TXN_ISOLATION,),
    "duplicate-processing": (AT_MOST_ONCE,),
    "unprocessed": (AT_LEAST_ONCE,),
    "nonmonotonic-commit": (COMMITS_MONOTONIC,),
    "eos-missing": (EXACTLY_ONCE, AT_LEAST_ONCE),
    "eos-duplicate": (EXACTLY_ONCE,),
    "eos-partial": (EXACTLY_ONCE,),
}


def jepsen_allowed(inputs: ClaimInputs) -> frozenset[str]:
    allowed = {"int-send-skip", "G0", "G0-realtime"}
    if "subscribe" in inputs.sub_via:
        allowed |= {"poll-skip", "nonmonotonic-poll"}
    if inputs.ww_deps:
        allowed |= {"G1c", "G1c-realtime"}
    return frozenset(allowed)


def classify(name: str, inputs: ClaimInputs, claims: list[Claim]) -> tuple[bool, list[str]]:
    """(allowed, violated claim names) for one anomaly type seen in the run."""
    if name in jepsen_allowed(inputs):
        return True, []
    made = {c.name for c in claims if c.holds}
    violated = [c for c in VIOLATES.get(name, ()) if c in made]
    if name not in VIOLATES:
        return False, []  # unknown anomaly types are bad, as in Jepsen
    return (not violated), violated
