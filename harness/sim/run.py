"""A simulated run's phases: harness.run's, on one virtual timeline in this process.

set up the simulated cluster (`cluster.sim.SimCluster`, seeded from the run seed as the real
cluster is) and the workload's topics → main phase (the workload at the spec's rate, the
fault schedule on the nemesis) → heal every fault → quiet period → final phase → tear down
→ check → report. The generators, the fault packages, the schedule, the heal order, the
checkers and the report are the real run's (harness.run); the run loop is `SimInterpreter`
and the clients are aiokafka on the simulation's event loop. Phase lengths are simulated
seconds. History timestamps are virtual nanoseconds, so one command and seed give a
byte-identical history.jsonl.

results.json and `simulation.json` say the run was simulated and how fast it went
(simulated seconds per wall second, measured outside the simulation).

A fault schedule can be given as data (`fault_ops`: timed nemesis ops) instead of the
packages' seeded schedule, for tools that search over schedules.

An exception raised out of the simulation's event loop (a simulated node's code in a timer
callback) abandons the run: the loop cannot run on, so the faults are healed and the heal
recorded at once, before the history is closed, and the exception goes to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness import store
from harness.generator import Generator, Invocation, Seq, Sleep, TimeLimit, clients, nemesis as on_nemesis
from harness.generator.core import Completion
from harness.run import HarnessError, Run, RunOutcome, check, combine, fault_schedule, heal, main_generator, report
from harness.sim.loop import SimInterpreter
from harness.sim.workload import NotSimulated, check_simulated
from nemeses.combined import QUIET

SIMULATION_FILE = "simulation.json"
# Simulated seconds allowed beyond the phases' own limits (set-up, op timeouts, closes).
SLACK_S = 600.0
READY_TIMEOUT_MS = 60_000
CLOSE_WAIT_S = 5.0


@dataclass(frozen=True)
class FaultOp:
    """One nemesis op of a schedule given as data: `f` at `at_s` simulated seconds after
    the main phase starts."""

    at_s: float
    f: str
    value: Any = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "FaultOp":
        if not isinstance(raw, Mapping) or set(raw) - {"at_s", "f", "value"} or "at_s" not in raw or "f" not in raw:
            raise ValueError(f"a fault op is {{'at_s': seconds, 'f': 'start-kill', 'value': ...}}, got {raw!r}")
        at_s = raw["at_s"]
        if not isinstance(at_s, (int, float)) or isinstance(at_s, bool) or at_s < 0:
            raise ValueError(f"fault op at_s {at_s!r} must be a non-negative number of seconds")
        return cls(float(at_s), str(raw["f"]), raw.get("value"))


def scheduled_faults(ops: Sequence[FaultOp]) -> Generator:
    """The nemesis generator for a schedule given as data: each op at its time (simulated
    faults take no time, so the sleeps between them keep the times exact)."""
    items: list[Any] = []
    now_s = 0.0
    for op in sorted(ops, key=lambda o: o.at_s):
        if op.at_s > now_s:
            items.append(Sleep(op.at_s - now_s))
            now_s = op.at_s
        items.append(Invocation(f=op.f, value=op.value))
    return on_nemesis(Seq(*items))


def execute_sim(run: Run, fault_ops: Sequence[FaultOp] | None = None, *, check_history: bool = True) -> RunOutcome:
    """Run the phases on a simulated cluster. With `check_history` False the run ends with
    its history (no checkers, no report; the verdict is None), for replay checks and
    schedule searches that judge the history themselves."""
    spec = run.spec
    try:
        check_simulated(spec)
    except NotSimulated as exc:
        raise HarnessError(str(exc)) from None
    # Import the client before the simulated environment points its names at the simulation.
    import workloads.clients.aiokafka_queue  # noqa: F401
    from cluster.sim.aio_runtime import SimAsyncio
    from cluster.sim.cluster import BROKER_PORT, SimCluster, SimTimeout, broker_host
    from harness.generator import derive_seed

    run.set_phase("setup")
    try:
        sim = SimCluster(spec.brokers, dict(spec.cluster_config), seed=derive_seed(spec.seed, "cluster") % 2**31,
                         controllers=getattr(spec, "controllers", 1))
    except (ValueError, KeyError) as exc:
        raise HarnessError(f"cannot build the simulated cluster: {exc}") from None
    try:
        sim.run_until(lambda: all(b.ready for b in sim.running_brokers()), READY_TIMEOUT_MS, step_ms=10,
                      what="every simulated broker registered")
    except SimTimeout as exc:
        raise HarnessError(str(exc)) from None
    bootstrap = ",".join(f"{broker_host(b)}:{BROKER_PORT}" for b in sim.broker_ids)
    run.bootstrap_servers = bootstrap
    run.log.info("simulated cluster of %d broker(s) at %s", spec.brokers, bootstrap)
    interrupted = False
    with _client_log_to(run), SimAsyncio(sim) as runtime:
        phases = _Phases(run, sim, runtime, bootstrap, fault_ops)
        phases_run = phases.run()
        try:
            interrupted = runtime.run(phases_run, timeout_s=spec.time_limit_s + spec.quiet_period_s +
                                      spec.final_time_limit_s + SLACK_S)
        except asyncio.TimeoutError:
            raise HarnessError(f"the simulated run did not end within {SLACK_S:g} simulated s of its phases' limits") from None
        except BaseException as exc:
            _abandon(run, phases, phases_run, exc)
            raise
        speed = runtime.speed
    run.history.close()
    if len(sim.controller_ids) > 1:
        from harness.quorum_report import write_quorum_report

        write_quorum_report(run.run_dir, sim.quorum_report(), run.log)
    info = {"simulated": True, "simulated_s": round(speed.simulated_s, 3), "wall_s": round(speed.wall_s, 3),
            "speed": round(speed.ratio, 2), "cpu_s": round(speed.cpu_s, 3), "client_requests": len(runtime.trace),
            "clients": phases.client_settings}
    (run.run_dir / SIMULATION_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    run.log.info("simulated %.1f s in %.1f wall s: %.1fx", speed.simulated_s, speed.wall_s, speed.ratio)
    if interrupted:
        return RunOutcome(run.run_dir, None, 130, True, "interrupted: history kept, faults healed")
    if not check_history:
        return RunOutcome(run.run_dir, None, 0, False, f"not checked; simulated {speed.simulated_s:.0f} s at {speed.ratio:.1f}x")
    run.set_phase("check")
    valid, message = check(run)
    record_simulation(run, info)
    report(run)
    from checkers.result import EXIT_CODES

    return RunOutcome(run.run_dir, valid, EXIT_CODES[valid], False,
                      f"{message}; simulated {speed.simulated_s:.0f} s at {speed.ratio:.1f}x")


def _abandon(run: Run, phases: "_Phases", phases_run: Any, exc: BaseException) -> None:
    """Something raised out of the simulation's event loop (a simulated node's code in a timer
    callback, say): the loop stopped with the phases' task pending and cannot run on. Close
    the phases' coroutine where it stopped, which heals the faults and records the heal now,
    while the history is open. Left pending, the coroutine was closed by the garbage collector
    after the caller had closed the history, and its heal raised HistoryWriteError there."""
    run.log.error("the simulation raised %s out of its event loop in the %s phase at %.3f simulated s: "
                  "healing and abandoning the run", type(exc).__name__, phases.phase,
                  phases.sim.clock.monotonic_ns() / 1e9, exc_info=exc)
    try:
        phases_run.close()
    except RuntimeError as close_exc:  # a close that awaited (stopped inside a client's close)
        run.log.error("closing the abandoned phases: %s", close_exc)


def _client_log_to(run: Run) -> contextlib.AbstractContextManager[None]:
    """aiokafka's log goes to harness.log, as librdkafka's does in a real run (not stderr,
    where a simulated run's reconnect attempts to dead brokers would flood the terminal),
    buffered: see harness.sim.run_log (the harness's own records are flushed at once). So
    does the simulated cluster's (`cluster` and below: elections, truncations, fencing), which
    a real run's brokers and controllers write to their own log files: on the terminal a
    hunt printed dozens of election warnings per example."""
    from harness.sim.run_log import buffered_run_log

    handler = getattr(run, "_log_handler", None)
    return buffered_run_log(handler, run.log, ("aiokafka", "cluster"))


def record_simulation(run: Run, info: dict[str, Any]) -> None:
    """results.json: `simulated: true` and the speed, at the top and among the stats (which
    the report shows)."""
    path = run.run_dir / store.RESULTS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run.log.exception("results.json could not be read to record the simulation")
        return
    summary = {k: v for k, v in info.items() if k != "clients"}
    raw["simulated"] = True
    raw["simulation"] = summary
    raw.setdefault("stats", {})["simulation"] = summary
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(raw, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)


class SimNemesisRouter:
    """harness.run.NemesisRouter for a simulated run: a package that can act on the
    simulation's time (`invoke_async`, the scripted faults) does so; the rest act at once."""

    def __init__(self, combined: Any):
        self.combined = combined

    def invoke(self, invocation: Invocation) -> Any:
        package = None if invocation.f == QUIET else self.combined.package_for(invocation.f)
        if package is not None and hasattr(package, "invoke_async"):
            return self._invoke_async(package, invocation)
        return Completion("info", self.combined.invoke(invocation.f, invocation.value))

    async def _invoke_async(self, package: Any, invocation: Invocation) -> Completion:
        return Completion("info", await package.invoke_async(invocation.f, invocation.value))

    def close(self) -> None:
        pass


class _Phases:
    def __init__(self, run: Run, sim: Any, runtime: Any, bootstrap: str, fault_ops: Sequence[FaultOp] | None):
        self.run_ = run
        self.sim = sim
        self.runtime = runtime
        self.bootstrap = bootstrap
        self.fault_ops = fault_ops
        self.client_settings: dict[str, Any] = {}
        self.phase = "setup"

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.run_.set_phase(phase)

    async def run(self) -> bool:
        """The phases on the simulation's loop; True when interrupted."""
        from harness.sim.workload import build
        from nemeses.base import NemesisError
        from nemeses.sim_control import SimControl, build_sim_packages

        run, spec, sim = self.run_, self.run_.spec, self.sim
        workload = build(spec, self.bootstrap, self.runtime.wall_ms)
        self.client_settings = workload.client_settings
        loop = asyncio.get_running_loop()
        before = set(asyncio.all_tasks())
        interp: SimInterpreter | None = None
        closing = False
        try:
            try:
                await workload.setup()
            except Exception as exc:
                raise HarnessError(f"workload set-up failed in the simulation: {exc}") from None
            control = SimControl(sim, schedule=lambda delay_s, action: loop.call_later(delay_s, action))
            try:
                run.packages = build_sim_packages(list(spec.nemeses), control, spec) if spec.nemeses else []
            except NemesisError as exc:
                raise HarnessError(str(exc)) from None
            combined = combine(run.packages) if run.packages else None
            if self.fault_ops is not None:
                if combined is None:
                    raise HarnessError("a fault schedule was given but no --nemesis packages to perform it")
                for op in self.fault_ops:
                    if op.f != "quiet":
                        try:
                            combined.package_for(op.f)
                        except ValueError as exc:
                            raise HarnessError(f"fault schedule: {exc}") from None
            interp = SimInterpreter(concurrency=spec.concurrency, open_client=workload.open_client, history=run.history,
                                    clock_ns=sim.clock.monotonic_ns, start_ns=0,
                                    nemesis=SimNemesisRouter(combined) if combined else None, log=run.log,
                                    on_op=run.progress.observe if run.progress else None)
            run.interpreter = interp  # type: ignore[assignment]  # heal() and request_stop() use it
            control.record_nemesis = interp.record_nemesis  # a chasing partition's cuts, as they happen
            if run.stop_requested.is_set():
                interp.stop()
            faults = scheduled_faults(self.fault_ops) if self.fault_ops is not None else fault_schedule(spec, combined)
            self.set_phase("main")
            interrupted = not await interp.run(main_generator(spec, workload.generator, faults))
            heal(run)
            if not interrupted:
                self.set_phase("quiet")
                await asyncio.sleep(spec.quiet_period_s)
                interrupted = run.stop_requested.is_set()
            if not interrupted and workload.final_generator is not None:
                self.set_phase("final")
                interrupted = not await interp.run(TimeLimit(spec.final_time_limit_s, clients(workload.final_generator)))
            self.set_phase("teardown")
            return interrupted
        except GeneratorExit:
            # Closed by _abandon: the loop cannot run, so nothing below may await.
            closing = True
            raise
        finally:
            if interp is not None:
                heal(run)  # heal even if a phase raised (once: heal() remembers)
            if not closing:
                if interp is not None:
                    await interp.close()
                await workload.close()
                await _cancel_the_rest(keep=before)


async def _cancel_the_rest(keep: set[asyncio.Task]) -> None:
    """End what the clients left running (connection readers of abandoned clients, a
    producer's retries), so the loop closes with nothing pending. `keep`: the tasks that
    were there before the phases (the ones waiting for them)."""
    current = asyncio.current_task()
    rest = sorted((t for t in asyncio.all_tasks() if t is not current and t not in keep and not t.done()), key=hash)
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=CLOSE_WAIT_S)
