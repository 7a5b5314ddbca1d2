"""Read perftest's ``ib_write_bw`` / ``ib_write_lat`` output, the way its own source prints it.

Formats from linux-rdma/perftest ``src/perftest_parameters.h`` and ``.c`` (checked at commit 00b55b6):

* header (``ctx_print_test_info``): a ``RESULT_LINE`` of dashes, ``RDMA_Write BW Test`` (or
  ``Latency``), `` Dual-port : OFF\\t\\tDevice : mlx5_0``, `` Number of qps : 1\\t\\tTransport type : IB``,
  `` Link type : IB``, `` Mtu : 4096[B]``...
* bandwidth (``RESULT_FMT`` / ``RESULT_FMT_G`` then ``REPORT_FMT``)::

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     8388608    5000             389.75             389.73             0.005808

  MiB/s (``format_factor`` 0x100000) unless ``--report_gbits`` (125000000 bytes = 1 Gb);
* latency (``RESULT_FMT_LAT``, ``REPORT_FMT_LAT``, half the round trip, the top
  ``LAT_MEASURE_TAIL`` samples dropped), columns ``#bytes #iterations t_min[usec] t_max[usec]
  t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]``, e.g.
  ``2  10000  1.02  4.87  1.06  1.08  0.05  1.24  3.92``;

* GPU memory (``src/cuda_memory.c``): ``allocated GPU buffer address at 0x...`` or ``using DMA-BUF for
  GPU buffer address at ...``; a perftest built without CUDA lists no ``--use_cuda`` in ``-h`` and
  answers `` Unsupported memory type``.

Parsing is by the header names, not by column positions, so a column added by a later release (the
CPU-utilisation column) does not shift the numbers.
"""

from __future__ import annotations

import re

from gpuaccept.contracts.fabric import BwReport, LatReport

__all__ = ["PerftestError", "failure_kind", "parse_bw", "parse_lat", "supports_cuda"]

_HEADER_NAMES = re.compile(
    r"(#bytes|#iterations|#sl|BW peak\[[^\]]+\]|BW average\[[^\]]+\]|MsgRate\[[^\]]+\]"
    r"|t_min\[usec\]|t_max\[usec\]|t_typical\[usec\]|t_avg\[usec\]|t_stdev\[usec\]"
    r"|99% percentile\[usec\]|99\.9% percentile\[usec\]|CPU_Util\[%\])"
)
_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z .-]*?)\s*:\s*(\S+)")
_GPU_BUFFER = re.compile(r"(allocated GPU buffer address|using DMA-BUF for GPU buffer|GPU buffer)")
_CUDA_PICK = re.compile(r"Picking (?:device No\.|GPU number) (\d+)")


class PerftestError(ValueError):
    """The output holds no result line (perftest failed, was killed, or printed something unknown)."""


def _info(text: str) -> dict[str, str]:
    """``Device``, ``Link type``, ``Transport type``, ``Mtu``... from the header (two fields per line)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        for part in line.split("\t"):
            if m := _FIELD.match(part):
                out.setdefault(m.group(1).strip(), m.group(2))
    return out


def _table(text: str, first: str) -> tuple[list[str], list[list[str]]]:
    """The header names of the result table starting with ``first`` and its numeric rows."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        names = _HEADER_NAMES.findall(line)
        if names and names[0] == "#bytes" and first in names:
            rows: list[list[str]] = []
            for row in lines[i + 1 :]:
                cells = row.split()
                if not cells or not cells[0].isdigit():
                    if rows:
                        break
                    continue
                rows.append(cells)
            return names, rows
    raise PerftestError(f"no '{first}' result table in the output:\n{_tail(text)}")


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(kept) or "(empty)"


def _column(names: list[str], row: list[str], prefix: str) -> float:
    for index, name in enumerate(names):
        if name.startswith(prefix):
            return float(row[index])
    raise PerftestError(f"column {prefix!r} missing from {names}")


def parse_bw(text: str) -> BwReport:
    """The ``ib_write_bw`` result (client or server side, the largest message size when several were printed), with
    its average in Gb/s whatever unit perftest printed (MiB/s x 2^20 x 8 / 1e9); ``PerftestError`` when there is
    none."""
    names, rows = _table(text, "#iterations")
    if not rows:
        raise PerftestError(f"ib_write_bw printed its table header but no result:\n{_tail(text)}")
    row = max(rows, key=lambda r: int(r[0]))
    unit = next((n[n.index("[") + 1 : -1] for n in names if n.startswith("BW average")), "")
    pick = _CUDA_PICK.search(text)
    average = _column(names, row, "BW average")
    return BwReport(
        size=int(row[0]),
        iterations=int(row[names.index("#iterations")]),
        peak=_column(names, row, "BW peak"),
        average=average,
        msg_rate_mpps=_column(names, row, "MsgRate"),
        unit=unit,
        info=_info(text),
        gpu_memory=bool(_GPU_BUFFER.search(text)),
        cuda_device=int(pick.group(1)) if pick else None,
        average_gbps=average if unit == "Gb/sec" else average * 1048576 * 8 / 1e9,
    )


def parse_lat(text: str) -> LatReport:
    """The ``ib_write_lat`` result in microseconds (one-way: perftest halves the round trip); ``PerftestError`` when
    there is none."""
    names, rows = _table(text, "t_typical[usec]")
    if not rows:
        raise PerftestError(f"ib_write_lat printed its table header but no result:\n{_tail(text)}")
    row = rows[-1]
    return LatReport(
        size=int(row[0]),
        iterations=int(row[1]),
        t_min=_column(names, row, "t_min"),
        t_max=_column(names, row, "t_max"),
        t_typical=_column(names, row, "t_typical"),
        t_avg=_column(names, row, "t_avg"),
        t_stdev=_column(names, row, "t_stdev"),
        p99=_column(names, row, "99%"),
        p999=_column(names, row, "99.9%"),
        info=_info(text),
    )


def supports_cuda(help_text: str) -> bool:
    """Whether this perftest build can use GPU memory (``-h`` lists ``--use_cuda`` only when built with CUDA).

    Debian/Ubuntu's ``perftest`` package is built without CUDA; GPUDirect RDMA tests need a CUDA build
    (the one shipped with NVIDIA's DOCA/MLNX_OFED, or perftest built with ``CUDA_H_PATH``).
    """
    return "--use_cuda" in help_text


def failure_kind(text: str) -> str:
    """A one-line reason for a failed run, from perftest's own error messages."""
    checks = (
        ("Did not detect devices", "no RDMA device visible (driver down, or none in this container)"),
        ("Unable to find the Infiniband/RoCE device", "the HCA named with -d does not exist"),
        ("Couldn't connect to", "could not reach the server's port (server not up, firewall, wrong address)"),
        ("Couldn't listen to port", "the port is taken on the server node"),
        ("Unsupported memory type", "this perftest build has no CUDA support (--use_cuda)"),
        ("Unable to Connect the HCA's through the link", "the QPs would not connect over the fabric"),
        ("Failed to exchange data", "the out-of-band exchange with the peer failed"),
        ("Couldn't init GPU context", "CUDA could not open the GPU"),
        ("[gpuaccept] killed", "killed at the deadline: the peer never answered or the transfer hung"),
    )
    for needle, why in checks:
        if needle in text:
            return why
    return _tail(text, 3).replace("\n", " | ")
