"""The inducer's code interpreter (SpeedRunner's `execute_code`) against hostile cells, on every thread.

The interpreter holds DuckDB, which starts its own threads. seccomp and Landlock must cover each of them, so
every attempt below is made on the main thread and, through a thread-directed POSIX timer whose handler is a
ctypes callback, on every other thread of the process. The audit hook is switched off: what is tested is what
the kernel enforces.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from repo import copy_workflow
from scripted import ChatServer, completion
from skillrepro.skills.isolation import SandboxError, SandboxLimits, SandboxPolicy
from skillrepro.skills.sandbox import SandboxSession

LIMITS = SandboxLimits(call_wall_s=30, call_cpu_s=10, start_wall_s=120, memory_bytes=4 << 30, output_chars=16000)

# One attempt per seccomp group and Landlock rule; each answers "ok" or the errno's text.
ATTEMPTS = r'''
import ctypes, os, threading
_libc = ctypes.CDLL(None, use_errno=True)

def _sys(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(nr, *args)
    if r >= 0 and nr in (41, 319, 425):
        os.close(r)
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())

def _os(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return e.strerror

def attempts():
    stdlib = os.path.dirname(os.__file__)
    return {
        "process: execve": _sys(59, b"/nonexistent", None, None),
        "process: unshare(user namespace)": _sys(272, 0x10000000),
        "signals: kill": _sys(62, os.getpid(), 0),
        "sockets: socket(AF_UNIX)": _sys(41, 1, 1, 0),
        "uncounted memory: memfd_create": _sys(319, b"x", 0),
        "file metadata: chmod": _sys(90, b"/nonexistent", 0o777),
        "kernel interfaces: io_uring_setup": _sys(425, 1, None),
        "landlock: read outside the allow-list": _os(lambda: os.listdir("/")),
        "landlock: write outside scratch": _os(lambda: open(os.path.join(stdlib, "planted.py"), "w")),
        "thread": threading.get_native_id(),
    }

def on_every_thread(fn, timeout=10.0):
    """fn() run on each thread but this one: a POSIX timer aimed at the thread, a ctypes signal handler."""
    import struct, time
    results = {}
    HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
    handler = HANDLER(lambda signo: results.__setitem__(threading.get_native_id(), fn()))
    _libc.signal.argtypes = [ctypes.c_int, HANDLER]
    _libc.signal(10, handler)  # SIGUSR1
    me = threading.get_native_id()
    others = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
    for tid in others:
        sev = struct.pack("<qiii", 0, 10, 4, tid).ljust(64, b"\0")  # SIGEV_THREAD_ID
        timer = ctypes.c_int(0)
        assert _libc.syscall(222, 1, ctypes.c_char_p(sev), ctypes.byref(timer)) == 0, os.strerror(ctypes.get_errno())
        spec = struct.pack("<qqqq", 0, 0, 0, 1_000_000)  # fire once, in 1 ms
        assert _libc.syscall(223, timer.value, 0, ctypes.c_char_p(spec), None) == 0
        deadline = time.time() + timeout
        while tid not in results and time.time() < deadline:
            time.sleep(0.01)
        _libc.syscall(226, timer.value)
    return {"others": others, "results": results}
'''

DENIED = {"Operation not permitted"}


@pytest.fixture()
def history(tmp_path, monkeypatch):
    """A run folder with one training batch, and the test inside it, as Snakemake runs a job: relative paths."""
    batch = tmp_path / "results" / "runs" / "babyai" / "sr" / "seed0" / "train" / "batch0"
    batch.mkdir(parents=True)
    pq.write_table(pa.table({"task_id": ["t1", "t2", "t3"], "success": [True, False, True]}), batch / "episodes.parquet")
    monkeypatch.chdir(tmp_path)
    return batch.relative_to(tmp_path)


def interpreter(history, **kw) -> SandboxSession:
    db = {"tables": {"episodes": [str(history / "episodes.parquet")]}, "empty_schemas": {}, "inline": {},
          "library_versions": {}}
    return SandboxSession(site_packages=True, limits=LIMITS, db=db, **kw)


def test_relative_history_paths_are_read_and_every_thread_is_in_seccomp_filter_mode(history):
    s = interpreter(history)
    iso = s.start()
    assert "all in filter mode" in iso["seccomp"], iso["seccomp"]
    out = s.exec_code("sql('SELECT task_id, success FROM episodes ORDER BY task_id')")
    assert out.ok and "'t1'" in out.ret and "'t3'" in out.ret, out
    modes = s.exec_code("import os\n{t: [l.split()[1] for l in open(f'/proc/self/task/{t}/status') "
                        "if l.startswith('Seccomp:')][0] for t in os.listdir('/proc/self/task')}")
    threads = eval(modes.ret)
    assert len(threads) > 1 and set(threads.values()) == {"2"}, threads  # DuckDB's threads included
    s.close()


@pytest.mark.parametrize("bwrap", [True, False], ids=["bwrap", "fallback"])
def test_every_thread_is_contained_by_seccomp_and_landlock(history, bwrap, monkeypatch):
    """Under bwrap a write outside scratch meets a read-only mount first; without it (as root here) only
    Landlock stands in the way, which is what the fallback case shows."""
    from skillrepro.skills import isolation

    if not bwrap:
        monkeypatch.setattr(isolation, "_BWRAP", {"path": None, "why": "bwrap hidden by the test"})
    elif isolation.bwrap()[0] is None:
        pytest.fail(f"bubblewrap cannot run here ({isolation.bwrap()[1]}); the README asks for it")
    s = interpreter(history, audit_hook=False)
    s.start()
    assert s.exec_code(ATTEMPTS).ok
    main = json.loads(s.exec_code("import json; json.dumps(attempts())").ret.strip("'"))
    out = s.exec_code("import json; json.dumps(on_every_thread(attempts))")
    assert out.ret, out
    found = json.loads(out.ret.strip("'"))
    assert found["others"], "the interpreter should hold DuckDB's threads"
    assert len(found["results"]) == len(found["others"]), found  # the attack reached every thread
    for where in [main, *found["results"].values()]:
        tid = where.pop("thread")
        for attempt, errno in where.items():
            expect = ({"Permission denied", "Read-only file system"} if attempt.endswith("scratch") and bwrap
                      else {"Permission denied"} if attempt.startswith("landlock") else DENIED)
            assert errno in expect, f"thread {tid}: {attempt} gave {errno!r}"
    s.close()


def test_a_unix_socket_left_in_the_history_folder_cannot_be_reached(history):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(history / "answer.sock"))
    server.listen(1)
    s = interpreter(history)
    s.start()
    path = os.path.abspath(history / "answer.sock")
    out = s.exec_code(f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})")
    assert not out.ok or out.exception, out
    assert "ermission" in out.exception or "No such file" in out.exception, out.exception
    server.settimeout(0.2)
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()
    s.close()


@pytest.mark.parametrize("cell, left", [
    ("import signal\nsignal.setitimer(signal.ITIMER_REAL, 30)", "itimers"),
    ("import signal\nsignal.signal(signal.SIGUSR2, lambda *a: None)", "status"),
    (ATTEMPTS + "\nimport struct\nsev = struct.pack('<qiii', 0, 0, 1, 0).ljust(64, b'\\0')\n"
     "t = ctypes.c_int(0)\n_libc.syscall(222, 1, ctypes.c_char_p(sev), ctypes.byref(t))", "timers"),
])
def test_a_cell_that_leaves_something_running_restarts_the_interpreter(history, cell, left):
    s = interpreter(history, audit_hook=False)
    s.start()
    assert s.exec_code("kept = 41").ok
    out = s.exec_code(cell)
    assert out.exception.startswith("InterpreterRestart") and left in out.exception.splitlines()[0], out
    assert s.exec_code("'kept' in globals()").ret == "False"  # a fresh process: nothing of the cell survives
    assert s.exec_code("sql('SELECT count(*) AS n FROM episodes')").ret == "[{'n': 3}]"
    s.close()


def test_an_interpreter_that_cannot_read_its_history_fails_loud(history):
    s = SandboxSession(site_packages=True, limits=LIMITS, db={
        "tables": {"episodes": [str(history / "missing.parquet")]}, "empty_schemas": {}, "inline": {},
        "library_versions": {}})
    with pytest.raises(SandboxError, match="missing.parquet"):
        s.start()
    with pytest.raises(SandboxError, match="the interpreter failed to start"):
        s.exec_code("1")
    s.close()


def test_a_required_layer_the_interpreter_lacks_fails_loud(history, monkeypatch):
    from skillrepro.skills import isolation

    monkeypatch.setattr(isolation, "_BWRAP", {"path": None, "why": "bwrap hidden by the test"})
    s = interpreter(history, policy=SandboxPolicy(("bwrap",)))
    with pytest.raises(SandboxError, match="sandbox.require: layer\\(s\\) bwrap unavailable"):
        s.start()
    s.close()


class _ScriptedServer(ChatServer):
    """The inducer's first request gets a cell over the history, later ones `finish`; the actor always steps
    forward. Enough to drive the real rules."""

    CELL = "Thought: look at the history.\nAction: execute_code\n```python\nsql('SELECT task_id, success FROM episodes')\n```"

    def __init__(self):
        self.inducer_requests = 0
        super().__init__(self.answer)

    def answer(self, path: str, raw: bytes) -> tuple[int, bytes]:
        body = json.loads(raw)
        if "execute_code" in body["messages"][0]["content"]:  # the inducer's system prompt lists its tools
            self.inducer_requests += 1
            return 200, completion(body["model"], self.CELL if self.inducer_requests == 1 else "Action: finish")
        return 200, completion(body["model"], "Thought: go.\nAction: go_forward()")


@pytest.mark.workflow
def test_the_induce_rule_runs_cells_over_the_history_snakemake_gives_it(tmp_path):
    """The real rules through Snakemake (relative paths, the workflow folder as working directory): the
    sleep phase's interpreter answers its cell with the rows of the run's training episodes."""
    copy_workflow(tmp_path)
    cfg = {"llm": {"backend": "embedded", "model": "smollm2-135m", "max_tokens": 32, "slots": 2},
           "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 2}},
           "methods": {"speedrunner": {"method": "speedrunner"}},
           "protocol": {"seeds": [0], "train_rollouts": 2, "sleep_every": 2, "eval_every": 2, "n_test": 1},
           "budgets": {"rollout_wall_s": 120, "inducer_requests": 3}, "pricing": {}}
    (tmp_path / "scripted.yaml").write_text(yaml.safe_dump(cfg))
    server = _ScriptedServer()
    target = "results/runs/babyai/speedrunner/seed0/library/v1/manifest.json"
    try:
        proc = subprocess.run([sys.executable, "-m", "snakemake", target, "--cores", "2", "--configfile",
                               "scripted.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "SKILLREPRO_LLM_URL": server.url})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    transcript = [json.loads(line) for line in
                  (tmp_path / "results/runs/babyai/speedrunner/seed0/induce/v1/transcript.jsonl").read_text().splitlines()]
    cell = transcript[0]
    assert cell["tool"] == "execute_code"
    tasks = json.loads((tmp_path / "results/tasks/babyai/seed0/train.json").read_text())[:2]
    rows = eval(cell["observation"])  # the cell's value: a list of dicts, one per training episode
    assert len(rows) == 2 and {"task_id", "success"} == set(rows[0]), cell["observation"]
    assert sorted(r["task_id"] for r in rows) == sorted(tasks)
    log = (tmp_path / "logs/runs/babyai/speedrunner/seed0/induce_v1.log").read_text()
    assert "all in filter mode" in log and "MISSING: not reported" not in log
