"""The scripts of ``bench/`` loaded as modules, for tests of what they compute and print."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(filename: str, module_name: str) -> ModuleType:
    """``bench/<filename>`` as module ``module_name`` (registered in ``sys.modules``, where its
    dataclasses look their module up), with ``bench/`` importable while it loads (the scripts
    share ``common.py``). A name of its own: ``serve`` is also a package of this test suite."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(module_name, BENCH / filename)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
