"""What a sandboxed call costs to start: ``sh -c true`` plain, inside bubblewrap (as the
``shell`` built-in starts it), and through the Landlock launcher.

Each kind runs N times, interleaved (one of each per round, so a slow spell of a shared
machine slows all alike); the median wall-clock time of a start is printed per kind, and
its difference to the plain start. Run: ``python benchmarks/sandbox_startup.py [N]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

from tether.errors import SandboxUnavailable
from tether.sandbox import Sandbox, confine


def main(n: int = 50) -> None:
    with tempfile.TemporaryDirectory() as ws:
        kinds: dict[str, list[str]] = {"sh -c true": ["/bin/sh", "-c", "true"]}
        for mode in ("bwrap", "landlock"):
            try:
                confined = confine(Sandbox(mode=mode), ["/bin/sh", "-c", "true"], cwd=ws,
                                   writable=[ws])
            except SandboxUnavailable as e:
                print(f"{mode}: not available here ({e})")
                continue
            kinds[mode] = confined.argv
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(n):
            for kind, argv in kinds.items():
                start = time.perf_counter()
                subprocess.run(argv, cwd=ws, check=True, stdin=subprocess.DEVNULL)
                times[kind].append(time.perf_counter() - start)
    plain = statistics.median(times["sh -c true"])
    for kind, spent in times.items():
        median = statistics.median(spent)
        extra = "" if kind == "sh -c true" else f"  (+{(median - plain) * 1000:.1f} ms)"
        print(f"{kind:12} median {median * 1000:6.1f} ms over {n} starts{extra}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
