"""How fast the ``forge`` CLI answers: ``forge --help`` and ``forge scaffold list``.

Each command runs ``--runs`` times, interleaved with a bare ``python -c pass`` so the machine's
noise hits all of them alike; the table gives medians and the ratio to bare Python start-up.

    python benchmarks/cli_startup.py [--runs 15]

Writes benchmarks/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORGE = str(Path(sys.executable).with_name("forge"))
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "forge --help": [FORGE, "--help"],
    "forge scaffold list": [FORGE, "scaffold", "list"],
    "forge version": [FORGE, "version"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = dict(os.environ, FORGE_HOME=str(HERE / "results" / ".forge-home"), COLUMNS="120")
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["python -c pass"])
    rows = [
        {
            "command": name,
            "median_s": round(statistics.median(ts), 4),
            "p90_s": round(sorted(ts)[int(0.9 * (len(ts) - 1))], 4),
            "vs_bare_python": round(statistics.median(ts) / base, 2),
            "runs": len(ts),
        }
        for name, ts in times.items()
    ]
    print(f"{'command':<22} {'median s':>9} {'p90 s':>8} {'× python':>9}")
    for row in rows:
        print(f"{row['command']:<22} {row['median_s']:>9.3f} {row['p90_s']:>8.3f} {row['vs_bare_python']:>9.1f}")
    out = HERE / "results" / "cli_startup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
