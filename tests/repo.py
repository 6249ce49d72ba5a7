"""The repository the tests read and the Snakemake workflow in it, for tests in any folder under tests/:
ROOT (the repository) and DATA (tests/data), and a copy of the workflow run with Snakemake.

A module beside tests/conftest.py, not a test module (pyproject.toml's `pythonpath` puts tests/ on the path),
so test modules share it without importing each other and the paths do not depend on how deep a test sits."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args, cwd=ROOT, check=True, umask=-1, env=None):
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, umask=umask, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def scheduled(stdout: str) -> set[str]:
    """The rules a dry run (`snakemake -n`) lists jobs of: its `rule X:` and `localrule X:` lines."""
    return set(re.findall(r"^(?:local)?rule (\w+):", stdout, flags=re.M))


def copy_workflow(dest: Path) -> None:
    for part in ("Snakefile", "config.yaml", "rules", "workflow", "envs", "report"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / part)


def study_workflow(dest: Path, config: dict) -> None:
    """A copy of the workflow in `dest` whose config.yaml is `config`: a test runs a study's target through the
    Snakefile, as a user does."""
    copy_workflow(dest)
    (dest / "config.yaml").write_text(yaml.safe_dump(config))
