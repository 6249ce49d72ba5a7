"""Start-up cost of every `skillrepro` command: `import skillrepro.cli` in a fresh interpreter.

Prints the median over --n runs of the import alone (the interpreter's own start subtracted) beside the
target. Baseline: 14 ms / 72 modules before the CLI's top-level imports grew; 307 ms / 473 modules at
9e531b8 (every command module imported to build the parser). Target: under 50 ms.
    python perf/cli_import.py [--n 15]
"""
import argparse
import statistics
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=15)
a = ap.parse_args()


def median_s(code: str) -> float:
    times = []
    for _ in range(a.n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


bare = median_s("pass")
cli = median_s("import skillrepro.cli")
n_modules = subprocess.run([sys.executable, "-c", "import sys; n = len(sys.modules); import skillrepro.cli; "
                            "print(len(sys.modules) - n)"], capture_output=True, text=True, check=True).stdout.strip()
print(f"import skillrepro.cli: {(cli - bare) * 1000:.1f} ms over the interpreter's {bare * 1000:.1f} ms start "
      f"({n_modules} modules)   target < 50 ms   baseline 307 ms (473 modules)")
