"""Generators under simulate(): Jepsen's combinator semantics, with fake time and no threads."""

import pytest

from harness.generator import (
    Any, Completion, Cycle, Delay, EachThread, FlipFlop, Invocation, Limit, Log, Map, Mix,
    Observe, Phases, Rand, Repeat, Seq, Sleep, Stagger, Stream, TimeLimit, clients, lift,
    nemesis, once, simulate, with_nemesis,
)
from harness.generator.core import Context
from harness.generator.simulate import perfect

S = 1_000_000_000


def invokes(history):
    """Invocations; nemesis ops are info on both ends, so the first of each pair."""
    out, nemesis_open = [], False
    for op in history:
        if op.process == "nemesis":
            if not nemesis_open:
                out.append(op)
            nemesis_open = not nemesis_open
        elif op.type == "invoke":
            out.append(op)
    return out


def fs(history):
    return [op.f for op in invokes(history)]


def test_seq_runs_each_in_order_and_every_invocation_completes():
    h = simulate(clients(Seq({"f": "a"}, [{"f": "b"}, {"f": "c"}], None, {"f": "d"})), concurrency=1)
    assert fs(h) == ["a", "b", "c", "d"]
    assert [op.type for op in h] == ["invoke", "ok"] * 4


def test_ops_go_to_free_threads_and_wait_when_all_are_busy():
    h = simulate(clients(Repeat({"f": "w"}, 5)), concurrency=2, complete=perfect(latency_ns=100))
    procs = [op.process for op in invokes(h)]
    assert procs == [0, 1, 0, 1, 0]
    # at most two ops in flight at once
    in_flight = 0
    for op in h:
        in_flight += 1 if op.type == "invoke" else -1
        assert 0 <= in_flight <= 2


def test_phases_wait_for_every_outstanding_op():
    slow_first = {"slow": 1000, "fast": 1}

    def complete(inv):
        return Completion("ok", inv.value), slow_first.get(inv.f, 1)

    h = simulate(Phases(clients([{"f": "slow"}, {"f": "fast"}]), clients({"f": "after"})),
                 concurrency=2, complete=complete)
    after = next(op for op in h if op.f == "after" and op.type == "invoke")
    slow_done = next(op for op in h if op.f == "slow" and op.type == "ok")
    assert after.index > slow_done.index and after.time_ns >= 1000


def test_any_takes_the_soonest_op_and_updates_reach_every_child():
    late = Invocation(f="late", time_ns=50)
    early = Invocation(f="early", time_ns=10)
    h = simulate(Any(late, early), concurrency=2)
    assert fs(h) == ["early", "late"]


def test_mix_draws_from_every_child_deterministically_by_seed():
    def run(seed):
        g = clients(Limit(200, Mix([Repeat({"f": "a"}), Repeat({"f": "b"}), Repeat({"f": "c"})], Rand.from_seed(seed))))
        return fs(simulate(g, concurrency=3))

    first = run(7)
    assert len(first) == 200 and set(first) == {"a", "b", "c"}
    for f in "abc":  # uniform: each about a third
        assert 40 < first.count(f) < 100
    assert run(7) == first
    assert run(8) != first


def test_mix_drops_exhausted_children():
    g = clients(Mix([once({"f": "a"}), Repeat({"f": "b"}, 3)], Rand.from_seed(1)))
    assert sorted(fs(simulate(g, concurrency=1))) == ["a", "b", "b", "b"]


def test_limit_once_repeat_cycle_and_flip_flop():
    assert fs(simulate(clients(Limit(3, Repeat({"f": "x"}))), concurrency=1)) == ["x"] * 3
    assert fs(simulate(clients(once(Repeat({"f": "x"}))), concurrency=1)) == ["x"]
    assert fs(simulate(Cycle([{"f": "a"}, {"f": "b"}], times=3), concurrency=1)) == ["a", "b"] * 3
    assert fs(simulate(Limit(5, FlipFlop(Repeat({"f": "start"}), Repeat({"f": "stop"}))), concurrency=1)) == [
        "start", "stop", "start", "stop", "start"]
    assert fs(simulate(Cycle([]), concurrency=1)) == []


def test_repeat_reasks_the_original_generator():
    # Jepsen's repeat: a fixed op repeats verbatim, a sequence restarts at its first op.
    assert fs(simulate(Repeat([{"f": "a"}, {"f": "b"}], 3), concurrency=1)) == ["a", "a", "a"]


def test_time_limit_stops_at_its_deadline():
    g = TimeLimit(1.0, Delay(0.1, clients(Repeat({"f": "w"}))))
    h = invokes(simulate(g, concurrency=1))
    assert len(h) == 10
    assert all(op.time_ns < 1 * S for op in h)


def test_time_limit_starts_when_first_asked_not_at_zero():
    g = clients(Phases(Sleep(5), TimeLimit(1.0, Delay(0.5, Repeat({"f": "w"})))))
    h = invokes(simulate(g, concurrency=1))
    assert [op.time_ns for op in h] == [5 * S, int(5.5 * S)]


def test_stagger_spaces_ops_around_the_rate_across_all_threads():
    g = TimeLimit(100, Stagger(0.1, clients(Repeat({"f": "w"})), Rand.from_seed(3)))
    h = invokes(simulate(g, concurrency=4))
    assert 800 < len(h) < 1200  # 10 Hz for 100 s, uniform gaps in [0, 0.2 s)
    gaps = [b.time_ns - a.time_ns for a, b in zip(h, h[1:])]
    assert max(gaps) < 0.2 * S and min(gaps) >= 0


def test_delay_is_exact():
    h = invokes(simulate(Limit(4, Delay(0.25, Repeat({"f": "w"}))), concurrency=1))
    assert [op.time_ns for op in h] == [0, S // 4, S // 2, 3 * S // 4]


def test_sleep_inside_phases_pauses_the_test_and_log_is_not_an_op():
    logs = []
    h = simulate(Phases({"f": "a"}, Log("waiting"), Sleep(10), {"f": "b"}), concurrency=2, logs=logs)
    assert fs(h) == ["a", "b"]
    assert logs == ["waiting"]
    assert invokes(h)[1].time_ns >= 10 * S


def test_each_thread_gives_every_thread_its_own_copy():
    g = clients(EachThread(lambda t: [{"f": "w", "value": t}, {"f": "w", "value": t * 10}]))
    h = invokes(simulate(g, concurrency=3))
    by_process = {}
    for op in h:
        by_process.setdefault(op.process, []).append(op.value)
    assert by_process == {0: [0, 0], 1: [1, 10], 2: [2, 20]}


def test_routing_nemesis_ops_to_the_nemesis_and_client_ops_to_clients():
    g = with_nemesis(Limit(3, Repeat({"f": "start-kill"})), Limit(6, Repeat({"f": "send"})))
    h = invokes(simulate(g, concurrency=2))
    assert {op.process for op in h if op.f == "start-kill"} == {"nemesis"}
    assert {op.process for op in h if op.f == "send"} <= {0, 1}
    names = [op.f for op in h]
    assert names.count("send") == 6 and names.count("start-kill") == 3


def test_nemesis_only_generator_never_uses_client_threads():
    h = invokes(simulate(nemesis(Limit(2, Repeat({"f": "start-pause"}))), concurrency=3))
    assert [op.process for op in h] == ["nemesis", "nemesis"]


def test_info_retires_the_process_and_the_thread_continues_under_a_new_id():
    def complete(inv):
        return Completion("info" if inv.value == "crash" else "ok", inv.value), 10

    g = clients(Phases({"f": "w", "value": "a"}, {"f": "w", "value": "crash"}, {"f": "w", "value": "b"},
                       {"f": "w", "value": "crash"}, {"f": "w", "value": "c"}))
    h = simulate(g, concurrency=3, complete=complete)
    procs = [(op.value, op.process) for op in invokes(h)]
    assert procs == [("a", 0), ("crash", 0), ("b", 3), ("crash", 3), ("c", 6)]


def test_end_process_retires_even_on_fail():
    def complete(inv):
        return Completion("fail", None, error="producer-fenced", end_process=inv.value == 1), 1

    h = simulate(clients(Phases({"f": "w", "value": 1}, {"f": "w", "value": 2})), concurrency=2, complete=complete)
    assert [op.process for op in invokes(h)] == [0, 2]


def test_stream_is_lazy_and_asking_twice_gives_the_same_op():
    drawn = []

    def items():
        for i in range(3):
            drawn.append(i)
            yield {"f": "w", "value": i}

    s = Stream(items())
    ctx = Context.initial(1)
    first = s.op(ctx)
    again = s.op(ctx)
    assert first[0] == again[0] and drawn == [0]
    assert fs(simulate(s, concurrency=1)) == ["w", "w", "w"]


def test_observe_sees_every_event_once():
    class Count:
        def __init__(self):
            self.events = []

        def observe(self, event):
            self.events.append(event.type)

    counter = Count()
    simulate(clients(Observe(counter, Repeat({"f": "w"}, 3))), concurrency=1)
    assert counter.events == ["invoke", "ok"] * 3


def test_map_transforms_ops():
    h = simulate(clients(Map(lambda op: op.with_(value=42), Repeat({"f": "w"}, 2))), concurrency=1)
    assert [op.value for op in invokes(h)] == [42, 42]


def test_asking_twice_is_pure():
    g = TimeLimit(10, Stagger(0.5, Mix([Repeat({"f": "a"}), Repeat({"f": "b"})], Rand.from_seed(9)), Rand.from_seed(4)))
    ctx = Context.initial(2)
    a, b = g.op(ctx), g.op(ctx)
    assert a[0] == b[0]
    assert a[1].op(ctx.at(10**9))[0] == b[1].op(ctx.at(10**9))[0]


def test_pending_with_nothing_in_flight_is_reported_not_looped():
    # process 3 runs on thread 1, whose current process is 1: it can never be scheduled
    with pytest.raises(RuntimeError, match="pending"):
        simulate(clients(Invocation(f="w", process=3)), concurrency=2)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="needs an 'f'"):
        lift({"value": 1})
    with pytest.raises(TypeError, match="cannot make a generator"):
        lift(3)
    with pytest.raises(ValueError, match="time limit"):
        TimeLimit(-1, None)
    with pytest.raises(ValueError, match="completion type"):
        Completion("maybe")
    with pytest.raises(ValueError, match="concurrency"):
        Context.initial(0)


def test_same_seed_same_schedule_different_seed_different():
    def run(seed):
        g = TimeLimit(30, with_nemesis(
            Stagger(5, FlipFlop(Repeat({"f": "start-kill"}), Repeat({"f": "stop-kill"})), Rand.from_seed(seed, "nemesis")),
            Stagger(0.01, EachThread(lambda t: Mix([Repeat({"f": "send", "value": t}), Repeat({"f": "poll"})],
                                                    Rand.from_seed(seed, "client", t))), Rand.from_seed(seed, "rate"))))
        return [(op.process, op.f, op.value, op.time_ns) for op in invokes(simulate(g, concurrency=3))]

    assert run(1) == run(1)
    assert run(1) != run(2)
