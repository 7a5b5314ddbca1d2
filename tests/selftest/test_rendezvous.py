"""The rendezvous ports every multi-rank probe uses: outside the host's ephemeral range (where a rank dialling
its master before the master listens can be connected to itself: CI's 'Failed to recv, got 0 bytes'), above
the dev cluster's Slurm daemons, and distinct for the nodes of one step and for neighbouring jobs and steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.probes._protocol import RENDEZVOUS_PORTS, RENDEZVOUS_SLICE, rendezvous_port

from .conftest import WORKER_DAEMON_PORTS, worker_ports

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


def test_a_slice_keeps_every_step_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RENDEZVOUS_SLICE, "24700-29399")
    ports = {rendezvous_port(job, step, node) for job in range(16845, 16945) for step in range(8) for node in range(2)}
    assert min(ports) >= 24700 and max(ports) <= 29399 and len(ports) > 1000
    for bad in ("10000-10999", "24700", "24700-x", "29399-24700"):
        monkeypatch.setenv(RENDEZVOUS_SLICE, bad)
        with pytest.raises(ValueError, match=f"GPUACCEPT_RENDEZVOUS_PORTS={bad}: not a slice of 20000-32767"):
            rendezvous_port(1, 0)


@pytest.mark.parametrize("count", range(1, 8))
def test_xdist_workers_ports_apart(count: int) -> None:
    """Under ``pytest -n`` no two workers' clusters can take one port: each has its own daemon and rendezvous
    ports, none on .ci/run's cluster's (10000-10999), perftest's (18515 on) or the local launcher's (29400 on)."""
    taken = [worker_ports(index, count) for index in range(count)]
    for index, (daemons, rendezvous) in enumerate(taken):
        assert daemons.start >= 11000 and daemons.stop <= 18515 and len(daemons) == 1000
        assert rendezvous.start >= RENDEZVOUS_PORTS.start and rendezvous.stop <= 29400 and len(rendezvous) >= 1000
        for daemons_2, rendezvous_2 in taken[index + 1 :]:
            assert not set(daemons) & set(daemons_2) and not set(rendezvous) & set(rendezvous_2)
    assert len(WORKER_DAEMON_PORTS) // 1000 == 7
    with pytest.raises(pytest.UsageError):
        worker_ports(7, 8)
