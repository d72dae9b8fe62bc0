"""Shared bits of the benchmark scripts (run them as `python bench/NAME.py`)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """One line naming the machine the figures were taken on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPU ({cpu}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")
