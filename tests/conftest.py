"""Shared fixtures. `llm_url` is a real embedded llama.cpp server (SmolLM2-135M) for the whole session."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from skillrepro.config import LLMConfig
from repo import DATA, copy_workflow, snakemake, study_workflow

TEST_MODEL = os.environ.get("SKILLREPRO_TEST_MODEL", "smollm2-135m")


@pytest.fixture
def needs_bwrap():
    """For a test whose containment only bubblewrap gives (a uid of nobody, a bounded scratch, an empty
    environment): without it the failure says so, instead of an assertion about a uid."""
    from skillrepro.skills import isolation

    path, why = isolation.bwrap()
    if path is None:
        pytest.fail(f"this test needs bubblewrap, the sandbox's outer layer (a README prerequisite): {why}",
                    pytrace=False)


@pytest.fixture(scope="session")
def llm_cfg() -> LLMConfig:
    return LLMConfig(backend="embedded", model=TEST_MODEL, slots=2, ctx_per_slot=4096, max_tokens=48,
                     temperature=0.7, seed=1, max_retries=2, timeout_s=300)


@pytest.fixture(scope="session")
def llm_url(llm_cfg, tmp_path_factory):
    """Start the embedded server in a child process, exactly as the workflow does."""
    from skillrepro.llm import servers

    server = servers.start(llm_cfg, workdir=tmp_path_factory.mktemp("llm"))
    os.environ[servers.URL_ENV] = server.url
    yield server.url
    server.stop()
    os.environ.pop(servers.URL_ENV, None)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """tests/data/tiny.yaml's `snakemake all` (ReAct and SpeedRunner on BabyAI, about two minutes on two cores)
    under umask 022, then its report as one HTML file and as a zip (unpacked in `unzipped/`). One run serves
    test_workflow (records, tables, figures, what reruns) and test_views (the report clicked through); neither
    changes the folder. Returns the folder and the run's console (stdout + stderr)."""
    import zipfile

    wd = tmp_path_factory.mktemp("tiny")
    copy_workflow(wd)
    cfg = str(DATA / "tiny.yaml")
    made = snakemake("all", "--cores", "2", "--configfile", cfg, cwd=wd, umask=0o022)
    for report in ("report.html", "report.zip"):
        snakemake("all", "--configfile", cfg, "--report", report, cwd=wd)
    with zipfile.ZipFile(wd / "report.zip") as z:
        z.extractall(wd / "unzipped")
    return wd, made.stdout + made.stderr


@pytest.fixture(scope="session")
def run_scaffold(llm_cfg, llm_url):
    """Run a SkillScaffold target through a copy of the workflow on BabyAI in folder `wd`, against the shared
    server; returns `wd`."""

    def run(wd, target: str, *, call_budget: int, scaffold: dict):
        study_workflow(wd, {
            "llm": {"backend": "embedded", "model": llm_cfg.model, "max_tokens": 48, "slots": 2,
                    "ctx_per_slot": llm_cfg.ctx_per_slot, "seed": 1, "tool_calling": "text", "threads": llm_cfg.threads},
            "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": call_budget}},
            "budgets": {"rollout_wall_s": 300},
            "scaffold": scaffold,
        })
        proc = subprocess.run([sys.executable, "-m", "snakemake", target, "--cores", "2"], cwd=wd,
                              env=dict(os.environ, SKILLREPRO_LLM_URL=llm_url), capture_output=True, text=True,
                              timeout=3000)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return wd

    return run


# ------------------------------------------------------------------------------- tests in a pytest of their own
# A module marked `pytest.mark.own_process` loads models whose memory torch and the allocator never give back
# (test_scaffold_grpo's policy: 5.8 GB at its peak; test_scaffold_training's update: 4.5 GB): run in this
# process, every later test would keep it. Its tests run in a pytest process of their own instead, one item here
# standing for them, so the suite's peak is the largest module's, not their sum.
#
# The tests that neither load a model nor run a workflow (unmarked: about 780 of them) wait on subprocesses
# (Snakemake dry runs, the sandbox, the JVM) about as much as they compute: on 2 cores they take 3.2 min on two
# pytest-xdist workers against 5.0 min in one process. They run as one such child too, on one worker per core.
#
# The children run one at a time, first, before this process starts the shared llama.cpp server: beside the
# LLM-bound tests two lanes fight over 2 cores (tried at 250f2b9: the shared tiny run took 386 s against 105).
# `SKILLREPRO_TEST_IN_PROCESS=1 pytest tests/llm/test_scorer.py` runs them in this process instead (for a debugger).
_IN_PROCESS = "SKILLREPRO_TEST_IN_PROCESS"  # set: every test runs in this process (a child; or a debugger's run)
_NODEIDS = "SKILLREPRO_TEST_NODEIDS"  # a child's: the file of the node ids it runs
_LANE_MIN = 200  # fewer unit tests than this start faster in this process than on workers (about 5 s to start)


class Child(pytest.Item):
    def __init__(self, *, nodeids: list[str], workers: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.nodeids, self.workers = nodeids, workers

    def runtest(self):
        files = sorted({n.split("::")[0] for n in self.nodeids})  # the child collects these, then keeps its ids
        xdist = ["-n", str(self.workers)] if self.workers > 1 else []
        with tempfile.NamedTemporaryFile("w", suffix=".json") as ids:
            json.dump(self.nodeids, ids)
            ids.flush()
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-ra", "--durations=5", *xdist]
            proc = subprocess.run(command + files, cwd=str(self.config.rootpath),
                                  env=dict(os.environ, **{_IN_PROCESS: "1", _NODEIDS: ids.name}),
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            raise ChildFailed(proc.stdout[-6000:] + proc.stderr[-2000:])
        # its last line (counts), slowest tests and skips: the suite's own summary would show none of them
        lines = proc.stdout.strip().splitlines() or ["(no output)"]
        shown = [ln for ln in lines if re.match(r"\d+\.\d+s (call|setup|teardown) |(SKIPPED|XFAIL|XPASS) ", ln)]
        _SUMMARIES.append("\n    ".join([f"{self.nodeid}: {lines[-1]}", *shown]))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ChildFailed):
            return f"{len(self.nodeids)} test(s) run in a pytest of their own failed:\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.nodeid}: {len(self.nodeids)} test(s) in a pytest of their own"


class ChildFailed(Exception):
    pass


_SUMMARIES: list[str] = []


def pytest_terminal_summary(terminalreporter):
    for line in _SUMMARIES:  # each counted as one test above
        terminalreporter.write_line(f"in a pytest of its own, {line}")


def _workers() -> int:
    """One xdist worker per core the suite may use, at most 4 (each holds about 0.8 GB); 0 without pytest-xdist."""
    import importlib.util

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS has none
    return min(4, cores) if importlib.util.find_spec("xdist") else 0


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they will
def pytest_collection_modifyitems(session, config, items):
    if os.environ.get(_NODEIDS):  # a child: exactly the tests the parent handed it
        keep = set(json.loads(Path(os.environ[_NODEIDS]).read_text()))
        items[:] = [item for item in items if item.nodeid in keep]
    if os.environ.get(_IN_PROCESS):
        return
    if hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None):
        return  # the user runs the suite on xdist workers: leave it to them
    kept, own, unit = [], {}, []
    for item in items:
        if item.get_closest_marker("own_process"):
            own.setdefault(item.module, (item.getparent(pytest.Module), []))[1].append(item.nodeid)
        elif not (item.get_closest_marker("integration") or item.get_closest_marker("workflow")):
            unit.append(item)
        else:
            kept.append(item)
    workers = _workers()
    children = [Child.from_parent(module, name="in_own_process", nodeids=ids)
                for module, ids in own.values()]
    if len(unit) >= _LANE_MIN and workers > 1:
        tests = next(n for n in unit[0].listchain() if n.path == Path(__file__).parent)  # this folder's node
        children.insert(0, Child.from_parent(tests, name=f"unit_tests_on_{workers}_workers",
                                             nodeids=[i.nodeid for i in unit], workers=workers))
    else:
        kept = unit + kept
    items[:] = children + kept
