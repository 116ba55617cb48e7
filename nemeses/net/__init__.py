"""Network back end of the nemeses: a private network namespace per run, and nftables
partitions inside it.

`sandbox` runs a command (the whole `logquake test`, or a test's scenario) inside a fresh
network + PID + mount namespace made with `unshare`; `init` is that namespace's PID 1;
`nft` blocks directed address pairs with one atomic nftables transaction per topology
change. Everything (rules, namespace, broker processes, libfaketime's shm files) dies with
the run, even when the run is killed with SIGKILL. See `sandbox` for why it is built so.
"""
