"""Per-phase throughput, availability and recovery on hand-made histories."""

from __future__ import annotations

import pytest

from harness.history import Op
from harness.report.phases import AFTER, BEFORE, DURING, FINAL, RECOVERY_FRACTION, format_table, phase_throughput

S = 1_000_000_000


class History:
    """Builds a history: client ops as invoke/complete pairs, nemesis ops, in time order."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, t_s: float, type_: str, process, f: str, value=None, extra=None) -> None:
        self.ops.append(Op(len(self.ops), int(round(t_s * S)), type_, process, f, value, None, dict(extra or {})))

    def client(self, process: int, start_s: float, end_s: float, outcome: str = "ok") -> None:
        self._add(start_s, "invoke", process, "send")
        self._add(end_s, outcome, process, "send")

    def nemesis(self, t_s: float, f: str, heal: bool = False) -> None:
        self._add(t_s, "info", "nemesis", f, extra={"heal": True} if heal else None)

    def steady(self, process: int, start_s: float, end_s: float, per_s: int) -> None:
        """ok ops of 1 ms each, per_s a second, in [start_s, end_s)."""
        n = int(round((end_s - start_s) * per_s))
        for i in range(n):
            t = start_s + i / per_s
            self.client(process, t, t + 0.001)

    def sorted(self) -> list[Op]:
        ops = sorted(self.ops, key=lambda op: (op.time_ns, op.index))
        return [Op(i, op.time_ns, op.type, op.process, op.f, op.value, op.error, op.extra) for i, op in enumerate(ops)]


def test_phases_split_at_faults_and_heals_with_rates_availability_and_recovery() -> None:
    h = History()
    h.steady(0, 0.0, 10.0, 20)  # 20 ok/s before the fault
    h.nemesis(10.0, "start-partition")
    h.client(1, 10.5, 14.5, "info")  # invoked during the fault, never ok
    h.client(1, 14.6, 14.7, "ok")  # ok during the fault
    h.nemesis(15.0, "stop-partition")
    h.steady(0, 17.0, 25.0, 20)  # 2 s of nothing after the heal, then 20 ok/s again
    h.nemesis(25.0, "stop-partition", heal=True)  # the harness's final heal ends the main phase
    h.steady(0, 26.0, 28.0, 5)
    phases = phase_throughput(h.sorted())

    assert [p.kind for p in phases.phases] == [BEFORE, DURING, AFTER, FINAL]
    before, during, after, final = phases.phases
    assert phases.pre_fault_ok_per_s == pytest.approx(20.0, abs=0.2)
    assert (before.start_s, before.end_s) == (0.0, 10.0)
    assert before.availability == 1.0
    assert (during.start_s, during.end_s, during.faults) == (10.0, 15.0, "partition")
    assert (during.invoked, during.ok) == (2, 1)
    assert during.availability == 0.5
    assert during.ok_per_s == pytest.approx(0.2)
    assert (after.start_s, after.end_s) == (15.0, 25.0)
    assert after.ok == 160 and after.ok_per_s == pytest.approx(16.0)
    assert after.recovery_s == 2.0  # [15, 16) and [16, 17) are empty, [17, 18) has 20 ok
    assert final.ok == 10 and final.recovery_s is None
    assert "after-heal" in format_table(phases) and "2 s" in format_table(phases)


def test_a_rate_that_never_comes_back_before_the_next_fault_has_no_recovery() -> None:
    h = History()
    h.steady(0, 0.0, 5.0, 10)
    h.nemesis(5.0, "start-kill")
    h.nemesis(6.0, "stop-kill")
    # after the heal only 1 ok/s: below RECOVERY_FRACTION of 10 ok/s in every window
    h.steady(0, 6.0, 12.0, 1)
    h.nemesis(12.0, "start-kill")
    h.nemesis(13.0, "stop-kill")
    h.steady(0, 13.0, 16.0, 10)
    phases = phase_throughput(h.sorted())
    kinds = [p.kind for p in phases.phases]
    assert kinds == [BEFORE, DURING, AFTER, DURING, AFTER]
    assert phases.phases[2].recovery_s is None
    assert phases.phases[4].recovery_s == 0.0
    assert "never" in format_table(phases)
    assert RECOVERY_FRACTION * 10 > 1


def test_overlapping_faults_of_two_kinds_are_one_fault_phase() -> None:
    h = History()
    h.steady(0, 0.0, 4.0, 10)
    h.nemesis(4.0, "start-kill")
    h.nemesis(5.0, "start-partition")
    h.nemesis(6.0, "stop-kill")
    h.nemesis(7.0, "stop-partition")
    h.steady(0, 7.0, 9.0, 10)
    phases = phase_throughput(h.sorted())
    assert [(p.kind, p.start_s, p.end_s, p.faults) for p in phases.phases] == [
        (BEFORE, 0.0, 4.0, ""), (DURING, 4.0, 7.0, "kill+partition"), (AFTER, 7.0, 8.901, "")]


def test_a_run_without_faults_is_one_phase_without_a_pre_fault_rate() -> None:
    h = History()
    h.steady(0, 0.0, 3.0, 10)
    phases = phase_throughput(h.sorted())
    assert [p.kind for p in phases.phases] == [BEFORE]
    assert phases.pre_fault_ok_per_s is None
    assert phases.phases[0].ok == 30
    assert phase_throughput([]).phases == []


def test_the_report_shows_the_phases_recorded_in_results_json(tmp_path) -> None:
    from checkers.result import CheckResult
    from harness import store
    from harness.report import write_report
    from tests.harness.test_report_support import write_valid_run

    run = tmp_path / "run"
    write_valid_run(run)
    h = History()
    h.steady(0, 0.0, 4.0, 10)
    h.nemesis(4.0, "start-partition")
    h.nemesis(6.0, "stop-partition")
    h.steady(0, 8.0, 10.0, 10)
    result = CheckResult.load(run / store.RESULTS_FILE)
    result.stats["throughput"] = phase_throughput(h.sorted()).as_json()
    result.save(run / store.RESULTS_FILE)
    html = write_report(run).read_text(encoding="utf-8")
    section = html[html.index('<section id="throughput">'):]
    section = section[:section.index("</section>")]
    assert "Throughput by phase" in section
    assert [cell for cell in ("before-faults", "fault", "after-heal") if f"<td>{cell}</td>" in section] == [
        "before-faults", "fault", "after-heal"]
    assert "<td class='num'>2</td>" in section  # recovery 2 s after the heal at 6 s
    assert "Pre-fault rate 10 ok ops/s" in section


def test_an_unchecked_run_has_no_throughput_section(tmp_path) -> None:
    from harness import store
    from harness.report import write_report
    from tests.harness.test_report_support import write_valid_run

    run = tmp_path / "run"
    write_valid_run(run)
    (run / store.RESULTS_FILE).unlink()
    assert 'id="throughput"' not in write_report(run).read_text(encoding="utf-8")
