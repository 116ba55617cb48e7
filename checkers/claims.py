"""Which claims a run's configuration makes, and which anomalies each claim forbids.

`ClaimInputs` is the plain, typed slice of spec.json the checkers need (they never import
the harness's RunSpec). `claims_for` turns it into the claims under test; `classify` decides
for one anomaly type whether it is allowed, and which made claims it violates.

Jepsen's allowed-error-types are kept on top: int-send-skip and G0 are always allowed
(Kafka transactions do not isolate writes); with subscribe, rebalances legally cause
external poll skips and rewinds; with ww-deps, G1c is expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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

    @classmethod
    def from_spec_json(cls, spec: Mapping[str, Any]) -> "ClaimInputs":
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
        txn = bool(options.get("txn", False)) or workload == "transactional" or "transactional.id" in client
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
            sub_via_raw = [sub_via_raw]
        sub_via = tuple(str(s) for s in sub_via_raw)
        for s in sub_via:
            if s not in ("assign", "subscribe"):
                raise ClaimInputError(f"workload_options.sub_via: {s!r} must be assign or subscribe")
        return cls(
            workload=workload,
            acks=acks,
            min_insync_replicas=int_setting(cluster, "min.insync.replicas", 1),
            unclean_leader_election=_truthy(cluster.get("unclean.leader.election.enable"), False),
            replication_factor=int_setting(cluster, "default.replication.factor",
                                           int_setting(options, "replication_factor", 1)),
            idempotence=_truthy(client.get("enable.idempotence"), False) or txn,
            transactional=txn,
            isolation_level=str(client.get("isolation.level", "read_committed")),
            enable_auto_commit=_truthy(client.get("enable.auto.commit"), True),
            commit_mode=commit_mode,
            sub_via=sub_via,
            ww_deps=bool(options.get("ww_deps", True)),
        )


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


def acked_writes_durable(inputs: ClaimInputs) -> bool:
    """The client asks for durability with acks=all against topics that need two in-sync
    copies. Unclean leader election does not withdraw the claim: it is the system under test
    breaking it (an unsafe switch), which is exactly what a run must catch. Without the claim
    an acknowledged offset says nothing lasting about the log (the checks then take the
    version order from polls alone)."""
    return inputs.acks == "all" and inputs.min_insync_replicas >= 2


def claims_for(inputs: ClaimInputs) -> list[Claim]:
    durable = acked_writes_durable(inputs)
    durable_reason = (f"acks={inputs.acks}, min.insync.replicas={inputs.min_insync_replicas}"
                      + ("" if durable else " (needs acks=all and min.insync.replicas ≥ 2)")
                      + ("; unclean.leader.election.enable=true on the cluster may break it" if inputs.unclean_leader_election else ""))
    read_committed = inputs.isolation_level == "read_committed"
    delivery = inputs.workload == "delivery"
    manual = not inputs.enable_auto_commit
    claims = [
        Claim(DURABLE, "every acknowledged write survives and is read by consumers that read past it",
              durable_reason, durable),
        Claim(ORDER, "each partition is one log read and written in offset order", "Kafka's per-partition order", True),
        Claim(CONSISTENT, "each offset of a partition holds exactly one record", "Kafka's log model", True),
        Claim(NO_DUPLICATES, "a value sent once appears at one offset only",
              f"enable.idempotence={str(inputs.idempotence).lower()}"
              + ("" if inputs.idempotence else " (retries may duplicate without idempotence)"), inputs.idempotence),
        Claim(NO_ABORTED_READS, "no poll returns a record whose send failed or whose transaction aborted",
              f"isolation.level={inputs.isolation_level}", read_committed or not inputs.transactional),
        Claim(TXN_ISOLATION, "a transaction's records are invisible until it commits, and reads and writes do "
              "not form dependency cycles (write-write cycles excepted)",
              "transactional producers with read_committed consumers" if inputs.transactional
              else "no transactions: each op stands alone", read_committed),
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
