"""logquake.strategies' anchored starts: a fault may start inside an earlier fault of its
schedule or just after it ends, so that the overlapping shapes the hunts need (a kill inside
a pause, a second cut soon after a partition) are drawn far more often than by starts drawn
uniformly over the run; the schedules stay plain faults with absolute times (printable, JSON
round-trippable) and still shrink to fewer, earlier, shorter faults."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import seed as hypothesis_seed

from logquake.strategies import Fault, _place, fault_schedules, schedule_json


def test_anchored_starts_resolve_inside_or_after_the_named_fault_within_the_run() -> None:
    pause = Fault("pause", "primaries", 0.5, 2.7)
    kill = Fault("kill", (2,), 0.0, 0.8)
    # Inside: 7 tenths after the pause starts; an offset past its end is held in its last tenth.
    assert _place([(pause, None), (kill, (0, "inside", 7))], 8)[1].start_s == 1.2
    assert _place([(pause, None), (kill, (0, "inside", 80))], 8)[1].start_s == 3.1
    # After: 3 tenths after it ends; never past the run's last tenth.
    assert _place([(pause, None), (kill, (0, "after", 3))], 8)[1].start_s == 3.5
    assert _place([(pause, None), (kill, (0, "after", 80))], 8)[1].start_s == 7.9
    # The anchor counts back from the fault it places (0: the one before), modulo those placed.
    first, second = Fault("kill", (0,), 1.0, 1.0), Fault("kill", (1,), 4.0, 1.0)
    placed = _place([(first, None), (second, None), (kill, (1, "after", 0))], 8)
    assert placed[2].start_s == 2.0
    assert _place([(first, None), (second, None), (kill, (2, "after", 0))], 8)[2].start_s == 5.0
    # The first fault has nothing before it: its own start stands.
    assert _place([(kill, (0, "inside", 5))], 8) == (kill,)


@settings(max_examples=300, deadline=None)
@given(schedule=fault_schedules(brokers=3, time_limit_s=5, kinds=("kill", "pause", "partition"), max_faults=4))
def test_anchored_schedules_stay_within_the_run_and_round_trip(schedule: tuple[Fault, ...]) -> None:
    for fault in schedule:
        assert 0 <= fault.start_s < 5 and 0.1 <= fault.duration_s <= 5
        assert round(fault.start_s, 1) == fault.start_s  # whole tenths: they print exactly
    written = json.loads(schedule_json(schedule, 3, 5))
    assert tuple(Fault.from_json(f) for f in written["faults"]) == schedule


def _kill_inside_a_long_pause(schedule: tuple[Fault, ...]) -> bool:
    return any(p.kind == "pause" and p.duration_s >= 1.1 and k.kind == "kill" and p.start_s <= k.start_s < p.end_s
               for p in schedule for k in schedule)


def _share(anchored: bool) -> int:
    """How many of 600 drawn schedules (the ELR hunt's bounds, seeds 1-3) hold a kill that
    starts inside a pause of more than a second."""
    hits = 0
    for seed in (1, 2, 3):
        @settings(max_examples=200, database=None, deadline=None, phases=(Phase.generate,),
                  suppress_health_check=list(HealthCheck))
        @hypothesis_seed(seed)
        @given(fault_schedules(3, 8, ("pause", "kill"), max_faults=3, max_duration_s=3, max_targets={"kill": 1},
                               anchored=anchored))
        def draw(schedule: tuple[Fault, ...]) -> None:
            nonlocal hits
            hits += _kill_inside_a_long_pause(schedule)

        draw()
    return hits


def test_anchoring_draws_a_fault_inside_another_more_often() -> None:
    uniform, anchored = _share(False), _share(True)
    assert anchored > 1.3 * uniform, (uniform, anchored)


def test_an_anchored_shape_shrinks_to_its_earliest_shortest_form() -> None:
    # "A kill starts inside a pause of at least 1.1 s": two faults, both at 0, the kill for
    # the shortest time, the pause exactly 1.1 s (which brokers is not the point here).
    minimal = find(fault_schedules(3, 8, ("kill", "pause"), max_faults=3), _kill_inside_a_long_pause,
                   settings=settings(max_examples=2000, database=None, derandomize=True))
    assert sorted((f.kind, f.start_s, f.duration_s) for f in minimal) == [("kill", 0.0, 0.1), ("pause", 0.0, 1.1)]
