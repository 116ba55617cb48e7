"""Partitions as nftables rules: one partitioner for the run's private network namespace and
for a Docker bridge on the host.

One table holds two sets of directed address pairs and one chain:

- `blocked`: every packet from saddr to daddr is dropped (a grudge: daddr does not hear
  saddr). With TCP a grudge in one direction stalls both directions of every connection
  between the two (ACKs and SYN-ACKs are lost too), exactly like Jepsen's iptables drops.
- `blocked_data`: only packets longer than 80 bytes are dropped. 80 bytes is the largest
  IPv4 + TCP header (20 + 60), so SYNs and pure ACKs pass and only segments carrying data
  are lost: saddr's messages never reach daddr while daddr's still reach saddr. That is a
  one-way partition for TCP (payloads under 28 bytes with timestamps would slip through;
  no Kafka request or response is that small).

Where the table lives (`NftPartitioner`, `bridge_partitioner`):

- the local back end: `inet logquake` on the input hook, inside the run's private network
  namespace (every broker is an address of its loopback); the table dies with the namespace.
- the Docker back ends (cluster/docker_backend.py, cluster/docker_compose.py): `bridge
  logquake_<run id>` on the host's bridge forward hook, which every frame between two
  containers of one bridge network crosses; the rules stay in force while a container is
  killed and started again, and only addresses of the run's own subnet may be cut. The host's
  own traffic to the containers is bridge output, not forward, so clients keep reaching every
  node. The cluster's teardown deletes the table by name (the cluster package may not import
  this one, and needs no more than that).

Each topology change is one `nft -f` transaction (flush both sets + add the new pairs), so
no packet ever sees a half-applied topology. Heal is flushing both sets.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import threading
from collections.abc import Iterable

from nemeses.net.sandbox import inside_private_namespace

TABLE_FAMILY = "inet"
TABLE_NAME = "logquake"
BLOCKED_SET = "blocked"
BLOCKED_DATA_SET = "blocked_data"
MAX_HEADER_BYTES = 80
NFT_TIMEOUT_S = 10.0

Pair = tuple[str, str]


class NftError(RuntimeError):
    """nft refused a command; the message holds its error text."""


def _check_address(address: str) -> str:
    try:
        return str(ipaddress.IPv4Address(address))
    except ValueError:
        raise ValueError(f"{address!r} is not an IPv4 address") from None


def _elements(pairs: Iterable[Pair]) -> str:
    return ", ".join(f"{_check_address(src)} . {_check_address(dst)}" for src, dst in sorted(set(pairs)))


class NftPartitioner:
    """Directed cuts between addresses as one nftables table (see the module docstring):
    install, apply (the whole topology, atomically), heal, current (read back from the
    kernel), remove. The default is the local back end's table in the run's namespace."""

    def __init__(self, *, require_private_namespace: bool = True, family: str = TABLE_FAMILY, table: str = TABLE_NAME,
                 hook: str = "input", subnet: ipaddress.IPv4Network | None = None) -> None:
        if shutil.which("nft") is None:
            raise NftError("`nft` is not installed; install it with: apt-get install nftables")
        if require_private_namespace and not inside_private_namespace():
            # Rules in the host's namespace would cut the host's own loopback traffic and
            # survive a crash of the run.
            raise NftError("partitions need the run's private network namespace; run the command "
                           "through nemeses.net.sandbox (logquake test does this itself)")
        self.family = family
        self.table = table
        self.hook = hook
        self.subnet = subnet
        self._installed = False
        self._lock = threading.Lock()  # apply and heal may come from the nemesis and the teardown

    @property
    def _qualified(self) -> str:
        return f"{self.family} {self.table}"

    def _nft(self, script: str) -> str:
        result = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=NFT_TIMEOUT_S)
        if result.returncode != 0:
            raise NftError(f"nft failed: {result.stderr.strip()}\n--- script ---\n{script}")
        return result.stdout

    def _check(self, pairs: Iterable[Pair]) -> list[Pair]:
        checked = [(_check_address(src), _check_address(dst)) for src, dst in pairs]
        if self.subnet is not None:
            for pair in checked:
                for address in pair:
                    if ipaddress.IPv4Address(address) not in self.subnet:
                        raise ValueError(f"{address} is not on the run's network {self.subnet}: only its containers are cut")
        return checked

    def install(self) -> None:
        """Create (or recreate, empty) the table, its sets and its chain."""
        table = self._qualified
        with self._lock:
            self._nft(
                f"add table {table}\n"
                f"delete table {table}\n"
                f"table {table} {{\n"
                f"  set {BLOCKED_SET} {{ type ipv4_addr . ipv4_addr; }}\n"
                f"  set {BLOCKED_DATA_SET} {{ type ipv4_addr . ipv4_addr; }}\n"
                f"  chain cut {{\n"
                f"    type filter hook {self.hook} priority -10; policy accept;\n"
                f"    ip saddr . ip daddr @{BLOCKED_SET} drop\n"
                f"    ip saddr . ip daddr @{BLOCKED_DATA_SET} ip length > {MAX_HEADER_BYTES} drop\n"
                f"  }}\n"
                f"}}\n")
            self._installed = True

    def apply(self, blocked: Iterable[Pair] = (), blocked_data: Iterable[Pair] = ()) -> None:
        """Replace the whole topology atomically: exactly these directed pairs are cut."""
        full, data = _elements(self._check(blocked)), _elements(self._check(blocked_data))
        if not self._installed:
            self.install()
        table = self._qualified
        lines = [f"flush set {table} {BLOCKED_SET}", f"flush set {table} {BLOCKED_DATA_SET}"]
        if full:
            lines.append(f"add element {table} {BLOCKED_SET} {{ {full} }}")
        if data:
            lines.append(f"add element {table} {BLOCKED_DATA_SET} {{ {data} }}")
        with self._lock:
            self._nft("\n".join(lines) + "\n")

    def heal(self) -> None:
        """Let every packet through again (idempotent)."""
        if self._installed:
            self.apply((), ())

    def current(self) -> tuple[set[Pair], set[Pair]]:
        """The pairs in force, read back from the kernel: (blocked, blocked_data)."""
        if not self._installed:
            return set(), set()
        return self._read_set(BLOCKED_SET), self._read_set(BLOCKED_DATA_SET)

    def _read_set(self, name: str) -> set[Pair]:
        result = subprocess.run(["nft", "-j", "list", "set", self.family, self.table, name],
                                capture_output=True, text=True, timeout=NFT_TIMEOUT_S)
        if result.returncode != 0:
            raise NftError(f"nft failed: {result.stderr.strip()}")
        pairs: set[Pair] = set()
        for item in json.loads(result.stdout)["nftables"]:
            for element in item.get("set", {}).get("elem", []):
                src, dst = element["concat"]
                pairs.add((src, dst))
        return pairs

    def remove(self) -> None:
        if self._installed:
            with self._lock:
                self._nft(f"add table {self._qualified}\ndelete table {self._qualified}\n")
            self._installed = False


def bridge_partitioner(table: str, subnet: ipaddress.IPv4Network | str) -> NftPartitioner:
    """The partitioner of a Docker bridge network on the host: table `bridge <table>` on the
    forward hook, cutting only addresses of `subnet` (the run's network)."""
    return NftPartitioner(require_private_namespace=False, family="bridge", table=table, hook="forward",
                          subnet=ipaddress.IPv4Network(subnet))
