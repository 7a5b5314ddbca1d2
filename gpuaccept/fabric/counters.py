"""InfiniBand error counters over a window: link flaps and error rates while the fabric tests ran.

A counter read once counts since it was last reset (boot, or whoever ran ``perfquery -x -R``); it
says nothing about now. Two readings bracketing the fabric tests do: a ``link_downed`` or
``link_error_recovery`` that moved while NCCL and perftest ran is a link that flapped under load,
and symbol or receive errors can be set against the bits the port received in the same window.

* flaps: ``link_downed`` / ``link_error_recovery`` deltas. Azure's ``check_ib_link_flapping``
  (azurehpc-health-checks ``customTests/azure_ib_link_flapping.nhc``) fails a device with 5 or more
  link-down events in 24 h (one per 4.8 h); a window of minutes holding one is far above that rate.
* error rates: ``symbol_error`` and ``port_rcv_errors`` deltas per bit received
  (``port_rcv_data`` counts 32-bit words, Documentation/ABI/stable/sysfs-class-infiniband), judged
  against the 1e-12 BER ibdiagnet uses as its default threshold. Each errored packet holds at least
  one bit error, so errors / bits is a lower bound of the link's bit error rate. Errors with no
  traffic at all are an infinite rate.

A counter that went *down* was reset inside the window: the delta is unknown, never zero. So is one
pinned at its width's maximum (IBA PortCounters: LinkDowned and LinkErrorRecovery are 8 bits,
SymbolError and PortRcvErrors 16 bits, and they stop counting there): "no change" proves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.contracts.fabric import InfinibandPayload

__all__ = ["FLAP_COUNTERS", "PortWindow", "error_rate", "port_windows"]

FLAP_COUNTERS = {"link_downed": "ib_window_link_downed", "link_error_recovery": "ib_window_link_error_recovery"}
RATE_COUNTERS = {"symbol_error": "ib_window_symbol_error_rate", "port_rcv_errors": "ib_window_rcv_error_rate"}
BITS_PER_WORD = 32
#: IBA PortCounters widths: a saturated counter no longer moves.
SATURATED = {"link_downed": 0xFF, "link_error_recovery": 0xFF, "symbol_error": 0xFFFF, "port_rcv_errors": 0xFFFF}


@dataclass
class PortWindow:
    """One port's counter deltas between two readings."""

    hca: str
    port: str
    seconds: float
    deltas: dict[str, int] = field(default_factory=dict)
    reset: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: (window figure, why): the figures a missing, saturated or reset counter leaves unjudged
    unread: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.hca} port {self.port}"

    @property
    def bits_received(self) -> int | None:
        words = self.deltas.get("port_rcv_data")
        return None if words is None else words * BITS_PER_WORD


def _figures_of(counter: str | None) -> tuple[str, ...]:
    """The window figures that read ``counter`` (None: the whole port; ``port_rcv_data``: every error
    rate divides by the bits it counts)."""
    if counter is None:
        return (*FLAP_COUNTERS.values(), *RATE_COUNTERS.values())
    if counter == "port_rcv_data":
        return tuple(RATE_COUNTERS.values())
    return (FLAP_COUNTERS.get(counter) or RATE_COUNTERS[counter],)


def _unread(window: PortWindow, counter: str | None, why: str, reset: bool = False) -> None:
    (window.reset if reset else window.missing).append(counter if reset and counter else why)
    window.unread += [(figure, why) for figure in _figures_of(counter)]


def error_rate(errors: int, bits: int | None) -> float | None:
    """Errors per bit received: 0.0 with no errors, inf with errors but no traffic, None if unknown."""
    if bits is None:
        return None
    if errors == 0:
        return 0.0
    return float("inf") if bits == 0 else errors / bits


def port_windows(
    before: InfinibandPayload, after: InfinibandPayload, link_layer: str | None = None
) -> list[PortWindow]:
    """Deltas of every port present in both readings (``infiniband`` readings).

    ``link_layer`` keeps only ports of the compute fabric (the SKU's ``ib_link_layer``).
    """
    seconds = after["monotonic"] - before["monotonic"]
    out: list[PortWindow] = []
    for name, hca in sorted(after["hcas"].items()):
        for port_name, port in sorted(hca["ports"].items()):
            if link_layer is not None and port["link_layer"] != link_layer:
                continue
            window = PortWindow(name, port_name, seconds)
            old_hca = before["hcas"][name] if name in before["hcas"] else None
            old = old_hca["ports"][port_name] if old_hca is not None and port_name in old_hca["ports"] else None
            if old is None:
                _unread(window, None, "port absent from the first reading")
                out.append(window)
                continue
            new_counts, old_counts = port["counters"], old["counters"]
            for counter in (*FLAP_COUNTERS, *RATE_COUNTERS, "port_rcv_data"):
                a = old_counts[counter] if counter in old_counts else None
                b = new_counts[counter] if counter in new_counts else None
                if not isinstance(a, int) or not isinstance(b, int):
                    _unread(window, counter, f"counters/{counter} unreadable")
                elif b < a:
                    _unread(window, counter, f"counters/{counter} went down (reset during the window)", reset=True)
                elif b == SATURATED.get(counter):
                    _unread(window, counter, f"counters/{counter} saturated at {b} (reset it with perfquery -R)")
                else:
                    window.deltas[counter] = b - a
            out.append(window)
    return out
