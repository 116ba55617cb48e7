"""Nemeses: fault packages (fault + schedule + heal + plot colour).

partition, kill, pause, clock, packet, disk; network back ends nft (namespace), proxy, sim.
They reach the bundled cluster only through cluster.control.
"""
