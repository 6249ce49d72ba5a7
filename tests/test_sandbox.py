"""Sandboxed skill execution: the containment suite, call-stack records, and the actor-facing tools.

Every case runs real skill code in a real worker process against a real BabyAI env. After each hostile
call the test checks three things: the call came back as an error observation, the parent process is
alive and unharmed, and the env still answers (a following ordinary skill call works).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skillrepro.envs import get_benchmark
from skillrepro.envs.base import ActionError
from skillrepro.skills import Library, parse_functions
from skillrepro.skills.sandbox import SandboxLimits, SandboxSession, render_outcome, skill_tools, tag_skill_calls

# The wall clock is generous because the CPU is shared: a 1 s CPU budget can take several seconds.
LIMITS = SandboxLimits(call_wall_s=20, call_cpu_s=1, memory_bytes=1 << 30, max_primitives=20, output_chars=2000)

OK_SKILL = '''
def forward_once():
    """One step forward."""
    return go_forward()
'''


def make_env():
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 0)[0])
    env.reset()
    return env


def session(body: str, tmp_path: Path | None = None, **kw) -> tuple[SandboxSession, list, object]:
    env = make_env()
    calls: list = []
    s = SandboxSession(source=OK_SKILL + "\n" + body, env=env, limits=kw.pop("limits", LIMITS), record=calls.append, **kw)
    return s, calls, env


def assert_unharmed(s: SandboxSession, env) -> None:
    """The parent is alive (we are running), the env answers, and the sandbox serves the next call."""
    before = env.n_primitive_steps
    out = s.call_skill("forward_once", [])
    assert out.ok, out
    assert "step" in out.ret  # a BabyAI-Text view ("a wall 2 steps forward")
    assert env.n_primitive_steps == before + 1


def run_hostile(body: str, name: str = "hostile", **kw):
    s, calls, env = session(body, **kw)
    out = s.call_skill(name, [])
    text = render_outcome(name, out)
    assert text.startswith("Skill error") or "Skill error" in text, text
    assert calls and calls[0].function == name and calls[0].exception, calls
    assert_unharmed(s, env)
    s.close()
    return out, text


def test_infinite_cpu_loop_hits_the_cpu_limit():
    out, text = run_hostile("def hostile():\n    while True:\n        pass\n")
    assert "CPU time limit" in text


def test_loop_that_swallows_the_limit_is_killed_by_the_wall_clock():
    body = ("import time\n"
            "def hostile():\n"
            "    while True:\n"
            "        try:\n"
            "            time.sleep(0.05)\n"
            "        except BaseException:\n"
            "            pass\n")
    out, text = run_hostile(body, limits=SandboxLimits(call_wall_s=2, call_cpu_s=1))
    assert out.killed and "wall-clock limit" in out.killed


def test_fork_bomb_is_refused():
    out, text = run_hostile("import os\ndef hostile():\n    while True:\n        os.fork()\n")
    assert "forking is not allowed" in text


@pytest.mark.parametrize("layer,body,expect", [
    ("seccomp", "import os\ndef hostile():\n    return os.fork()\n", "Operation not permitted"),
    ("seccomp", "import subprocess\ndef hostile():\n    return subprocess.run(['true'])\n", "Error"),
    ("landlock", "def hostile():\n    open('/tmp/skillrepro_kernel_probe', 'w')\n", "Permission"),
    ("netns", "import socket\ndef hostile():\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\n", "Error"),
    ("signals", "import os\ndef hostile():\n    os.kill(os.getppid(), 15)\n", "Operation not permitted"),
])
def test_kernel_layers_alone_contain_it(layer, body, expect):
    """With the audit hook switched off, seccomp, Landlock and the network namespace still hold.

    Which layers a kernel offers varies (Landlock needs Linux >= 5.13, signal scoping >= 6.12, a network
    namespace needs root or user namespaces); a layer the worker reports as missing is skipped, by name."""
    probe, _, _ = session("")
    probe.call_skill("forward_once", [])
    iso = probe.isolation
    probe.close()
    active = {"seccomp": "refused" in iso.get("seccomp", ""), "landlock": "writes only" in iso.get("landlock", ""),
              "netns": "namespace" in iso.get("netns", "") or "TCP" in iso.get("landlock", ""),
              "signals": "signals" in iso.get("landlock", "")}
    if not active[layer]:
        pytest.skip(f"kernel layer {layer} not available here: {iso}")
    out, text = run_hostile(body, audit_hook=False)
    assert expect in text, text
    assert not Path("/tmp/skillrepro_kernel_probe").exists()


def test_allocating_10_gb_fails_inside_the_sandbox():
    out, text = run_hostile("def hostile():\n    x = bytearray(10 * 2**30)\n    return len(x)\n")
    assert "MemoryError" in text


@pytest.mark.parametrize("where", ["home", "results", "tmp"])
def test_writing_outside_scratch_is_refused(tmp_path, where):
    target = {"home": Path.home() / f".skillrepro_sandbox_probe_{os.getpid()}",
              "results": tmp_path / "results" / "runs" / "evil.txt",
              "tmp": Path("/tmp") / f"skillrepro_sandbox_probe_{os.getpid()}"}[where]
    target.parent.mkdir(parents=True, exist_ok=True)
    body = f"def hostile():\n    with open({str(target)!r}, 'w') as f:\n        f.write('x')\n"
    out, text = run_hostile(body)
    assert "PermissionError" in text and "only the scratch folder is writable" in text
    assert not target.exists()


def test_writing_inside_scratch_works_and_the_kernel_blocks_the_rest():
    # os.open with raw flags, then a rename out of scratch: both refused; a scratch file is fine.
    body = ("import os\n"
            "def hostile():\n"
            "    with open('note.txt', 'w') as f:\n"
            "        f.write('kept')\n"
            "    os.rename('note.txt', '/tmp/stolen.txt')\n")
    out, text = run_hostile(body)
    assert "os.rename" in text
    assert not Path("/tmp/stolen.txt").exists()


def test_socket_is_refused():
    out, text = run_hostile("import socket\ndef hostile():\n    s = socket.socket()\n    s.connect(('1.1.1.1', 80))\n")
    assert "opening a socket is not allowed" in text


def test_subprocess_is_refused():
    out, text = run_hostile("import subprocess\ndef hostile():\n    return subprocess.run(['echo', 'hi'])\n")
    assert "not allowed" in text
    out, text = run_hostile("import os\ndef hostile():\n    return os.system('echo hi')\n")
    assert "running a shell command is not allowed" in text


def test_signalling_the_parent_is_refused():
    body = "import os, signal\ndef hostile():\n    os.kill(os.getppid(), signal.SIGKILL)\n"
    out, text = run_hostile(body)
    assert "sending a signal is not allowed" in text
    body = "import os, signal\ndef hostile():\n    os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)\n"
    run_hostile(body)
    os.kill(os.getpid(), 0)  # still here


def test_deep_recursion_is_contained():
    out, text = run_hostile("def hostile(n=0):\n    return hostile(n + 1)\n")
    assert "RecursionError" in text
    # With the interpreter's guard lifted the C stack overflows: only the worker dies.
    body = "import sys\nsys.setrecursionlimit(10**8)\ndef hostile(n=0):\n    return hostile(n + 1)\n"
    out, text = run_hostile(body)
    assert out.killed or "RecursionError" in text or "MemoryError" in text


def test_printing_100_mb_is_capped():
    s, calls, env = session("def loud():\n    print('x' * 100_000_000)\n    return 'done'\n")
    out = s.call_skill("loud", [])
    text = render_outcome("loud", out, LIMITS.output_chars)
    assert out.output_total >= 100_000_000 and len(out.output) == LIMITS.output_chars
    assert "[output truncated" in text and len(text) < 10_000
    assert_unharmed(s, env)


def test_runaway_primitive_calls_are_cut_at_the_cap():
    s, calls, env = session("def walk():\n    while True:\n        turn_left()\n")
    before = env.n_primitive_steps
    out = s.call_skill("walk", [])
    assert "primitive calls" in out.exception
    assert env.n_primitive_steps - before == LIMITS.max_primitives
    assert_unharmed(s, env)


def test_call_stack_records_nested_frames_and_primitives():
    body = ('def outer(n):\n    """Two inner calls."""\n    _inner()\n    return _inner() + str(n)\n'
            'def _inner():\n    turn_left()\n    return "ok"\n')
    s, calls, env = session(body)
    out = s.call_skill("outer", [3])
    assert out.ok and out.ret == "ok3" and out.primitives == 2
    root = [c for c in calls if not c.parent_frame_id]
    kids = [c for c in calls if c.parent_frame_id]
    assert len(root) == 1 and root[0].function == "outer" and json.loads(root[0].arguments) == [[3], {}]
    assert [k.function for k in kids] == ["_inner", "_inner"]
    assert all(k.parent_frame_id == root[0].frame_id for k in kids)
    assert all(json.loads(k.primitives)[0][0] == "turn_left" for k in kids)
    assert json.loads(root[0].primitives) == []  # the root issued none itself


def test_bad_arguments_raise_action_error_and_exceptions_come_back():
    s, calls, env = session("def needs(x):\n    return 1 / x\n")
    with pytest.raises(ActionError, match="needs"):
        s.call_skill("needs", [])
    out = s.call_skill("needs", [0])
    assert "ZeroDivisionError" in out.exception
    assert_unharmed(s, env)


def test_a_library_that_fails_to_load_reports_it():
    s, calls, env = session("raise ValueError('broken at import')\n")
    out = s.call_skill("forward_once", [])
    assert "failed to load" in out.exception and "broken at import" in out.exception


def test_skill_tools_expose_public_skills_only_and_tag_steps():
    src = OK_SKILL + '\ndef go(n: int):\n    """Go n steps."""\n    for _ in range(n):\n        _fwd()\n    return "went"\n' \
          '\ndef _fwd():\n    return go_forward()\n'
    lib = Library(0, parse_functions(src))
    env = make_env()
    calls: list = []
    tools = skill_tools(lib, env, calls.append, LIMITS)
    assert [t.name for t in tools] == ["forward_once", "go"]
    assert tools[1].params == (("n", "int"),) and tools[1].doc == "Go n steps."
    assert tools[1].run([2]) == "went"
    assert env.n_primitive_steps == 2

    class S:  # the two fields tag_skill_calls reads from a Step record
        def __init__(self, step, action, valid=True):
            self.step, self.action, self.valid = step, action, valid

    tag_skill_calls(calls, "ep1", [S(0, "turn_left"), S(1, "go")])
    assert {c.episode_id for c in calls} == {"ep1"} and {c.step for c in calls} == {1}


def test_a_skill_that_outlives_the_episode_ends_cleanly():
    s, calls, env = session("def two():\n    turn_left()\n    turn_left()\n    return 'both'\n")
    env.done = True  # as if the previous action had finished the mission
    out = s.call_skill("two", [])
    assert out.exception.startswith("EpisodeOver") and out.primitives == 0
    assert render_outcome("two", out).startswith("The episode ended while two was running")
