"""Shared fixtures. `llm_url` is a real embedded llama.cpp server (SmolLM2-135M) for the whole session."""
from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillrepro.config import LLMConfig

TEST_MODEL = os.environ.get("SKILLREPRO_TEST_MODEL", "smollm2-135m")


@pytest.fixture
def needs_bwrap():
    """For a test whose containment only bubblewrap gives (a uid of nobody, a bounded scratch, an empty
    environment): without it the failure says so, instead of an assertion about a uid."""
    from skillrepro.skills import sandbox

    path, why = sandbox._bwrap()
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

    from test_workflow import copy_workflow, snakemake

    wd = tmp_path_factory.mktemp("tiny")
    copy_workflow(wd)
    cfg = str(Path(__file__).parent / "data/tiny.yaml")
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
    from test_workflow import study_workflow

    def run(wd, target: str, *, call_budget: int, scaffold: dict):
        study_workflow(wd, {
            "llm": {"backend": "embedded", "model": llm_cfg.model, "max_tokens": 48, "slots": 2,
                    "ctx_per_slot": llm_cfg.ctx_per_slot, "seed": 1, "tool_calling": "text", "threads": llm_cfg.threads},
            "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": call_budget}},
            "budgets": {"rollout_wall_s": 300},
            "protocol": {"task_seed": 42},
            "scaffold": scaffold,
        })
        proc = subprocess.run([sys.executable, "-m", "snakemake", target, "--cores", "2"], cwd=wd,
                              env=dict(os.environ, SKILLREPRO_LLM_URL=llm_url), capture_output=True, text=True,
                              timeout=3000)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return wd

    return run


# ------------------------------------------------------------------------------- modules in their own process
# A module marked `pytestmark = pytest.mark.own_process` runs in a pytest process of its own, one item here
# standing for its tests, for one of two reasons:
# - `own_process(alone=True)`: it loads models whose memory torch and the allocator never give back
#   (test_scaffold_grpo's policy: 5.8 GB at its peak; test_scaffold_training's update: 5.2 GB). Run in this
#   process, every later test would keep it; run beside anything, the two would not fit 8 GB. These run
#   first, one at a time, with nothing beside them.
# - plain `own_process`: a long run of the real model (a workflow, a scorer) that fits beside the suite
#   (2.7 GB at most). These run one at a time in a background lane while this process runs the rest: on 2
#   cores the suite alone kept them 1.25 busy on average (issue 32: 20 minutes). Their items come last and
#   wait for the lane's results.
# Each child's own report is printed when it fails.
_CHILD = "SKILLREPRO_TEST_OWN_PROCESS"


def _run_child(root: str, nodeids: list[str]) -> subprocess.CompletedProcess:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *nodeids],
                            cwd=root, env=dict(os.environ, **{_CHILD: "1"}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _RUNNING.add(proc)
    try:
        out, err = proc.communicate()
    finally:
        _RUNNING.discard(proc)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.wall_s = time.monotonic() - started
    return done


class OwnProcess(pytest.Item):
    def __init__(self, *, nodeids: list[str], alone: bool, **kwargs):
        super().__init__(**kwargs)
        self.nodeids, self.alone = nodeids, alone

    def runtest(self):
        if self.alone:
            proc = _run_child(str(self.config.rootpath), self.nodeids)
        else:
            proc = _BESIDE[self.nodeid].result()  # waits for the background lane
        how = "alone" if self.alone else "beside the suite"
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        _SUMMARIES.append(f"{self.path.name} ({how}, {proc.wall_s:.0f} s): {last}")
        if proc.returncode != 0:
            raise OwnProcessFailed(proc.stdout[-6000:] + proc.stderr[-2000:])

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, OwnProcessFailed):
            return f"{len(self.nodeids)} test(s) run in their own process failed:\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: {len(self.nodeids)} test(s) in a process of their own"


class OwnProcessFailed(Exception):
    pass


_SUMMARIES: list[str] = []
_RUNNING: set[subprocess.Popen] = set()
_BESIDE: dict[str, concurrent.futures.Future] = {}  # nodeid of a beside item -> its finished child
_LANE: list = []  # the background lane's executor, once started


def _start_lane(session: pytest.Session) -> None:
    """Start the background lane's children, one at a time, in the items' order."""
    if _LANE:
        return
    lane = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="own-process-lane")
    _LANE.append(lane)
    for item in session.items:
        if isinstance(item, OwnProcess) and not item.alone:
            _BESIDE[item.nodeid] = lane.submit(_run_child, str(session.config.rootpath), item.nodeids)


def pytest_runtest_setup(item):
    if not os.environ.get(_CHILD) and not (isinstance(item, OwnProcess) and item.alone):  # the alone ones are done: start the lane beside the rest
        _start_lane(item.session)


def pytest_sessionfinish(session):
    for proc in list(_RUNNING):  # interrupted (-x, Ctrl-C): a child left behind would run on alone
        os.killpg(proc.pid, signal.SIGKILL)
    if _LANE:
        _LANE[0].shutdown(wait=False, cancel_futures=True)


def pytest_terminal_summary(terminalreporter):
    for line in _SUMMARIES:  # each counted as one test above
        terminalreporter.write_line(f"in a process of its own, {line}")


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they will
def pytest_collection_modifyitems(session, config, items):
    if os.environ.get(_CHILD):
        return
    kept, own = [], {}
    for item in items:
        if marker := item.get_closest_marker("own_process"):
            own.setdefault(item.module, (item.getparent(pytest.Module), bool(marker.kwargs.get("alone")), []))[2].append(
                item.nodeid)
        else:
            kept.append(item)
    grouped = [OwnProcess.from_parent(module, name="in_own_process", nodeids=ids, alone=alone)
               for module, alone, ids in own.values()]
    # alone first, before the session's fixtures (the shared llama.cpp server) hold memory beside them; the
    # beside ones last, where their items wait for the lane that ran them while the rest did
    items[:] = [i for i in grouped if i.alone] + kept + [i for i in grouped if not i.alone]
