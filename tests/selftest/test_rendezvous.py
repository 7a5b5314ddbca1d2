"""The rendezvous ports every multi-rank probe uses: outside the host's ephemeral range (where a rank dialling
its master before the master listens can be connected to itself: CI's 'Failed to recv, got 0 bytes'), above
the dev cluster's Slurm daemons, and distinct for the nodes of one step and for neighbouring jobs and steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.probes._protocol import RENDEZVOUS_PORTS, rendezvous_port

pytestmark = pytest.mark.selftest


def test_ports_below_this_hosts_ephemeral_range() -> None:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert RENDEZVOUS_PORTS.stop <= low, f"rendezvous ports reach the ephemeral range {low}-{high}"
    assert RENDEZVOUS_PORTS.start >= 20000, "the dev cluster's daemons use 10000-19999"


@pytest.mark.parametrize("job", [0, 1, 16845, 27394, 10**7 + 3])
def test_every_port_in_range_and_nodes_apart(job: int) -> None:
    for step in range(50):
        ports = [rendezvous_port(job, step, node) for node in range(256)]
        assert all(p in RENDEZVOUS_PORTS for p in ports)
        assert len(set(ports)) == len(ports), "two nodes of one per-node step would bind one port"


def test_neighbouring_steps_and_jobs_apart() -> None:
    assert len({rendezvous_port(100, step) for step in range(64)}) == 64
    assert len({rendezvous_port(job, 0) for job in range(100, 164)}) == 64
