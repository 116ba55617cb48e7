"""A deterministic asyncio event loop for the simulator, so an unmodified asyncio Kafka client
(aiokafka) runs inside the simulation, on the cluster's timeline.

One timeline, one scheduler: the loop keeps no timer heap of its own. `call_at` puts each
asyncio timer on the simulator's `VirtualScheduler`, beside the brokers' and the network's
events, ordered by (deadline, sequence). When no callback is ready, the loop's "select"
fires scheduler events one at a time (the clock jumping to each deadline) until one of them
makes an asyncio callback ready: a due timer, bytes arriving on a connection. Ready
callbacks run in FIFO order, as in any asyncio loop. Nothing waits on real time, real I/O or
another thread, so a run is a function of its seed.

Connections are the simulated network's (see `aio_transport`); anything else a real loop can
do with the outside world (sockets, executors, subprocesses, signals, threads) raises
`UnsupportedInSimulation` naming the call.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import math
import socket
from collections.abc import Callable
from typing import Any, Protocol

from cluster.runtime.virtual_time import VirtualScheduler, VirtualTimer


class UnsupportedInSimulation(RuntimeError):
    """The client asked the loop for something the simulation does not provide."""


class SimulationStalled(RuntimeError):
    """Nothing is ready and no event is pending: every task waits for something that can
    never happen (a real loop would block forever)."""


class SimulationSpinning(RuntimeError):
    """Callbacks stayed ready for `SPIN_LIMIT` loop iterations in a row at one virtual
    instant: some task busy-waits for a change only time could bring. On a real clock it
    would burn a CPU while time passed; on the virtual clock time never moves, so the run
    stops here instead of hanging, with the message naming the instant."""


# Loop iterations at one instant before a busy wait is declared. A run's busiest instants
# (a broker's answer waking a dozen client tasks) take tens.
SPIN_LIMIT = 100_000


class Connector(Protocol):
    """What the loop needs from the simulated network (implemented by `aio_transport`)."""

    def resolve(self, host: str) -> str | None: ...

    async def connect(self, loop: SimEventLoop, protocol_factory: Callable[[], asyncio.BaseProtocol], address: str,
                      port: int) -> tuple[asyncio.Transport, asyncio.BaseProtocol]: ...


class _OrderedTask(asyncio.Task):  # type: ignore[type-arg]
    """A task whose hash is its creation number on its loop, not its address: sets of tasks
    (asyncio.wait's, aiokafka's pending fetches) iterate in one order in every run, so
    two tasks that finish at one instant are handled in the same order every time."""

    _sequence_number = 0

    def __hash__(self) -> int:
        return self._sequence_number


class _OrderedFuture(asyncio.Future):  # type: ignore[type-arg]
    """A future hashed by its creation number on its loop (see _OrderedTask)."""

    _sequence_number = 0

    def __hash__(self) -> int:
        return self._sequence_number


class _Handle(asyncio.Handle):
    """asyncio.Handle as the loop makes it outside debug mode, without asking the loop for its
    debug flag on every creation (a simulated minute makes ~100,000 of them)."""

    __slots__ = ()

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None = None) -> None:
        self._context = context if context is not None else contextvars.copy_context()
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None


class _VirtualTimerHandle(asyncio.TimerHandle):
    __slots__ = ("_virtual",)

    _virtual: VirtualTimer | None

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...], loop: asyncio.AbstractEventLoop,
                 context: contextvars.Context | None = None) -> None:
        if loop.get_debug():
            super().__init__(when, callback, args, loop, context)
        else:  # as TimerHandle's, without asking for the debug flag twice
            _Handle.__init__(self, callback, args, loop, context)  # type: ignore[arg-type]
            self._when = when
            self._scheduled = False
        self._virtual = None


class _VirtualSelector:
    """Stands where a selector would: instead of blocking on I/O, it runs simulator events
    until an asyncio callback is ready."""

    def __init__(self, loop: SimEventLoop) -> None:
        self._loop = loop
        self._spins = 0

    def select(self, timeout: float | None) -> list[Any]:
        if timeout != 0:
            self._spins = 0
            self._loop._run_events_until_ready()
        else:
            self._spins += 1
            if self._spins >= SPIN_LIMIT:
                self._spins = 0
                raise SimulationSpinning(f"{SPIN_LIMIT} loop iterations at virtual time {self._loop.now_ns()} ns without "
                                         "waiting: a task busy-waits for something only time could bring")
        return []

    def close(self) -> None:
        pass


class SimEventLoop(asyncio.BaseEventLoop):
    def __init__(self, scheduler: VirtualScheduler, connector: Connector) -> None:
        super().__init__()
        self._scheduler = scheduler
        self._clock = scheduler.clock
        self._connector = connector
        self._selector = _VirtualSelector(self)
        # Timers are exact on the virtual clock: a timer fires at its deadline, never early.
        self._clock_resolution = 1e-9
        self.events_run = 0
        # Tasks and futures hash by creation order, not by id() (address), so sets of them
        # iterate alike in every run of a seed.
        self._created = itertools.count(1)
        self.set_task_factory(self._new_task)

    def _new_task(self, loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task:  # type: ignore[type-arg]
        task = _OrderedTask(coro, loop=loop, context=context)
        task._sequence_number = next(self._created)
        return task

    def create_future(self) -> asyncio.Future:  # type: ignore[type-arg]
        future = _OrderedFuture(loop=self)
        future._sequence_number = next(self._created)
        return future

    # ---- time ------------------------------------------------------------------------------

    def time(self) -> float:
        return self._clock.monotonic_ns() / 1e9

    def now_ns(self) -> int:
        """The virtual time, exact (for traces: `time()` is a float)."""
        return self._clock.monotonic_ns()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        now_ns = self._clock.monotonic_ns()
        return self._timer_at_ns(now_ns / 1e9 + max(delay, 0.0), now_ns + max(1, math.ceil(delay * 1e9)), callback, args, context)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        now_ns = self._clock.monotonic_ns()
        return self._timer_at_ns(when, max(math.ceil(when * 1e9), now_ns + 1), callback, args, context)

    # Every timer fires at least 1 ns after it was set, never at the instant that set it. On
    # a real clock time has always moved by then, and client code relies on it: aiokafka's
    # auto-commit waits max(0, deadline - now) and commits only once now > deadline, so at
    # now == deadline it waits 0 s and asks again; its linger timer re-arms for the ~5e-17 s
    # its float arithmetic leaves, which vanishes when added to the time. On a clock that
    # stands still while code runs, both spun at one instant forever. Rounded up, a timer
    # also never fires before `when`.

    def _timer_at_ns(self, when: float, deadline_ns: int, callback: Callable[..., object], args: tuple[Any, ...],
                     context: Any) -> asyncio.TimerHandle:
        self._check_closed()
        handle = _VirtualTimerHandle(when, callback, args, self, context)
        handle._virtual = self._scheduler.call_at_ns(deadline_ns, functools.partial(self._timer_due, handle))
        handle._scheduled = True
        return handle

    def _timer_due(self, handle: _VirtualTimerHandle) -> None:
        handle._scheduled = False
        handle._virtual = None
        # The cluster may run on after the loop is closed (sim.run_for): its timers are void.
        if not handle._cancelled and not self.is_closed():
            self._ready.append(handle)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        assert isinstance(handle, _VirtualTimerHandle)
        if handle._virtual is not None:
            handle._virtual.cancel()
            handle._virtual = None
        handle._scheduled = False

    # ---- the loop's turn ---------------------------------------------------------------------

    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.Handle:
        if self._debug:
            return super().call_soon(callback, *args, context=context)
        if self._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def _run_once(self) -> None:
        """BaseEventLoop._run_once for this loop, outside debug mode: its own timer heap is
        always empty (timers live on the scheduler) and there are no I/O events, so a turn is
        the selector's (run simulator events until a callback is ready, or count a spin), then
        every callback that was ready, in order."""
        if self._debug:
            super()._run_once()
            return
        ready = self._ready
        self._selector.select(0 if ready or self._stopping else None)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    def _run_events_until_ready(self) -> None:
        while not self._ready and not self._stopping:
            if not self._scheduler.step():
                raise SimulationStalled("no callback is ready and no simulated event is pending: every task waits forever")
            self.events_run += 1

    # BaseEventLoop's hooks for a selector loop: nothing to process, nobody to wake.
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    # ---- names and connections -------------------------------------------------------------

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0,
                          flags: int = 0) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        address = self._connector.resolve(name)
        if address is None:
            raise socket.gaierror(socket.EAI_NONAME, f"Name or service not known: {name} (no such host in the simulation)")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port)))]

    async def create_connection(self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None = None,
                                port: int | None = None, *, ssl: Any = None, family: int = 0, proto: int = 0, flags: int = 0,
                                sock: Any = None, local_addr: Any = None, server_hostname: Any = None, **options: Any,
                                ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        if ssl is not None or sock is not None or local_addr is not None or server_hostname is not None:
            raise UnsupportedInSimulation("loop.create_connection() with ssl, sock, local_addr or server_hostname is not available in the simulation")
        if host is None or port is None:
            raise ValueError("host and port are required")
        infos = await self.getaddrinfo(host, port)
        address, resolved_port = infos[0][4]
        return await self._connector.connect(self, protocol_factory, address, resolved_port)

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any, context: Any = None) -> asyncio.Handle:
        raise UnsupportedInSimulation("loop.call_soon_threadsafe() is not available in the simulation: there are no other threads")


def _unsupported(name: str) -> Callable[..., Any]:
    def refuse(self: SimEventLoop, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedInSimulation(f"loop.{name}() is not available in the simulation (no real I/O, threads or processes)")
    refuse.__name__ = name
    return refuse


for _name in ("getnameinfo", "run_in_executor", "set_default_executor", "create_server", "create_unix_connection",
              "create_unix_server", "create_datagram_endpoint", "connect_accepted_socket", "connect_read_pipe",
              "connect_write_pipe", "subprocess_exec", "subprocess_shell", "add_signal_handler", "remove_signal_handler",
              "add_reader", "remove_reader", "add_writer", "remove_writer", "sock_recv", "sock_recv_into", "sock_recvfrom",
              "sock_recvfrom_into", "sock_sendall", "sock_sendto", "sock_connect", "sock_accept", "sock_sendfile", "sendfile",
              "start_tls"):
    setattr(SimEventLoop, _name, _unsupported(_name))
