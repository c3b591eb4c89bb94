"""How many instructions does tether execute per agent run, next to a plain httpx loop?

The CPU-time figures of ``overhead.py`` move by 0.2x from one run to the next on a shared
virtual machine; an instruction count does not. This runs each kind of ``overhead.py``
(tether and the plain loop, streamed and not, telemetry off and on) under valgrind's
callgrind twice, with ``LOW`` and ``HIGH`` runs after the same start-up and warm-up, and
prints the difference per run: the instructions of one run, start-up excluded. Every
process runs with the same hash seed (``PYTHONHASHSEED=0``), so a count moves only when the
code does. The loopback server is a child process, which callgrind does not follow, so only
the client's instructions are counted.

What it leaves out is what an instruction count cannot see: the kernel's share (a sync
tool's hand-off to its thread: futex and self-pipe calls, a context switch each way) and
how fast each instruction runs (caches). CPU time is still the target's measure; this is
the stable figure to compare changes by.

usage: .venv/bin/python benchmarks/instructions.py [HIGH] [MODE...]
       (valgrind on PATH; HIGH=130; modes: json, sse, 'otel json', 'otel sse', 'hook json'
       (against tether without the hook); default all)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OVERHEAD = Path(__file__).with_name("overhead.py")
# Each mode: its label, tether's kind, the plain loop's kind (as overhead.py names them).
MODES = {"json": ("not streamed", "tether json", "plain json"),
         "sse": ("streamed", "tether sse", "plain sse"),
         "otel json": ("not streamed, telemetry on", "otel json", "plain+otel json"),
         "otel sse": ("streamed, telemetry on", "otel sse", "plain+otel sse"),
         # One hook at all five points, against tether without it (not the plain loop).
         "hook json": ("one hook, not streamed", "hook json", "tether json")}
LOW = 30


def instructions(kind: str, n: int) -> int:
    """What callgrind counted for ``overhead.py --only KIND n``."""
    # One hash seed for every process: with a random one, dicts and sets probe differently
    # from one process to the next, and a run's count moved by up to 40k instructions.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, str(OVERHEAD), "--only", kind, str(n)],
        capture_output=True, text=True, check=True, env=env)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH (Debian: apt install valgrind)")
    args = sys.argv[1:]
    high = int(args.pop(0)) if args and args[0].isdigit() else 130
    modes = args or list(MODES)
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"unknown mode {sorted(unknown)}; the modes: {list(MODES)}")
    kinds = [kind for mode in modes for kind in MODES[mode][1:]]
    jobs = [(kind, n) for kind in kinds for n in (LOW, high)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # one valgrind per core
        counts = dict(zip(jobs, pool.map(lambda job: instructions(*job), jobs), strict=True))
    per_run = {k: (counts[(k, high)] - counts[(k, LOW)]) / (high - LOW) for k in kinds}
    print(f"instructions per agent run (prompt -> add(2, 3) -> answer), callgrind, "
          f"runs {LOW} and {high} subtracted")
    for mode in modes:
        label, ours_kind, plain_kind = MODES[mode]
        ours, plain = per_run[ours_kind], per_run[plain_kind]
        if plain_kind.startswith("tether"):  # one hook, against tether without it
            print(f"  {label:<27} tether {ours / 1e6:6.3f} M   without it {plain / 1e6:6.3f} M"
                  f"   the hook's own {(ours - plain) / 1e6:.3f} M")
            continue
        print(f"  {label:<27} tether {ours / 1e6:6.3f} M   plain loop {plain / 1e6:6.3f} M"
              f"   ratio {ours / plain:.3f}x   tether's own {(ours - plain) / 1e6:.3f} M")


if __name__ == "__main__":
    main()
