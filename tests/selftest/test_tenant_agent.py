"""Health agents (BFX04): a declared agent's process and URL, and a DCGM exporter's page listing every GPU
(fixtures/tenant/dcgm-exporter-*.txt, served from a local HTTP server)."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaccept.contracts.tenant import AgentRecord
from gpuaccept.probes import agent
from gpuaccept.thresholds.tenant_site import AgentDeclaration, TenantSite
from gpuaccept.verdicts.tenant import agents_absent, judge_agents

from ._tenant_judge import RecordingJudge

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tenant"
UUIDS = [f"GPU-00000000-0000-0000-0000-00000000000{i}" for i in range(8)]


@pytest.mark.parametrize("page", ["dcgm-exporter-8gpu.txt", "dcgm-exporter-8gpu-new-names.txt"])
def test_exporter_page_lists_eight_gpus(page: str) -> None:
    indices, uuids = agent.exporter_gpus((FIXTURES / page).read_text())
    assert indices == [str(i) for i in range(8)] and uuids == UUIDS


def test_exporter_page_missing_a_gpu() -> None:
    indices, uuids = agent.exporter_gpus((FIXTURES / "dcgm-exporter-missing-gpu3.txt").read_text())
    assert "3" not in indices and len(uuids) == 7


def test_running_pids_finds_this_process() -> None:
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert os.getpid() in agent.running_pids(comm)
    assert agent.running_pids("no-such-agent-xyz") == []


@pytest.fixture()
def server() -> Iterator[str]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(FIXTURES), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _site(url: str, process: str) -> TenantSite:
    return TenantSite.model_validate(
        {
            "source": "site ops runbook",
            "agents": [{"name": "dcgm-exporter", "kind": "dcgm-exporter", "process": process, "url": url}],
        }
    )


def _decl(site: TenantSite) -> AgentDeclaration:
    assert isinstance(site.agents, list)
    return site.agents[0]


def _judge(record: AgentRecord, site: TenantSite) -> dict[str, tuple[bool, object]]:
    judge = RecordingJudge()
    judge_agents(record, site, judge, "n1")
    return {c.metric: (c.passed, c.value) for c in judge.calls}


def test_declared_exporter_running_answering_and_listing_every_gpu(server: str) -> None:
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    site = _site(f"{server}/dcgm-exporter-8gpu.txt", comm)
    state = agent.one_agent({"name": "dcgm-exporter", "kind": "dcgm-exporter", "process": comm, "url": _decl(site).url})  # type: ignore[union-attr]
    record = AgentRecord(agents=[state], nvml_gpus=8, nvml_uuids=UUIDS, dcgm_version=None)
    assert _judge(record, site) == {
        "health_agent_running": (True, "running"),
        "health_agent_answering": (True, "answering (HTTP 200)"),
        "health_agent_gpus": (True, "all 8 GPUs"),
    }


def test_missing_gpu_dead_process_and_silent_url_fail(server: str) -> None:
    site = _site(f"{server}/dcgm-exporter-missing-gpu3.txt", "no-such-agent-xyz")
    state = agent.one_agent(_decl(site).model_dump())
    verdicts = _judge(AgentRecord(agents=[state], nvml_gpus=8, nvml_uuids=UUIDS, dcgm_version=None), site)
    assert verdicts["health_agent_running"] == (False, "no process named no-such-agent-xyz")
    assert verdicts["health_agent_gpus"] == (False, f"missing {UUIDS[3]} (7 of 8 listed)")
    gone = agent.one_agent({"name": "gpud", "url": f"{server}/nothing-here"})
    assert gone.answered is False and gone.http_status == 404


def test_without_uuids_the_index_is_named() -> None:
    site = _site("http://127.0.0.1:9/metrics", "x")
    state = agent.one_agent({"name": "dcgm-exporter", "kind": "dcgm-exporter"}).model_copy(
        update={"exporter_gpus": ["0", "1", "2", "4"]}
    )
    verdicts = _judge(AgentRecord(agents=[state], nvml_gpus=5, nvml_uuids=[], dcgm_version=None), site)
    assert verdicts["health_agent_gpus"] == (False, "4 of 5 listed (missing gpu 3)")


def test_undeclared_and_absent_agents_name_the_site_key() -> None:
    assert "tenant.agents" in (agents_absent(None, "n1") or "")
    assert "tenant.agents: absent" in (agents_absent(TenantSite(source="x", agents="absent"), "n1") or "")
    assert agents_absent(_site("http://x", "y"), "n1") is None


def test_agent_argument_round_trips() -> None:
    decl = _decl(_site("http://localhost:9400/metrics", "dcgm-exporter"))
    assert agent.parse_agent(decl.argument()) == {
        "name": "dcgm-exporter",
        "kind": "dcgm-exporter",
        "process": "dcgm-exporter",
        "url": "http://localhost:9400/metrics",
    }
