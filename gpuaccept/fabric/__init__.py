"""The fabric between nodes: NCCL's transport and NICs, rails, RDMA (perftest), GPUDirect, IB counter windows.

What the fabric probes run and the parsing and planning the fabric judge (``gpuaccept.verdicts.fabric``)
reads them with, free of pytest and of any judge, so the selftests drive them with recorded outputs:
``transport`` (NCCL_DEBUG=INFO -> plugin, GDR, HCA per GPU), ``affinity`` (GPU -> PCIe-affine HCA,
fabric line rates from sysfs), ``rails`` (one GPU per node per communicator, a failing rail's pairs),
``nccl_steps`` (the transport and rail steps' ranks, sweep and tables), ``perftest``
(ib_write_bw / ib_write_lat output), ``schedule`` (who tests which HCA with whom, in rounds),
``gdr`` (PCIe ACS, IOMMU, peermem / dma-buf), ``counters`` (IB counters over a window).
"""
