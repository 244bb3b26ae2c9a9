"""What this machine has to spare, read from the OS; pure Python."""

from __future__ import annotations


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux): bytes this machine has available now; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
