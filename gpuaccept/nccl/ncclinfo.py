"""What NCCL says about itself under ``NCCL_DEBUG=INFO``: version, network, NICs, transports, algorithms.

An operator comparing two runs needs to know *how* NCCL moved the bytes, not only how fast: Ring or
Tree or NVLS, Simple or LL128, P2P over NVLink or SHM or the network, which NICs. The probe points
``NCCL_DEBUG_FILE`` at a file per rank and hands the text here. Lines parsed (NCCL 2.18 - 2.28):

* ``NCCL version 2.28.9+cuda12.9``
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>`` / ``NET/Socket : Using [0]eth0:...``
* ``Using network IB`` (or ``Socket``)
* ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` / ``... [send] via NET/IB/0/GDRDMA``
* ``AllReduce: 4294967296 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}`` (TUNING, rank 0)
* ``NCCL_ALGO set by environment to Ring.``
* ``comm 0x... rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0``
* ``NVLS multicast support is not available on dev 0`` (the hardware's multicast only: no proof NVLS carried
  anything, NVIDIA/aicr#2568)
* ``NVLS comm 0x... headRank 0 nHeads 8 buffSize ...``: NVLS buffers set up for this communicator
* the communicator line's ``MNNVL 1``: NCCL runs this communicator over the multi-node NVLink fabric

Per rank, the network path (``parse_net_facts``, transport/nccl ``net.cc`` and ``net_ib/init.cc`` formats):

* ``Channel 02/0 : 3[3] -> 11[3] [send] via NET/IB/3/GDRDMA`` (``/<netDev>``, ``(<proxyRank>)`` for PXN,
  ``/GDRDMA``, ``(PCI)``, ``/Shared``) and the ``[receive]`` twin
* ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>``: device index -> HCA name
* ``NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'``, ``DMA-BUF is available on GPU device 0``
* ``ncclCommInitRankConfig comm 0x... rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 9a000 ... - Init START``
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from collections import Counter
from typing import Any

from gpuaccept.contracts.nccl_formulas import NCCL_FUNC, tuning_bytes_to_size
from gpuaccept.contracts.nccl_payloads import NcclFacts, NetFacts

__all__ = [
    "collect_facts",
    "debug_env",
    "net_facts",
    "parse_nccl_log",
    "parse_net_facts",
    "split_processes",
    "summarize_algorithms",
]

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_NET_USING = re.compile(r"NET/(\w+)\s*: Using (.+)$")
_NIC = re.compile(r"\[\d+\](\S+)")
_NETWORK = re.compile(r"Using network (\w+)")
_CHANNEL = re.compile(r"Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\](?: \[(?:send|receive)\])? via (\S+)")
_TUNING = re.compile(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)")
_ENV = re.compile(r"(NCCL_\w+) set by environment to (\S+)")
_COMM = re.compile(r"nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_MNNVL = re.compile(r"nRanks \d+ nNodes \d+ localRanks \d+ localRank \d+ MNNVL (\d)")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")
_NVLS_COMM = re.compile(r"NVLS comm 0x[0-9a-fA-F]+ headRank")
_NET_CHANNEL = re.compile(
    r"Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\] \[(send|receive)\] via NET/([^/\s]+)/(\d+)"
    r"(?:\((\d+)\))?(/GDRDMA)?"
)
_NET_DEVICE = re.compile(r"\[(\d+)\]([^:\s/<\[]+)")
_GDR_HCA = re.compile(r"NET/(\w+) ?: GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']+)'")
_INIT_RANK = re.compile(r"rank (\d+) nranks (\d+) cudaDev (\d+) nvmlDev (\d+) busId ([0-9a-fA-F]+)")
_PROCESS = re.compile(r"^(\S+?):(\d+):\d+ \[\d+\] NCCL ")


def parse_nccl_log(text: str) -> dict[str, Any]:
    """Facts from one rank's NCCL INFO log; keys are absent when the log does not say."""
    out: dict[str, Any] = {}
    nics: dict[str, list[str]] = {}
    transports: Counter[str] = Counter()
    tuning: Counter[tuple[str, int, str, str]] = Counter()
    env: dict[str, str] = {}
    for line in text.splitlines():
        if "NCCL" not in line and "NET/" not in line and "Channel" not in line and "Bytes -> Algo" not in line:
            continue
        if (m := _VERSION.search(line)) and "version" not in out:
            out["version"] = m.group(1)
        if m := _NET_USING.search(line):
            devices = m.group(2).split(";")[0]
            listed = nics.setdefault(m.group(1), [])
            listed += [nic for nic in _NIC.findall(devices) if nic not in listed]
        if m := _NETWORK.search(line):
            out["network"] = m.group(1)
        if m := _CHANNEL.search(line):
            transports[m.group(1)] += 1
        if m := _TUNING.search(line):
            tuning[(m.group(1), int(m.group(2)), m.group(3), m.group(4))] += 1
        if m := _ENV.search(line):
            env[m.group(1)] = m.group(2).rstrip(".")
        if (m := _COMM.search(line)) and "nodes" not in out:
            out["ranks"], out["nodes"], out["local_ranks"] = (int(g) for g in m.groups())
        if (m := _MNNVL.search(line)) and "mnnvl" not in out:
            out["mnnvl"] = m.group(1) == "1"
        if _NVLS_COMM.search(line):
            out["nvls_comm"] = True
        if m := _NVLS.search(line):
            out["nvls_available"] = m.group(1) is None
    # Every transport plugin logs its devices ("NET/IB : Using [RO]" when it found none); the NICs in use
    # are those of the network NCCL chose ("Using network Socket").
    in_use = nics.get(out.get("network", ""), [])
    if in_use:
        out["nics"] = in_use
    if any(nics.values()):
        out["nics_by_plugin"] = {k: v for k, v in nics.items() if v}
    if transports:
        out["transports"] = dict(transports.most_common())
    if tuning:
        out["tuning"] = [
            {"func": func, "bytes": nbytes, "algo": algo, "proto": proto, "count": count}
            for (func, nbytes, algo, proto), count in sorted(tuning.items())
        ]
    if env:
        out["env"] = env
    return out


def parse_net_facts(text: str) -> dict[str, Any]:
    """One process's network path: which plugin and device each NET channel used, with or without GDR.

    ``channels`` counts NET connections per plugin and device index (``send``, ``recv``, ``gdr`` of them,
    ``pxn``: sends relayed through another local GPU's NIC, ``proxies``: those GPUs' ranks); ``devices``
    maps each plugin's device index to its name(s) (``mlx5_0``; a merged NIC lists its parts). Indices are
    kept as strings so the result survives JSON. Absent keys: the log did not say.
    """
    channels: dict[str, dict[str, dict[str, Any]]] = {}
    devices: dict[str, dict[str, list[str]]] = {}
    gdr_hca: dict[str, bool] = {}
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if "NET/" in line:
            if m := _NET_CHANNEL.search(line):
                direction, plugin, dev, proxy, gdr = m.groups()
                entry = channels.setdefault(plugin, {}).setdefault(
                    dev, {"send": 0, "recv": 0, "gdr": 0, "pxn": 0, "proxies": []}
                )
                entry["send" if direction == "send" else "recv"] += 1
                entry["gdr"] += 1 if gdr else 0
                if proxy is not None:
                    entry["pxn"] += 1
                    if int(proxy) not in entry["proxies"]:
                        entry["proxies"].append(int(proxy))
            elif m := _NET_USING.search(line):
                listed = devices.setdefault(m.group(1), {})
                for index, names in _NET_DEVICE.findall(m.group(2).split(";")[0]):
                    listed.setdefault(index, names.split("+"))
            if m := _GDR_HCA.search(line):
                gdr_hca[m.group(4)] = m.group(2) == "Enabled"
        if "DMA-BUF is available on GPU device" in line:
            out["dmabuf"] = True
        if (m := _INIT_RANK.search(line)) and "nvml_dev" not in out:
            out["nvml_dev"], out["bus_id"] = int(m.group(4)), m.group(5).lower()
    if channels:
        out["channels"] = channels
    if any(devices.values()):
        out["devices"] = {k: v for k, v in devices.items() if v}
    if gdr_hca:
        out["gdr_hca"] = gdr_hca
    return out


def split_processes(text: str) -> dict[str, str]:
    """A combined NCCL log (every rank's INFO lines on one stream) split by ``host:pid``.

    NCCL prefixes each line with ``host:pid:tid [cudaDev]``; srun output and NCCL_DEBUG_FILE=stdout
    interleave ranks, and each process's network facts must be read from its own lines.
    """
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if m := _PROCESS.match(line):
            out.setdefault(f"{m.group(1)}:{m.group(2)}", []).append(line)
    return {key: "\n".join(lines) for key, lines in out.items()}


def summarize_algorithms(tuning: list[dict[str, Any]], nranks: int) -> dict[str, dict[int, str]]:
    """``{collective: {nccl-tests size: "RING/SIMPLE"}}``: the most frequent choice per size.

    NCCL logs all_gather/reduce_scatter with their per-rank byte counts; sizes are mapped back to the
    sweep's (nccl-tests') size so they line up with the table.
    """
    by_func = {func: coll for coll, func in NCCL_FUNC.items()}
    counts: dict[tuple[str, int], Counter[str]] = {}
    for entry in tuning:
        collective = by_func.get(str(entry["func"]))
        if collective is None:
            continue
        size = tuning_bytes_to_size(collective, int(entry["bytes"]), nranks)
        counts.setdefault((collective, size), Counter())[f"{entry['algo']}/{entry['proto']}"] += int(
            entry.get("count", 1)
        )
    out: dict[str, dict[int, str]] = {}
    for (collective, size), counter in sorted(counts.items()):
        out.setdefault(collective, {})[size] = counter.most_common(1)[0][0]
    return out


def debug_env(*, ring: bool, debug: bool, folder: str, rank: int) -> str | None:
    """Set NCCL's variables before the first communicator (``NCCL_ALGO=Ring``, INFO log per rank).

    Returns the log folder (a fresh temporary one unless ``folder`` is given), or None without logging.
    An operator's own ``NCCL_DEBUG_SUBSYS`` is kept; a quieter ``NCCL_DEBUG`` is raised to INFO.
    """
    if ring:
        os.environ["NCCL_ALGO"] = "Ring"
    if not debug:
        return None
    folder = folder or tempfile.mkdtemp(prefix="gpuaccept-nccl-")
    os.makedirs(folder, exist_ok=True)
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        os.environ["NCCL_DEBUG"] = "INFO"
    os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,ENV,NET,GRAPH,TUNING")
    os.environ["NCCL_DEBUG_FILE"] = os.path.join(folder, f"nccl.rank{rank}.%h.%p.log")
    return folder


def collect_facts(folder: str | None, rank: int, nranks: int, *, keep: bool) -> NcclFacts | None:
    """This rank's facts from its log files in ``folder`` (then deleted unless ``keep``), every key of
    ``NcclFacts`` written (None where the log did not say); None when no log was asked for."""
    if folder is None:
        return None
    facts: dict[str, Any] = {}
    net: dict[str, Any] | None = None
    for path in sorted(glob.glob(os.path.join(folder, f"nccl.rank{rank}.*"))):
        with open(path, errors="replace") as fh:
            text = fh.read()
        for key, value in parse_nccl_log(text).items():
            facts.setdefault(key, value)
        net = net or parse_net_facts(text) or None
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    algos = summarize_algorithms(facts.get("tuning", []), nranks)
    return NcclFacts(
        version=facts.get("version"),
        network=facts.get("network"),
        ranks=facts.get("ranks"),
        nodes=facts.get("nodes"),
        local_ranks=facts.get("local_ranks"),
        mnnvl=facts.get("mnnvl"),
        nvls_available=facts.get("nvls_available"),
        nvls_comm=facts.get("nvls_comm", False),
        nics=facts.get("nics", []),
        nics_by_plugin=facts.get("nics_by_plugin", {}),
        transports=facts.get("transports", {}),
        env=facts.get("env", {}),
        algorithms={c: {str(size): a for size, a in v.items()} for c, v in algos.items()},
        net=None if net is None else net_facts(net),
    )


def net_facts(parsed: dict[str, Any]) -> NetFacts:
    """``parse_net_facts``' answer with every key of ``NetFacts`` (empty or None where the log did not say)."""
    return NetFacts(
        channels=parsed.get("channels", {}),
        devices=parsed.get("devices", {}),
        gdr_hca=parsed.get("gdr_hca", {}),
        dmabuf=parsed.get("dmabuf", False),
        nvml_dev=parsed.get("nvml_dev"),
        bus_id=parsed.get("bus_id"),
    )
