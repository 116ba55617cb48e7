"""Nemeses: fault packages (fault + seeded schedule + heal + plot colour) and their mechanisms.

Packages: kill (SIGKILL + restart), pause (SIGSTOP/SIGCONT), partition (nftables topologies),
clock (libfaketime bump/strobe/reset); `combined` puts several on one schedule with quiet
periods. `base` holds the contract with the harness and `build_packages`; `targets` the pure
choice of brokers and topologies; `net` the private network namespace and nftables back end.
They reach the bundled cluster only through cluster.control.
"""
