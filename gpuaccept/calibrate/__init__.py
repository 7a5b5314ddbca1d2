"""Calibration: limits for GPUs the catalogue does not list and for site fabrics, from runs on nodes the
operator declares known-good (``gpuaccept-calibrate``; the rule in ``gpuaccept.calibrate.rule``)."""
