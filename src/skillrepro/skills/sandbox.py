"""Sandboxed execution of LLM-written code: skills for the actor, `execute_code` for the inducer.

Each `SandboxSession` owns one worker process (skills/_worker.py), started on first use and kept for the
episode (or the inducer session), so a skill call costs a few pipe round trips rather than a process
start. Primitives are proxied: the worker sends a request over its pipe, the parent applies it to the
real env with `env.step` and sends the observation back. The parent counts primitive calls and enforces
the wall clock; if the worker overruns, it is killed (its whole process group) and a fresh one is
started on the next call. Every skill frame (the actor's call and each nested skill call) becomes one
`SkillCall` record.

What enforces what (on Linux; the worker reports which layers were active in `isolation`):

| threat                          | kernel                                                     | audit hook (in-process, defence in depth) |
|---------------------------------|------------------------------------------------------------|-------------------------------------------|
| infinite loop                   | parent wall clock + SIGKILL; RLIMIT_CPU caps the worker    | ITIMER_PROF per call raises SandboxLimit  |
| memory                          | RLIMIT_AS (MemoryError, or the kernel kills the worker)    | -                                         |
| threads / processes (non-root)  | RLIMIT_NPROC=0 (the kernel never applies it to uid 0)      | -                                         |
| fork bomb / subprocess          | seccomp: no fork/vfork/execve, clone only for threads      | os.fork/exec/spawn, subprocess.Popen      |
| writing outside scratch         | Landlock (writes only beneath the scratch folder)          | open-for-write, remove/rename/mkdir, ...  |
| big files                       | RLIMIT_FSIZE (EFBIG)                                       | -                                         |
| network                         | new network namespace if permitted; Landlock TCP (ABI>=4)  | socket creation, connect, DNS             |
| signalling the parent           | Landlock signal scope (ABI>=6); own session (setsid)       | os.kill, os.killpg, pthread_kill          |
| deep recursion                  | a C stack overflow kills only the worker                   | RecursionError at Python's limit          |
| printing 100 MB                 | fds 0-2 are /dev/null                                      | stdout capped at `output_chars`           |
| runaway primitives              | parent refuses calls beyond `max_primitives`               | -                                         |
The audit hook is not a security boundary against deliberately hostile code (Python objects can be
reached through introspection); the kernel layers are. Reads are unrestricted for skills unless
`read_paths` is given (the inducer's sandbox restricts reads to the interpreter, its packages and the
run's own history, so it cannot open held-out test episodes).
"""
from __future__ import annotations

import ast
import json
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from skillrepro.envs.base import ActionError, Env
from skillrepro.store import SkillCall

WORKER = Path(__file__).with_name("_worker.py")
MAX_MESSAGE = 64 << 20  # a frame larger than this is a protocol violation


@dataclass(frozen=True)
class SandboxLimits:
    call_wall_s: float = 60.0  # wall clock per skill call / execute_code, enforced by the parent
    call_cpu_s: float = 30.0  # CPU per call (ITIMER_PROF in the worker)
    worker_cpu_s: float = 1800.0  # RLIMIT_CPU for the worker's whole life (kernel)
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE (scratch files)
    max_primitives: int = 200  # primitive calls per skill invocation
    output_chars: int = 4000  # printed output and return value kept per call
    max_frames: int = 500  # nested frames recorded per invocation
    start_wall_s: float = 30.0  # worker start (and library load)


class SandboxError(RuntimeError):
    """The worker could not be started or broke the protocol."""


@dataclass
class Outcome:
    """What one call into the sandbox produced."""

    ret: str | None
    exception: str  # "" when it returned normally
    output: str  # printed text (capped)
    output_total: int  # characters printed in all
    last_observation: str | None
    primitives: int
    killed: str = ""  # why the parent killed the worker, if it did
    traceback: str = ""

    @property
    def ok(self) -> bool:
        return not self.exception and not self.killed


def _system_read_paths() -> list[str]:
    """Paths a Python worker needs to read: the interpreter, its standard library and site-packages."""
    import site

    # Not sys.path: it may hold the working directory or a test folder, which could contain results.
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "/usr", "/lib", "/lib64",
             "/etc", "/dev", "/proc", "/sys", str(WORKER.parent)}
    paths |= set(site.getsitepackages())
    return sorted(paths)


@dataclass
class _Frame:
    frame_id: str
    parent: str
    function: str
    arguments: str
    started: float
    primitives: list = field(default_factory=list)
    ret: str = ""
    exc: str = ""
    dur: float | None = None


class SandboxSession:
    """One worker process: skills bound to an env, or the inducer's interpreter."""

    def __init__(self, *, source: str = "", env: Env | None = None, limits: SandboxLimits | None = None,
                 db: dict | None = None, read_paths: list[str] | None = None, site_packages: bool = False,
                 record: Callable[[SkillCall], None] | None = None, episode_id: str = "",
                 audit_hook: bool = True):
        self.source, self.env, self.limits = source, env, limits or SandboxLimits()
        self.db, self.read_paths, self.site_packages = db, read_paths, site_packages
        self.record = record or (lambda c: None)
        self.episode_id = episode_id
        self.audit_hook = audit_hook
        self.proc: subprocess.Popen | None = None
        self.scratch = tempfile.mkdtemp(prefix="skillrepro-sandbox-")
        self.isolation: dict = {}
        self.functions: list[str] = []
        self.load_error = ""
        self.restarts = 0
        self._buf = b""
        self._finalizer = weakref.finalize(self, _cleanup, self.__dict__)

    # ------------------------------------------------------------------------------------ process
    def _start(self) -> None:
        args = [sys.executable, "-I", *([] if self.site_packages else ["-S"]), str(WORKER)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=self.scratch, start_new_session=True, close_fds=True)
        self._buf = b""
        self._send({"t": "init", "source": self.source, "scratch": self.scratch,
                    "primitives": [p.name for p in self.env.primitives()] if self.env else [],
                    "limits": self.limits.__dict__, "db": self.db, "read_paths": self.read_paths,
                    "audit_hook": self.audit_hook})
        msg = self._recv(time.monotonic() + self.limits.start_wall_s)
        if msg is None:
            why = self._kill("did not start in time")
            raise SandboxError(f"sandbox worker {why}")
        self.isolation = msg.get("isolation", {})
        if msg["t"] == "init_error":
            self._kill("library failed to load")
            self.load_error = msg["msg"]
            self.functions = []
        else:
            self.functions = msg["functions"]
            self.load_error = ""

    def _ensure(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.restarts += 1
            self._start()

    def _kill(self, why: str) -> str:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None
        return why

    def close(self) -> None:
        self._finalizer()

    # ------------------------------------------------------------------------------------ framing
    def _send(self, msg: dict) -> None:
        data = json.dumps(msg, default=repr).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker died; the next read reports it

    def _recv(self, deadline: float) -> dict | None:
        """Next message, or None when the deadline passed or the worker died (the caller kills it)."""
        fd = self.proc.stdout.fileno()
        while True:
            if len(self._buf) >= 4:
                (n,) = struct.unpack(">I", self._buf[:4])
                if n > MAX_MESSAGE:
                    return None
                if len(self._buf) >= 4 + n:
                    data, self._buf = self._buf[4:4 + n], self._buf[4 + n:]
                    try:
                        return json.loads(data)
                    except ValueError:
                        return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with selectors.DefaultSelector() as sel:
                sel.register(fd, selectors.EVENT_READ)
                if not sel.select(left):
                    return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buf += chunk

    def _death_reason(self, deadline: float, limit: float | None = None) -> str:
        if self.proc is None:
            return "worker gone"
        code = self.proc.poll()
        if code is None and time.monotonic() >= deadline:
            return f"wall-clock limit of {self.limits.call_wall_s if limit is None else limit:g} s reached"
        if code is None:
            return "protocol violation by the worker"
        if code < 0:
            name = signal.Signals(-code).name
            hint = {"SIGXCPU": " (CPU limit)", "SIGKILL": " (killed; memory or CPU limit)",
                    "SIGSEGV": " (crashed; e.g. stack overflow from deep recursion)"}.get(name, "")
            return f"worker died with {name}{hint}"
        return f"worker exited with status {code}"

    # ------------------------------------------------------------------------------------ skills
    def call_skill(self, name: str, args: list[Any], step: int = -1, wall_s: float | None = None) -> Outcome:
        """Run skill `name(*args)`; primitives go to self.env. Raises ActionError for bad arguments.

        `wall_s` caps this call's wall clock below `limits.call_wall_s` (what is left of the episode's)."""
        self._ensure()
        top = uuid.uuid4().hex[:12]
        if self.load_error:
            exc = f"the skill library failed to load: {self.load_error}"
            self.record(SkillCall(top, "", self.episode_id, step, name, json.dumps([args, {}], default=repr), "[]",
                                  "", exc, 0.0))
            return Outcome(None, exc, "", 0, None, 0)
        frames: dict[str, _Frame] = {top: _Frame(top, "", name, json.dumps([args, {}], default=repr), time.time())}
        limit = self.limits.call_wall_s if wall_s is None else min(self.limits.call_wall_s, wall_s)
        deadline = time.monotonic() + limit
        self._send({"t": "call", "frame": top, "name": name, "args": args, "done": bool(self.env.done)})
        n_prims, last_obs = 0, None
        while True:
            msg = self._recv(deadline)
            if msg is None:
                why = self._death_reason(deadline, limit)
                self._kill(why)
                out = Outcome(None, "", "", 0, last_obs, n_prims, killed=why)
                break
            t = msg["t"]
            if t == "prim":
                frame = frames.get(msg["frame"]) or frames[top]
                if n_prims >= self.limits.max_primitives:
                    self._send({"t": "prim_limit", "msg": f"limit of {self.limits.max_primitives} primitive calls per skill call reached"})
                    frame.primitives.append([msg["name"], msg["args"], "(refused: primitive call limit)"])
                    n_prims += 1
                    continue
                n_prims += 1
                try:
                    res = self.env.step(msg["name"], msg["args"])
                except ActionError as e:
                    frame.primitives.append([msg["name"], msg["args"], f"ActionError: {e}"])
                    self._send({"t": "prim_error", "msg": str(e)})
                    continue
                except Exception:
                    self._kill("env raised")
                    raise  # a broken env is not the skill's fault: let it surface
                last_obs = res.observation
                frame.primitives.append([msg["name"], msg["args"], res.observation])
                self._send({"t": "obs", "text": res.observation, "done": bool(self.env.done)})
            elif t == "enter":
                frames[msg["frame"]] = _Frame(msg["frame"], msg["parent"], msg["fn"], msg["args"], time.time())
            elif t == "exit":
                f = frames.get(msg["frame"])
                if f:
                    f.ret, f.exc, f.dur = msg["ret"], msg["exc"], msg["dur"]
            elif t == "badargs":
                raise ActionError(msg["msg"])
            elif t == "result":
                out = Outcome(msg["ret"], msg["exc"], msg["out"], msg["out_total"], msg["last_obs"] or last_obs,
                              n_prims, traceback=msg.get("tb", ""))
                break
            else:
                self._kill("protocol violation by the worker")
                out = Outcome(None, "", "", 0, last_obs, n_prims, killed="protocol violation by the worker")
                break
        if n_prims > self.limits.max_primitives and not out.killed:
            out.exception = out.exception or f"limit of {self.limits.max_primitives} primitive calls reached"
        root = frames[top]
        root.ret = "" if out.ret is None else out.ret
        root.exc = out.exception or (f"killed: {out.killed}" if out.killed else "")
        root.dur = time.time() - root.started
        for f in frames.values():
            if f.dur is None:  # still open when the worker was killed
                f.exc, f.dur = f"killed: {out.killed}" if out.killed else "unfinished", time.time() - f.started
            self.record(SkillCall(f.frame_id, f.parent, self.episode_id, step, f.function, f.arguments,
                                  json.dumps(f.primitives, default=repr), f.ret, f.exc, f.dur))
        return out

    # ------------------------------------------------------------------------------------ inducer
    def exec_code(self, code: str) -> Outcome:
        """Run `code` in the persistent interpreter (a notebook: names survive between calls)."""
        self._ensure()
        if self.load_error:
            return Outcome(None, f"the interpreter failed to start: {self.load_error}", "", 0, None, 0)
        deadline = time.monotonic() + self.limits.call_wall_s
        self._send({"t": "exec", "code": code})
        while True:
            msg = self._recv(deadline)
            if msg is None:
                why = self._death_reason(deadline)
                self._kill(why)
                return Outcome(None, "", "", 0, None, 0, killed=why)
            if msg["t"] == "result":
                return Outcome(msg["ret"], msg["exc"], msg["out"], msg["out_total"], None, 0)


def _cleanup(state: dict) -> None:
    proc = state.get("proc")
    if proc is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    shutil.rmtree(state.get("scratch", ""), ignore_errors=True)


def render_outcome(name: str, out: Outcome, output_chars: int = 4000) -> str:
    """The observation the actor reads after a skill call."""
    parts = []
    if out.output:
        more = out.output_total - len(out.output)
        parts.append("Printed:\n" + out.output + (f"\n[output truncated: {more} more characters]" if more > 0 else ""))
    if out.killed:
        parts.append(f"Skill error in {name}: stopped, {out.killed}.")
    elif out.exception.startswith("EpisodeOver"):
        parts.append(f"The episode ended while {name} was running.")
    elif out.exception:
        parts.append(f"Skill error in {name}: {out.exception}")
    elif out.ret is not None:
        parts.append(out.ret)
    if not out.ok or out.ret is None:
        parts.append(f"({out.primitives} primitive action(s) issued"
                     + (f"; last observation:\n{out.last_observation})" if out.last_observation else ")"))
    return "\n".join(parts)[: output_chars * 3]


def _params(signature: str) -> tuple[tuple[str, str], ...]:
    node = ast.parse(f"def {signature}: pass").body[0]
    names = [a for a in node.args.posonlyargs + node.args.args]
    return tuple((a.arg, ast.unparse(a.annotation) if a.annotation is not None else "str") for a in names)


def skill_tools(library, env: Env, record: Callable[[SkillCall], None],
                limits: SandboxLimits | None = None, names: list[str] | None = None) -> list:
    """One actor Tool per skill in `names` (default: the public ones), all sharing one sandbox worker
    for this episode."""
    from skillrepro.agent import Tool

    session = SandboxSession(source=library.source, env=env, limits=limits, record=record)
    state = {"step": 0}

    def runner(name: str):
        def run(args: list[Any], wall_s: float | None = None) -> str:
            state["step"] += 1
            out = session.call_skill(name, list(args), step=state["step"] - 1, wall_s=wall_s)
            return render_outcome(name, out, session.limits.output_chars)

        run.session = session  # keeps the worker alive as long as the tool is
        return run

    shown = set(names) if names is not None else {f.name for f in library.public()}
    return [Tool(f.name, _params(f.signature), f.doc, runner(f.name)) for f in library.functions if f.name in shown]


def tag_skill_calls(calls: list[SkillCall], episode_id: str, steps: list) -> None:
    """Fill episode_id and the actor step of each frame after the episode (the tools do not know them).

    Top-level frames are matched, in order, to the steps whose action named a skill; nested frames
    inherit their root's step."""
    names = {c.function for c in calls if not c.parent_frame_id}
    skill_steps = [s.step for s in steps if s.action in names and s.valid]
    roots = [c for c in calls if not c.parent_frame_id]
    step_of = {}
    for c, s in zip(roots, skill_steps):
        step_of[c.frame_id] = s
    for c in calls:
        c.episode_id = episode_id
        root = c.frame_id if not c.parent_frame_id else c.frame_id.split(".")[0]
        c.step = step_of.get(root, c.step)
