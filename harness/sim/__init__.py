"""Simulated runs (`logquake test --sim`): a whole test (controller, brokers, clients,
nemeses, generator) in one process on virtual time, with the real run's generators, fault
packages, history format, checkers and report.

    loop.py      SimInterpreter: the run loop as coroutines on the simulation's event loop
    workload.py  the workloads a simulation can drive, with aiokafka clients
    run.py       the phases (execute_sim), results.json's `simulated` record, fault
                 schedules given as data (FaultOp)

The cluster side is `cluster/sim/` (SimCluster, SimEventLoop, SimAsyncio); the nemeses'
door into it is `nemeses/sim_control.py`.
"""
