"""Sandboxed skill execution: the containment suite, call-stack records, and the actor-facing tools.

Every case runs real skill code in a real worker process against a real BabyAI env. The hostile suite
(`CASES`, one parametrized test) covers every class of escape: foreign-ABI syscalls, audit-hook bypass,
secrets, resources, frame forgery and leaks between calls; after each case the parent, the env, the files
outside scratch and the records are checked, and the next ordinary call must be exactly one clean step.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import time
from pathlib import Path

import pytest

from skillrepro.benchmarks import get_benchmark
from skillrepro.benchmarks.base import ActionError
from skillrepro.skills import Library, parse_functions
from skillrepro.skills import isolation, sandbox
from skillrepro.agent import skill_tools
from skillrepro.skills.isolation import SandboxError, SandboxLimits, SandboxPolicy
from skillrepro.skills.protocol import render_outcome, tag_skill_calls
from skillrepro.skills.sandbox import SandboxSession, WORKER
from repo import ROOT

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
    if env.done:
        env.reset()
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
    tools = skill_tools(lib, env, calls.append, SandboxPolicy(), limits=LIMITS)
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


# ============================================================================================ hostile suite
# Every case is a skill written to escape, in one library (the helpers below are part of it, as an attacker
# would write them). Each runs through the real sandbox against a real BabyAI env; after each, `contained`
# checks the parent, the env, the files outside scratch and the records, and that the next call is clean.

HELPERS = r'''
import json, os, sys


class _H:
    """Helpers that send no frames of their own (methods are not traced; top-level functions are)."""

    @staticmethod
    def m():
        return sys.modules["__main__"]

    @staticmethod
    def forge(**frame):
        _H.m().send(frame)
        return "forged"

    @staticmethod
    def burst(*frames):
        """Several frames, numbered as the worker would, in one write (so the parent sees them together)."""
        m, out = _H.m(), b""
        for f in frames:
            d = json.dumps({**f, "call": m._CALL["id"], "seq": m._CALL["seq"]}).encode()
            m._CALL["seq"] += 1
            out += len(d).to_bytes(4, "big") + d
        return out


def _bypass_hook():
    """Switch the audit hook off: swap its code for a no-op with the same free variables."""
    import gc
    for f in gc.get_objects():
        if type(f).__name__ == "function" and f.__name__ == "hook" and "worker" in f.__code__.co_filename:
            n = len(f.__code__.co_freevars)
            src = ("def outer():\n" + "".join(f"    v{i} = None\n" for i in range(n))
                   + "    def hook(event, args):\n        return (" + "".join(f"v{i}, " for i in range(n))
                   + ")\n    return hook\n")
            ns = {}
            exec(src, ns)
            f.__code__ = ns["outer"]().__code__
            return True
    return False


def _libc():
    assert _bypass_hook()
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _shellcode(code):
    assert _bypass_hook()
    import ctypes, mmap
    buf = mmap.mmap(-1, 4096, prot=7)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    return ctypes.CFUNCTYPE(ctypes.c_long)(addr)()

'''

SECRET = "sk-skillrepro-test-secret-4711"


def _paths() -> dict[str, str]:
    import minigrid

    return {"home_canary": str(Path.home() / f".skillrepro_canary_{os.getpid()}"),
            "repo": str(ROOT), "pyproject": str(ROOT / "pyproject.toml"), "results": str(ROOT / "results"),
            "env_package": minigrid.__file__, "venv": sys.prefix, "shadow": "/etc/shadow",
            "passwd": "/etc/passwd", "tmp": "/tmp", "work": "/work", "root": "/root/.bashrc"}


# (id, class, body, expectation). Expectations: ("killed", s) the child was killed, s in the reason;
# ("error", s) the call raised inside the sandbox with s in the message; ("ret", s) it returned s;
# ("action", s) the parent refused the worker's frames: ActionError with s; ("steps", n) returned, n steps.
CASES = [
    # ---- syscalls through a foreign ABI (audit hook switched off first, by the skill itself)
    ("abi_int80_fork", "abi", "return _shellcode(b'\\xb8\\x02\\x00\\x00\\x00\\xcd\\x80\\xc3')", ("killed", "SIGSYS")),
    ("abi_int80_execve", "abi", "return _shellcode(b'\\xb8\\x0b\\x00\\x00\\x00\\xcd\\x80\\xc3')", ("killed", "SIGSYS")),
    ("abi_x32_fork", "abi", "return _libc().syscall(0x40000000 | 57)", ("killed", "SIGSYS")),
    ("abi_x32_getpid", "abi", "return _libc().syscall(0x40000000 | 39)", ("killed", "SIGSYS")),
    ("abi_syscall_fork", "abi", "return _libc().syscall(57)", ("ret", "-1")),
    ("abi_clone_process", "abi", "return _libc().syscall(56, 17, 0, 0, 0, 0)", ("ret", "-1")),
    ("abi_shellcode_execve", "abi", "return _shellcode(b'\\xb8\\x3b\\x00\\x00\\x00\\x0f\\x05\\xc3')", ("ret", "-1")),
    # ---- what only the audit hook used to guard: the hook is switched off, the kernel still holds
    ("hook_fork", "hook", "assert _bypass_hook()\n    return os.fork()", ("error", "PermissionError")),
    ("hook_unix_socket", "hook", "assert _bypass_hook()\n    import socket\n    s = socket.socket(socket.AF_UNIX)\n"
     "    s.connect({unix_socket!r})", ("error", "PermissionError")),
    ("hook_chmod", "hook", "assert _bypass_hook()\n    os.chmod('/sandbox/_worker.py', 0o777)", ("error", "PermissionError")),
    ("hook_utime", "hook", "assert _bypass_hook()\n    os.utime(sys.executable, (0, 0))", ("error", "PermissionError")),
    ("hook_xattr", "hook", "assert _bypass_hook()\n    os.setxattr(sys.executable, 'user.x', b'1')", ("error", "PermissionError")),
    ("hook_prlimit", "hook", "assert _bypass_hook()\n    import resource\n    resource.prlimit(1, resource.RLIMIT_NOFILE, (1, 1))",
     ("error", "PermissionError")),
    ("hook_kill", "hook", "assert _bypass_hook()\n    os.kill(1, 9)", ("error", "PermissionError")),
    ("hook_thread", "hook", "assert _bypass_hook()\n    import threading\n    threading.Thread(target=turn_left).start()",
     ("error", "can't start new thread")),
    ("hook_write_runtime", "hook", "assert _bypass_hook()\n    open(sys.executable, 'ab').write(b'x')", ("error", "Errno")),
    ("hook_subprocess", "hook", "assert _bypass_hook()\n    import subprocess\n    subprocess.run(['/bin/sh', '-c', 'true'])",
     ("error", "Error")),
    # ---- secrets: environment variables, home, results, the project, environment packages, other processes
    ("secret_environ", "secrets", "return json.dumps(dict(os.environ))", ("ret", '{"HOME": "/scratch"')),
    ("secret_paths_exist", "secrets", "return json.dumps([p for p in {paths!r}.values() if os.path.exists(p)])",
     ("ret", "[]")),
    ("secret_read_home", "secrets", "return open({home_canary!r}).read()", ("error", "Error")),
    ("secret_proc_environ", "secrets", "return open('/proc/1/environ').read() + open('/proc/self/environ').read()",
     ("error", "PermissionError")),
    ("secret_env_package", "secrets", "import minigrid\n    return minigrid.__file__", ("error", "ModuleNotFoundError")),
    ("secret_env_package_file", "secrets", "return open({env_package!r}).read()", ("error", "Error")),
    # ---- resources
    ("res_memfd", "resources", "fd = os.memfd_create('x')\n    os.ftruncate(fd, 1 << 30)", ("error", "PermissionError")),
    ("res_shm", "resources", "import _posixshmem\n    _posixshmem.shm_open('/skillrepro', os.O_CREAT | os.O_RDWR, 0o600)",
     ("error", "Error")),
    ("res_disk", "resources", "for i in range(40):\n        with open(f'f{{i}}', 'wb') as f:\n"
     "            f.write(b'x' * (8 << 20))", ("error", "No space left")),
    ("res_memory", "resources", "x = bytearray(10 * 2**30)\n    return len(x)", ("error", "MemoryError")),
    ("res_nproc", "resources", "import _thread, resource\n    assert os.getuid() != 0 and resource.getrlimit(resource.RLIMIT_NPROC) == (0, 0)\n"
     "    _thread.start_new_thread(turn_left, ())", ("error", "can't start new thread")),
    # ---- the frame protocol
    ("proto_garbage", "protocol", "os.write(_H.m().OUT_FD, b'\\x00\\x00\\x00\\x05hello')", ("action", "not JSON")),
    ("proto_huge_length", "protocol", "os.write(_H.m().OUT_FD, b'\\x7f\\xff\\xff\\xff')", ("action", "bytes (the limit")),
    ("proto_unknown_primitive", "protocol", "return _H.forge(t='prim', frame=_H.m()._CALL['id'], name='self_destruct', args=[])",
     ("action", "unknown primitive")),
    ("proto_ghost_frame_step", "protocol", "return _H.forge(t='prim', frame='ghost', name='turn_left', args=[])",
     ("action", "not the open frame")),
    ("proto_wrong_call_id", "protocol", "_H.m()._CALL['id'] = 'deadbeef0000'\n    return 'x'", ("action", "expected")),
    ("proto_seq_replay", "protocol", "turn_left()\n    _H.m()._CALL['seq'] -= 1\n    return 'x'", ("action", "expected")),
    ("proto_root_overwrite", "protocol", "c = _H.m()._CALL['id']\n    return _H.forge(t='enter', frame=c, parent=c, fn='_bypass_hook', args='[]')",
     ("action", "not a fresh child")),
    ("proto_unknown_function", "protocol", "c = _H.m()._CALL['id']\n    return _H.forge(t='enter', frame=c + '.99', parent=c, fn='evil', args='[]')",
     ("action", "does not define")),
    ("proto_oversize_record", "protocol", "c = _H.m()._CALL['id']\n    return _H.forge(t='enter', frame=c + '.99', parent=c, fn='_bypass_hook', args='x' * 50000)",
     ("action", "longer than")),
    ("proto_too_many_frames", "protocol", "c = p = _H.m()._CALL['id']\n    for i in range(100, 200):\n"
     "        _H.forge(t='enter', frame=f'{{c}}.{{i}}', parent=p, fn='_bypass_hook', args='[]')\n        p = f'{{c}}.{{i}}'",
     ("action", "more than")),
    ("proto_exit_root", "protocol", "return _H.forge(t='exit', frame=_H.m()._CALL['id'], ret='', exc='')", ("action", "not the open nested")),
    ("proto_extra_keys", "protocol", "return _H.forge(t='result', ret='x', exc='', tb='', out='', out_total=0, primitives=0)",
     ("action", "keys")),
    ("proto_bad_types", "protocol", "return _H.forge(t='result', ret='x', exc='', tb='', out='', out_total='many')", ("action", "type")),
    ("proto_late_badargs", "protocol", "turn_left()\n    return _H.forge(t='badargs', msg='no')", ("action", "badargs after")),
    ("proto_fake_result_then_steps", "protocol", "step = {{'t': 'prim', 'frame': _H.m()._CALL['id'], 'name': 'turn_left', 'args': []}}\n"
     "    os.write(_H.m().OUT_FD, _H.burst({{'t': 'result', 'ret': 'done', 'exc': '', 'tb': '', 'out': '', 'out_total': 0}}, step))\n"
     "    turn_left()", ("action", "after its result")),
    ("proto_write_after_result", "protocol", "m, real = _H.m(), os.write\n    def evil(fd, data):\n"
     "        if fd == m.OUT_FD and b'\"t\": \"result\"' in bytes(data):\n"
     "            real(fd, bytes(data) + _H.burst({{'t': 'prim', 'frame': m._CALL['id'], 'name': 'turn_left', 'args': []}}))\n"
     "            return len(data)\n        return real(fd, data)\n"
     "    os.write = evil\n    return 'ok'", ("action", "after its result")),
    ("proto_close_pipe_and_spin", "protocol", "os.close(_H.m().OUT_FD)\n    while True:\n        pass",
     ("killed", "closed its frame pipe")),
    # ---- leaks from call n into call n+1 (the next call is checked by `contained`)
    ("leak_del", "leaks", "import gc\n    gc.disable()\n    class Ghost:\n        def __del__(self):\n"
     "            for _ in range(3):\n                turn_left()\n    g = Ghost()\n    g.me = g\n    _H.m().ghost = g\n    return 'planted'",
     ("ret", "planted")),
    ("leak_timer", "leaks", "import signal\n    signal.signal(signal.SIGALRM, lambda *a: turn_left())\n"
     "    signal.setitimer(signal.ITIMER_REAL, 0.3, 0.05)\n    return 'armed'", ("ret", "armed")),
    ("leak_atexit", "leaks", "import atexit\n    atexit.register(turn_left)\n    return 'registered'", ("ret", "registered")),
    ("leak_patched_globals", "leaks", "g = globals()\n    g['go_forward'] = g['turn_left']\n    return 'patched'", ("ret", "patched")),
    # a copy of the frame pipe and no exit after the result: only the parent's SIGKILL ends this child
    ("leak_keep_pipe_and_live", "leaks", "m = _H.m()\n    m.kept = os.dup(m.OUT_FD)\n    os._exit = lambda code: None\n"
     "    signal = __import__('signal')\n    signal.signal(signal.SIGALRM, lambda *a: os.write(m.kept, b'late'))\n"
     "    signal.setitimer(signal.ITIMER_REAL, 0.2)\n    return 'kept'", ("ret", "kept")),
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """One session over the whole hostile library (each call still gets a fresh child), plus canaries."""
    import socket

    tmp = tmp_path_factory.mktemp("hostile")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp / "parent.sock"))
    listener.listen(1)
    listener.setblocking(False)
    paths = _paths()
    canaries = {Path(paths["home_canary"]): SECRET, tmp / "results" / "secret.txt": SECRET}
    for p, text in canaries.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    os.environ["SKILLREPRO_TEST_API_KEY"] = SECRET
    fill = {**paths, "paths": paths, "unix_socket": str(tmp / "parent.sock")}
    body = "".join(f"\ndef {cid}():\n    {code.format(**fill)}\n" for cid, _, code, _ in CASES)
    env = make_env()
    calls: list = []
    s = SandboxSession(source=OK_SKILL + HELPERS + body, env=env, record=calls.append,
                       limits=SandboxLimits(call_wall_s=20, call_cpu_s=2, max_primitives=20, max_frames=50))
    snap = {p: (p.read_text(), p.stat().st_mode, p.stat().st_mtime_ns) for p in [*canaries, WORKER]}
    yield s, env, calls, snap, listener
    s.close()
    listener.close()
    os.environ.pop("SKILLREPRO_TEST_API_KEY", None)
    Path(paths["home_canary"]).unlink()


def _applied(records) -> int:
    return sum(1 for r in records for p in json.loads(r.primitives) if not str(p[2]).startswith("(refused"))


# Cases contained by bubblewrap's layers alone (its uid, its environment, its mounts, its scratch size).
NEEDS_BWRAP = {"hook_thread", "secret_environ", "secret_paths_exist", "res_disk", "res_nproc"}


@pytest.mark.parametrize("cid,cls,code,expect", CASES, ids=[c[0] for c in CASES])
def test_hostile_skill_is_contained(hostile, cid, cls, code, expect, request):
    if cid in NEEDS_BWRAP:
        request.getfixturevalue("needs_bwrap")
    s, env, calls, snap, listener = hostile
    if env.done:
        env.reset()
    before, n_rec = env.n_primitive_steps, len(calls)
    kind, what = expect
    try:
        out = s.call_skill(cid, [])
        text = render_outcome(cid, out)
        assert kind != "action", f"expected the parent to refuse the frames; got {text}"
    except ActionError as e:
        out, text = None, f"ActionError: {e}"
        assert kind == "action", text
    # the intended containment
    if kind == "killed":
        assert out.killed and what in out.killed, text
    elif kind == "error":
        assert out.exception and what in out.exception + out.traceback, text
    elif kind == "ret":
        assert out.ok and out.ret.startswith(what), text
    else:
        assert what in text, text
    # the records: one root frame named after the skill, children beneath it, every applied step recorded
    mine = calls[n_rec:]
    roots = [c for c in mine if not c.parent_frame_id]
    assert len(roots) == 1 and roots[0].function == cid, mine
    assert all(c.frame_id == roots[0].frame_id or c.frame_id.startswith(roots[0].frame_id + ".") for c in mine)
    assert all(len(c.arguments) <= 2100 and len(c.return_value) <= 4100 and len(c.exception) <= 4200 for c in mine)
    assert env.n_primitive_steps - before == _applied(mine), (env.n_primitive_steps - before, mine)
    if out is not None:
        assert out.primitives == env.n_primitive_steps - before
    # the parent, its environment and the files outside scratch
    assert os.environ["SKILLREPRO_TEST_API_KEY"] == SECRET
    assert SECRET not in text and all(SECRET not in c.return_value + c.exception + c.arguments for c in mine)
    for p, (content, mode, mtime) in snap.items():
        st = p.stat()
        assert (p.read_text(), st.st_mode, st.st_mtime_ns) == (content, mode, mtime), p
    with pytest.raises(BlockingIOError):
        listener.accept()
    # nothing of this call acts later: no step while idle, and the next call is exactly one go_forward
    idle = env.n_primitive_steps
    time.sleep(0.1)
    assert env.n_primitive_steps == idle
    n_rec = len(calls)
    assert_unharmed(s, env)
    nxt = calls[n_rec:]
    assert [c.function for c in nxt] == ["forward_once"]
    assert [p[0] for p in json.loads(nxt[0].primitives)] == ["go_forward"]


@pytest.mark.parametrize("module_code,expect", [
    ("import os, sys\nos.write(sys.modules['__main__'].OUT_FD, b'\\x00\\x00\\x00\\x03abc')\n", "not JSON"),
    (HELPERS + "_libc().syscall(0x40000000 | 39)\n", "SIGSYS"),
    ("while True:\n    try:\n        pass\n    except BaseException:\n        pass\n", "wall-clock"),
    ("import os, sys\nos.close(sys.modules['__main__'].OUT_FD)\nwhile True:\n    pass\n", "closed its frame pipe"),
])
def test_a_library_that_attacks_while_loading_fails_to_load(module_code, expect):
    """Module-level code runs in the child before `ready`: forged frames, a forbidden syscall or a hang
    there make a load error (an observation), never an exception in the actor."""
    # CPU limit above the start wall clock: the hang is stopped by the wall clock on a quiet or a busy machine.
    s, calls, env = session(module_code, limits=SandboxLimits(call_wall_s=5, start_wall_s=3, call_cpu_s=10))
    out = s.call_skill("forward_once", [])
    assert "failed to load" in out.exception and expect in out.exception, out
    assert env.n_primitive_steps == 0 and [c.function for c in calls] == ["forward_once"]
    s.close()


def test_a_child_that_closes_its_pipe_before_its_pidfd_arrives_is_not_a_dead_zygote(monkeypatch):
    """The zygote sends a child's pidfd right after the fork; on a busy machine the child can load its library
    and close its frame pipe first (seen once in the suite: "the sandbox's zygote died"). Held back here for a
    second, the pidfd still arrives, the child is killed through it, and the load error says what it did."""
    import socket

    real, hold = socket.recv_fds, {"until": 0.0}

    def late(sock, *args, **kwargs):
        if time.monotonic() < hold["until"]:
            raise BlockingIOError  # the message waits in the socket, unread
        return real(sock, *args, **kwargs)

    monkeypatch.setattr(socket, "recv_fds", late)
    code = "import os, sys\nos.close(sys.modules['__main__'].OUT_FD)\nwhile True:\n    pass\n"
    s, calls, env = session(code, limits=SandboxLimits(call_wall_s=5, start_wall_s=3, call_cpu_s=10))
    hold["until"] = time.monotonic() + 1.0
    out = s.call_skill("forward_once", [])
    assert "failed to load" in out.exception and "closed its frame pipe" in out.exception, out
    s.close()


COUNTER = """
import os
_calls = [0]

def count():
    \"\"\"Count this process's calls in a module global; step once.\"\"\"
    _calls[0] += 1
    go_forward()
    return f"{_calls[0]} {os.getpid()}"
"""


def _workers(s: SandboxSession) -> dict[int, dict[str, str]]:
    """The session's worker processes as the host sees them (the zygote and its children), each with its
    /proc status fields; every process under the session's bwrap, worker or not, is listed under 'all'."""
    out: dict = {"all": {}}
    todo = [s.proc.pid]
    while todo:
        pid = todo.pop()
        try:
            kids = [int(c) for t in os.listdir(f"/proc/{pid}/task")
                    for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            status = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines())
        except OSError:
            continue  # it ended meanwhile
        todo += kids
        out["all"][pid] = status
        if b"python" in cmd.split(b"\0")[0] and b"_worker.py" in cmd:  # not the bwrap processes that start it
            out[pid] = {k: v.strip() for k, v in status.items()}
    return out


def _children_of_zygote(w: dict) -> list[dict[str, str]]:
    """The zygote's children that have not exited (a zombie runs nothing)."""
    return [st for pid, st in w.items() if pid != "all" and int(st["PPid"]) in w and not st["State"].startswith("Z")]


LOAD_MARK = """
import os
open(f"loaded-{os.getpid()}", "w").close()  # module-level code: marks that this child loaded the library

def loaded():
    \"\"\"Step once, then list the children that have loaded the library so far.\"\"\"
    go_forward()
    return " ".join(sorted(f for f in os.listdir(".") if f.startswith("loaded-")))
"""


def test_each_call_gets_a_fresh_child_and_the_next_one_loads_only_after_it_is_reaped():
    """The next call's child is staged as a call starts (two children are alive during the call's steps),
    but no model-written code runs in it until the running child is reaped: during call k exactly k + 1
    children have run the library's module-level code."""
    s, calls, env = session(COUNTER + LOAD_MARK)
    alive_during_steps = []
    real_step = env.step

    def step(name, args):  # the parent steps the env in the middle of a call: which children exist then?
        time.sleep(0.2)  # time enough for a staged child to take its layers and reach its turn
        alive_during_steps.append(len(_children_of_zygote(_workers(s))))
        return real_step(name, args)

    env.step = step
    outs = [s.call_skill("count", []) for _ in range(4)]
    zygote = s.proc.pid
    assert all(o.ok for o in outs), outs
    counts, pids = zip(*(o.ret.split() for o in outs))
    assert counts == ("1",) * 4  # the library was loaded anew: nothing of the previous call's process
    assert len(set(pids)) == 4 and s.proc.pid == zygote and s.restarts == 0
    assert alive_during_steps == [2] * 4  # the running child and the staged one
    marks = [s.call_skill("loaded", []).ret.split() for _ in range(3)]
    assert [len(m) for m in marks] == [5, 6, 7]  # 4 earlier children, then this one: never the staged one
    s.close()


def test_the_next_child_waits_with_every_layer_and_is_gone_at_close(needs_bwrap):
    """After a call the next child starts at once and waits for its call with its layers applied; neither it
    nor anything else of the session outlives close(), or the session itself when it is dropped unclosed."""
    import gc

    for how in ("close", "drop"):
        s, calls, env = session("")
        assert_unharmed(s, env)
        deadline = time.time() + 20
        while time.time() < deadline:
            w = _workers(s)
            kids = _children_of_zygote(w)
            if kids and kids[0].get("Seccomp") == "2":
                break
            time.sleep(0.05)
        assert len(kids) == 1, w
        assert kids[0]["Seccomp"] == "2" and kids[0]["NoNewPrivs"] == "1", kids[0]
        if os.geteuid() == 0:  # outside a user namespace its uid is nobody's on the host too
            assert kids[0]["Uid"].split()[0] == "65534", kids[0]
        pids = list(w["all"])
        if how == "close":
            s.close()
        else:
            del s
            gc.collect()
        deadline = time.time() + 10
        while time.time() < deadline and _running(pids):
            time.sleep(0.05)
        assert not _running(pids), (how, pids)


def _running(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (a zombie runs nothing: bwrap's, once its parent is killed, waits for
    the host's init to reap it)."""
    out = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/status").read_text().split("State:")[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(p)
    return out


def test_the_suite_covers_every_class_of_the_issue():
    classes = {c[1] for c in CASES}
    assert classes == {"abi", "hook", "secrets", "resources", "protocol", "leaks"}
    assert len(CASES) >= 30


# ============================================================================================ the seccomp program
def _run_bpf(prog, nr: int, arch: int = 0xC000003E, args: tuple = (0,) * 6) -> int:
    """A classic-BPF interpreter for the few opcodes the filter uses, over a seccomp_data record."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:
            return k
        else:
            ok = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if ok else jf
        pc += 1


def test_seccomp_program_kills_foreign_abis_and_denies_the_rest():
    from skillrepro.skills._worker import seccomp_program

    prog = seccomp_program()
    KILL, ALLOW, EPERM, ENOSYS = 0x80000000, 0x7FFF0000, 0x00050001, 0x00050026
    I386, AARCH64 = 0x40000003, 0xC00000B7
    assert _run_bpf(prog, 2, I386) == KILL and _run_bpf(prog, 39, I386) == KILL
    assert _run_bpf(prog, 57, AARCH64) == KILL
    assert _run_bpf(prog, 0x40000000 | 39) == KILL and _run_bpf(prog, 0x40000000 | 57) == KILL
    assert all(_run_bpf(prog, nr) == EPERM for nr in (57, 58, 59, 322, 41, 53, 101, 62, 319, 90, 165, 425))
    assert _run_bpf(prog, 39) == ALLOW and _run_bpf(prog, 0) == ALLOW  # getpid, read
    assert _run_bpf(prog, 56, args=(0x00010000 | 0x100,) + (0,) * 5) == ALLOW  # a thread
    assert _run_bpf(prog, 56, args=(17,) + (0,) * 5) == EPERM  # a process
    assert _run_bpf(prog, 435) == ENOSYS
    assert _run_bpf(prog, 302) == ALLOW and _run_bpf(prog, 302, args=(1,) + (0,) * 5) == EPERM
    assert _run_bpf(prog, 302, args=(1 << 32,) + (0,) * 5) == EPERM


# ============================================================================================ layers and their report
@pytest.fixture
def no_bwrap(monkeypatch):
    """As on a machine without bubblewrap: the worker starts directly and applies what it can itself."""
    monkeypatch.setattr(isolation, "_BWRAP", {"path": None, "why": "bwrap hidden by the test"})
    monkeypatch.setattr(sandbox, "_LOGGED", set())


def test_every_layer_is_reported_and_a_missing_one_is_logged(no_bwrap, caplog):
    s, calls, env = session("")
    with caplog.at_level("INFO", logger="skillrepro.sandbox"):
        assert_unharmed(s, env)
    assert set(isolation.LAYERS) <= set(s.isolation)
    assert {"bwrap", "scratch_limit"} <= set(s.missing)
    assert s.isolation["bwrap"] == "MISSING: bwrap hidden by the test"
    assert all(s.isolation[k].startswith("MISSING") == (k in s.missing) for k in isolation.LAYERS)
    warning = [r.message for r in caplog.records if r.levelname == "WARNING"]
    assert warning and "bwrap" in warning[0] and "sandbox.require" in warning[0]
    s.close()


FALLBACK = HELPERS + '''
def x32():
    return _libc().syscall(0x40000000 | 39)

def memfd():
    return os.memfd_create("x")

def fork():
    assert _bypass_hook()
    return os.fork()

def environ():
    return json.dumps(sorted(os.environ))

def home():
    return open(HOME_CANARY).read()
'''


def test_without_bwrap_the_worker_layers_still_contain(no_bwrap, tmp_path):
    canary = tmp_path / "secret.txt"
    canary.write_text(SECRET)
    s, calls, env = session(FALLBACK.replace("HOME_CANARY", repr(str(canary))))
    assert s.call_skill("x32", []).killed.startswith("worker died with SIGSYS")
    assert "PermissionError" in s.call_skill("memfd", []).exception
    assert "PermissionError" in s.call_skill("fork", []).exception
    assert json.loads(s.call_skill("environ", []).ret) == ["HOME", "PATH", "TMPDIR"]
    out = s.call_skill("home", [])
    assert "PermissionError" in out.exception and SECRET not in render_outcome("home", out)
    assert not {"seccomp", "landlock", "rlimits"} & set(s.missing)
    assert_unharmed(s, env)
    s.close()


def test_a_required_layer_that_is_missing_refuses_to_run(no_bwrap):
    s, calls, env = session("", policy=SandboxPolicy(("bwrap", "seccomp")))
    with pytest.raises(SandboxError, match=r"config key sandbox.require: layer\(s\) bwrap unavailable"):
        s.call_skill("forward_once", [])
    assert env.n_primitive_steps == 0 and not calls
    with pytest.raises(SandboxError, match="bwrap"):
        sandbox.probe(SandboxPolicy(("bwrap",)))
    with pytest.raises(SandboxError, match="unknown layer"):
        SandboxPolicy(("chroot",))
    assert sandbox.probe(SandboxPolicy(("seccomp",)))["seccomp"].startswith("foreign architectures")


def test_with_bwrap_every_layer_is_active_here(needs_bwrap):
    s, calls, env = session("")
    assert_unharmed(s, env)
    # A memory cgroup needs a writable cgroup tree (root on these machines); everything else comes with bwrap.
    assert set(s.missing) <= {"memory_cgroup"}, s.isolation
    s.close()


def test_config_key_sandbox_require_is_checked():
    from skillrepro.config import ConfigError, load_yaml, sandbox_require
    from skillrepro.check import check_config

    config = load_yaml(ROOT / "config.yaml")
    assert sandbox_require(check_config(config, check_files=False)) == ()
    config["sandbox"] = {"require": ["bwrap", "seccomp"]}
    assert sandbox_require(check_config(config, check_files=False)) == ("bwrap", "seccomp")
    config["sandbox"] = {"require": ["chroot"]}
    with pytest.raises(ConfigError, match="config key sandbox.require"):
        check_config(config, check_files=False)


PIPES = '''
def shrink_pipes():
    """Make every pipe this process holds small and non-blocking (shared with the zygote and later children)."""
    import fcntl, os
    for fd in range(64):
        try:
            fcntl.fcntl(fd, 1031, 4096)  # F_SETPIPE_SZ
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        except OSError:
            pass
    return "shrunk"

def talk(n: int):
    """Step once, then answer with n characters."""
    go_forward()
    return "x" * n
'''


def test_a_skill_cannot_change_the_pipes_later_calls_share():
    limits = SandboxLimits(call_wall_s=20, call_cpu_s=2, output_chars=60000)
    s, calls, env = session(PIPES, limits=limits)
    assert s.call_skill("shrink_pipes", []).ret == "shrunk"
    for _ in range(3):
        before = env.n_primitive_steps
        out = s.call_skill("talk", [50000])
        assert out.ok and out.ret == "x" * 50000, out.killed or out.exception
        assert env.n_primitive_steps == before + 1
    s.close()


AWKWARD = '''
def _count(table):
    return len(table)

def tuple_keys():
    """A dict with tuple keys passed to another library function."""
    return _count({(1, 2): "a", (3, 4): "b"})

def _turn(n):
    turn_left()
    return n

def many_helpers():
    """More nested calls than max_frames, each issuing a primitive."""
    return str(sum(_turn(i) for i in range(12)))
'''


def test_awkward_arguments_and_more_frames_than_recorded_are_ordinary_calls():
    limits = SandboxLimits(call_wall_s=20, call_cpu_s=2, max_frames=10, output_chars=2000)
    s, calls, env = session(AWKWARD, limits=limits)
    out = s.call_skill("tuple_keys", [])
    assert out.ok and out.ret == "2", out
    before = env.n_primitive_steps
    out = s.call_skill("many_helpers", [])
    assert out.ok and out.ret == "66", out  # primitives of unrecorded frames count on the innermost recorded one
    assert env.n_primitive_steps == before + 12
    s.close()
