"""How an acceptance session starts: its inputs checked first, and a start that waits to be asked.

The plugin is inert until asked (``settings.asked``). Asked at configure time, it starts at once;
otherwise the first acceptance test collected starts it (``LateStart``), so ``pytest tests/acceptance``
works without options while another project's tests in the same environment never meet the plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import cast

import pytest

from gpuaccept.dispatch import choose_launcher
from gpuaccept.dispatch.container import ContainerUnusable, from_settings
from gpuaccept.inputs import InputError, check_inputs
from gpuaccept.settings import Settings, SettingsError, reports_root, resolve
from gpuaccept.signing.keys import KeyUnusable, SigningKey, load_signing_key
from gpuaccept.state import STATE_KEY, SessionState
from gpuaccept.thresholds.loader import Thresholds, load_thresholds

__all__ = ["LateStart", "checked_inputs"]


def checked_inputs(config: pytest.Config) -> tuple[Settings, Thresholds, SigningKey | None]:
    """Every setting, the thresholds and every file and folder the run was given, checked before any job:
    a usage error (exit 4) in one line naming the option or file and what is wrong. The signing key is
    read now and held: a run must not learn at its end that it cannot sign."""
    settings = resolve(config)
    thresholds = load_thresholds(settings.thresholds, sku=settings.sku)
    if settings.sku and settings.sku not in thresholds.skus:
        raise SettingsError(
            f"{settings.sources['sku']}: SKU {settings.sku!r} is not in {', '.join(map(str, thresholds.files))} "
            f"(known: {', '.join(thresholds.skus)})"
        )
    alluredir = getattr(config.option, "allure_report_dir", None)
    try:
        check_inputs(
            settings,
            reports_root(config) / "reports",
            Path(alluredir) if alluredir else None,
            _gpu_memory_gib(thresholds, settings.sku),
        )
    except InputError as exc:
        raise SettingsError(str(exc)) from None
    try:
        container = from_settings(settings)  # the image, bundle and mount sources here, before any allocation
    except ContainerUnusable as exc:
        raise SettingsError(str(exc)) from None
    if container is not None and choose_launcher(settings) == "local":
        raise SettingsError(
            f"{container.option} runs every step in an image through srun; --launcher local has no srun"
        )
    return settings, thresholds, _signing_key(settings)


def _signing_key(settings: Settings) -> SigningKey | None:
    """``--sign-key``'s Ed25519 private key, or a usage error naming the option and the file."""
    if settings.sign_key is None:
        return None
    try:
        return load_signing_key(settings.sign_key)
    except KeyUnusable as exc:
        raise SettingsError(f"{settings.sources['sign_key']}: {exc}") from None


def _gpu_memory_gib(thresholds: Thresholds, sku: str | None) -> float | None:
    """The GPU memory a ``--model-path`` checkpoint must fit before any node is asked: the ``--sku``'s floor
    on ``gpu_memory_total_gib``, else the largest any listed SKU has (a checkpoint larger than every GPU we
    know is refused at once; one that fits some is judged on the nodes)."""
    floors = []
    for name in [sku] if sku else list(thresholds.skus):
        limit = thresholds.limits_for(name).get("gpu_memory_total_gib")
        if limit is not None and limit.min is not None:
            floors.append(limit.min)
    return max(floors) if floors else None


class LateStart:
    """Starts the session at the first acceptance test collected. Its usage error stops the run (exit 4)
    from ``pytest_make_collect_report``, as it would at configure time, not as a collection error per
    module."""

    name = "gpuaccept-late-start"

    def __init__(self, start: Callable[[pytest.Config], SessionState]) -> None:
        self._start = start
        self.error: pytest.UsageError | None = None
        self.worker_error: str | None = None

    @classmethod
    def of(cls, config: pytest.Config) -> LateStart:
        return cast(LateStart, config.pluginmanager.get_plugin(cls.name))

    def start(self, config: pytest.Config, where: str) -> SessionState:
        if hasattr(config, "workerinput"):  # the controller did not start: workers must not allocate apart
            raise SettingsError(_xdist_unasked(where))  # this module's collection error, in the worker
        try:
            return self._start(config)
        except pytest.UsageError as exc:
            self.error = exc
            raise

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """An acceptance test not taking ``node`` starts the session too (registered after the plugin,
        this runs before its own ``tryfirst`` hook, which then finds the session started)."""
        first = next((item for item in items if item.get_closest_marker("acceptance")), None)
        if first is None or self.started(config):
            return
        if hasattr(config, "workerinput"):  # raised here, it would crash the worker: each test errors instead
            self.worker_error = _xdist_unasked(first.nodeid)
            return
        self.start(config, first.nodeid)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.worker_error is not None and item.get_closest_marker("acceptance"):
            raise SettingsError(self.worker_error)

    @staticmethod
    def started(config: pytest.Config) -> bool:
        return STATE_KEY in config.stash

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if report.failed and self.error is not None:
            raise self.error
        return report


def _xdist_unasked(where: str) -> str:
    return (
        f"{where} is an acceptance test, but under pytest-xdist the session must be asked for at start: "
        "add -m acceptance (or any gpuaccept option)"
    )
