"""Repository-root conftest: in a plain checkout the plugin is active through its entry point once
installed (``pip install -e .``); without installation, load it from the source tree."""

from __future__ import annotations

import importlib.metadata

_installed = any(ep.value == "gpuaccept.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["gpuaccept.plugin"]
