"""One line of plain language per anomaly type, for results.json and the report."""

from __future__ import annotations

EXPLANATIONS: dict[str, str] = {
    "lost-write": "An acknowledged write was never read, although consumers read values after it in the same partition.",
    "unseen": "An acknowledged write was never read by any consumer, even after the final drain.",
    "duplicate": "One value appears at more than one offset of a partition.",
    "inconsistent-offsets": "One offset of a partition was seen holding different values.",
    "poll-skip": "A consumer's next poll jumped over records known to exist in the partition.",
    "nonmonotonic-poll": "A consumer's next poll went back to (or repeated) an earlier offset of the partition.",
    "nonmonotonic-send": "A producer's later send to a partition landed at or before its earlier send.",
    "int-poll-skip": "Within one poll, consecutive records of a partition jumped over records known to exist.",
    "int-nonmonotonic-poll": "Within one poll, the records of a partition went backwards or repeated.",
    "int-send-skip": "Other records landed between two sends of one transaction to the same partition.",
    "int-nonmonotonic-send": "Within one operation, a later send to a partition landed before an earlier one.",
    "G1a": "A consumer read a record whose send (or transaction) definitely failed.",
    "precommitted-read": "An operation read its own send before its transaction committed.",
    "G0": "Transactions' writes are ordered inconsistently across partitions (a write-write cycle).",
    "G1c": "Transactions read each other's writes in a cycle (circular information flow).",
    "G0-realtime": "Write order across partitions contradicts real time (a write-write cycle with real-time order).",
    "G1c-realtime": "Information flowed backwards in real time (a read/write cycle with real-time order).",
    "duplicate-processing": "The consumer group processed one record more than once.",
    "unprocessed": "An acknowledged record was never processed by the consumer group.",
    "nonmonotonic-commit": "A group committed a partition offset lower than one it had already committed.",
    "eos-missing": "An input record never appeared in the output topic: no committed copy of it is visible to read_committed.",
    "eos-duplicate": "An input record appears in the output topic more than once: two copies of it both committed.",
    "eos-partial": "A copy transaction is only partly visible: some outputs of a committed copy are missing, or an unknown copy's outputs are part visible, part not.",
}


def explain(name: str) -> str:
    return EXPLANATIONS.get(name, f"{name} (see Jepsen's Kafka checker)")
