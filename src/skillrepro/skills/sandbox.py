"""The parent's side of a sandboxed worker: `SandboxSession` runs skills for the actor (a fresh child per call)
and the inducer's `execute_code` (one child, a notebook). What isolates the worker is in skills/isolation.py, what
it may send back in skills/protocol.py, and the worker itself in skills/_worker.py.

Longer than the other modules because `SandboxSession` is one life cycle (zygote, staged children, calls, cells)
whose parts share its state; the helpers that need none of it live in the two modules above.

Processes: a zygote (started once per session, inside bwrap; it never runs untrusted code) forks one child
per skill call; the child becomes nobody, applies Landlock, rlimits and seccomp, loads the library, says
ready and waits for its call, so that a call costs one round trip to a ready child. Each child has two pipes
of its own, which the parent makes and passes to the zygote with the request: nothing a child does to its
pipes (sizes, flags, unread bytes) reaches another. As a call starts the parent asks for the next child
(staged): the zygote forks it beside the running one, and it takes its layers, running only the sandbox's
own code. After the result the parent kills the running child itself (SIGKILL through the pidfd the zygote
handed back) and waits until its frame pipe reads end-of-file (every write end closed: nothing more can
come). Only once the zygote has reaped it does the staged child load the library (a byte on its private go
pipe), so model-written code never runs in two children at once and nothing of call n (threads, `__del__`,
timers, patched globals, unsent frames, memory) can act during call n+1 or while its child loads; a running
child cannot reach a staged one (seccomp denies signals, ptrace, process_vm and pidfds; both are
non-dumpable). The next child loads while the actor thinks. The inducer's interpreter (`exec_code`) is a notebook: its child
lives until a cell is killed or leaves threads, timers or signal handlers behind; it copies the run's
history into scratch before its layers and queries the copy after them, so that DuckDB's threads start
under every layer. Every layer covers every thread: the worker applies them while it has one thread
(seccomp with TSYNC besides), and reports what the kernel shows.
"""
from __future__ import annotations

import ast
import json
import logging
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Callable

from skillrepro.benchmarks.base import ActionError, Env
from skillrepro.skills.isolation import (LAYERS, NOBODY, SCRATCH_IN_BWRAP, MemoryCgroup, SandboxError, SandboxLimits,
                                         SandboxPolicy, absolute_db, bwrap, interpreter_mounts, runtime,
                                         traversable_by_nobody)
from skillrepro.skills.protocol import RESTART, Child, Frame, Outcome, Violation, check_frame
from skillrepro.skills.library import parse_untrusted
from skillrepro.store import SkillCall

WORKER = Path(__file__).with_name("_worker.py")
log = logging.getLogger("skillrepro.sandbox")


class SandboxSession:
    """Skills bound to an env (a fresh child process per call), or the inducer's interpreter (one child)."""

    def __init__(self, *, source: str = "", env: Env | None = None, limits: SandboxLimits | None = None,
                 db: dict | None = None, site_packages: bool = False,
                 record: Callable[[SkillCall], None] | None = None, episode_id: str = "",
                 audit_hook: bool = True, policy: SandboxPolicy | None = None):
        self.source, self.env, self.limits = source, env, limits or SandboxLimits()
        # The worker changes into its scratch folder, and Snakemake hands jobs relative paths: every path
        # the worker is given is made absolute here, against the job's working folder.
        self.db = absolute_db(db) if db is not None else None
        self.site_packages = site_packages
        self.record = record or (lambda c: None)
        self.episode_id = episode_id
        self.audit_hook = audit_hook
        self.require = (policy or SandboxPolicy()).require
        self.proc: subprocess.Popen | None = None
        self.bwrap, why = bwrap()
        self.scratch = SCRATCH_IN_BWRAP if self.bwrap else tempfile.mkdtemp(prefix="skillrepro-sandbox-")
        self.cgroup: MemoryCgroup | None = None  # made at the first start
        self.isolation: dict[str, str] = {"bwrap": f"MISSING: {why}"} if why else {}
        self.missing: tuple[str, ...] = ()
        self.functions: list[str] = []
        self.load_error = ""
        self.restarts = 0
        self._ctrl: socket.socket | None = None  # the control socket to the zygote
        self._zygote_gone = False  # the control socket read end-of-file
        self._children: dict[int, Child] = {}  # every child not yet retired, by id
        self._cid = 0
        self.child: Child | None = None  # the child that serves the next call (starting, or ready)
        self.max_message = 65536 + 16 * self.limits.output_chars
        try:  # the parent's own list of the library's functions: frames naming others are forged
            tree = parse_untrusted(source or "")
            self._known = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            self._defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]  # what the worker traces
        except SyntaxError:
            self._known, self._defs = set(), []
        self._primitive_names = {p.name for p in env.primitives()} if env is not None else set()
        self._finalizer = weakref.finalize(self, _cleanup, self.__dict__)

    # ------------------------------------------------------------------------------------ process
    def _argv(self) -> tuple[list[str], dict]:
        exe, read = runtime()
        mounts = list(read)
        if self.site_packages:  # the inducer: its virtual environment (for duckdb)
            exe = sys.executable
            mounts += interpreter_mounts(self.db or {"tables": {}})
            read += ["/sys/fs/cgroup", "/proc/meminfo", "/proc/cpuinfo"]  # DuckDB sizes itself from these
        python = [exe, "-I", *([] if self.site_packages else ["-S"])]
        init = {"read_paths": read, "drop_uid": False, "bwrap": bool(self.bwrap), "scratch": self.scratch}
        if not self.bwrap:
            if os.geteuid() == 0 and traversable_by_nobody(os.path.dirname(exe)) and all(
                    traversable_by_nobody(p) for p in read if os.path.exists(p)):
                os.chown(self.scratch, NOBODY, NOBODY)
                init["drop_uid"] = True
            return [*python, str(WORKER)], init
        argv = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
        if os.geteuid() == 0:  # no user namespace: each child becomes nobody (a real host uid) itself, and
            # the zygote (never running untrusted code) keeps only what it needs for that and to kill a child
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
            init["drop_uid"] = True
        else:
            argv += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY), "--disable-userns"]
        made: set[str] = set()

        def parents(dest: str) -> list[str]:
            out = []
            for d in reversed(Path(dest).parents):
                if str(d) != "/" and str(d) not in made:
                    made.add(str(d))
                    out += ["--perms", "0755", "--dir", str(d)]
            return out

        binds = sorted({os.path.realpath(p) for p in [*mounts, os.path.dirname(exe)]
                        if os.path.exists(p) and not p.startswith(("/dev", "/proc", "/sys"))})
        bound: list[str] = []
        for p in binds:
            if any(p == b or p.startswith(b + "/") for b in bound):
                continue  # already visible through a folder above it
            bound.append(p)
            argv += [*parents(p), "--ro-bind", p, p]
            made.add(p)
        for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64")):
            if os.path.islink(link) and os.readlink(link) == target and link not in made:
                argv += ["--symlink", target, link]
        if not self.site_packages:  # the base runtime's own site-packages holds third-party code: hide it
            site = Path(os.path.realpath(sys.base_prefix)) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
            if site.is_dir():
                argv += ["--perms", "0755", "--tmpfs", str(site)]
        argv += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", str(self.limits.scratch_bytes), "--tmpfs", SCRATCH_IN_BWRAP,
                 *parents("/sandbox/_worker.py"), "--ro-bind", str(WORKER), "/sandbox/_worker.py",
                 "--chdir", SCRATCH_IN_BWRAP, "--", *python, "/sandbox/_worker.py"]
        return argv, init

    def _spawn(self) -> None:
        """Start the zygote (in bwrap where it can run) and ask it for the first child."""
        argv, init = self._argv()
        if self.cgroup is None:
            self.cgroup = MemoryCgroup(self.limits.memory_bytes)
        if self.cgroup.procs:  # join the cgroup before exec, so every page of the worker is counted
            argv = ["/bin/sh", "-c", 'echo $$ > "$1" || exit 97; shift; exec "$@"', "sh", self.cgroup.procs, *argv]
        # Control: a datagram socket, so that each child's pipes and pidfd travel with the message about it.
        ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        their_fd = theirs.fileno()  # the same number in the zygote (pass_fds)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, cwd="/", env={}, start_new_session=True,
                                         close_fds=True, pass_fds=(their_fd,))
        except BaseException:
            ctrl.close()
            raise
        finally:
            theirs.close()  # the zygote has its copy
        init |= {"t": "init", "ctrl": their_fd, "source": self.source, "functions": self._defs,
                 "primitives": sorted(self._primitive_names), "limits": self.limits.__dict__, "db": self.db,
                 "audit_hook": self.audit_hook}
        ctrl.setblocking(False)
        self._ctrl, self._zygote_gone, self._children = ctrl, False, {}
        stdin = self.proc.stdin.fileno()
        os.set_blocking(stdin, False)
        self._write(stdin, init, time.monotonic() + self.limits.start_wall_s)  # if it fails, the child says why
        self.proc.stdin.close()
        self.child = self._fork()

    def _fork(self, staged: bool = False) -> Child:
        """Ask the zygote for a fresh child with two new pipes of its own; the zygote forks it once no other
        child is alive, and it applies its layers, loads the library and says ready while the actor thinks.
        `staged` (the next skill call's child, asked for as a call starts): forked beside the running child,
        it takes its layers during the call and loads the library once the running child has been reaped."""
        call_r, call_w = os.pipe()
        frames_r, frames_w = os.pipe()
        self._cid += 1
        try:
            request = {"t": "fork", "cid": self._cid, "staged": staged}
            socket.send_fds(self._ctrl, [json.dumps(request).encode()], [call_r, frames_w])
        except OSError:
            pass  # the zygote is gone: the child's pipe reads end-of-file at once and the caller reports it
        finally:
            os.close(call_r)
            os.close(frames_w)
        os.set_blocking(call_w, False)
        os.set_blocking(frames_r, False)
        child = Child(self._cid, call_w, frames_r, time.monotonic())
        self._children[child.cid] = child
        return child

    def _ctrl_poll(self) -> None:
        """Take every control message the zygote has sent: a new child's pidfd, or how a child ended."""
        while not self._zygote_gone:
            try:
                data, fds, _, _ = socket.recv_fds(self._ctrl, 4096, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._zygote_gone = True
            try:
                msg = json.loads(data) if data else {}
            except ValueError:
                msg = {}
            cid = msg.get("cid") if isinstance(msg, dict) else None
            child = self._children.get(cid) if isinstance(cid, int) else None
            if child is not None and msg.get("t") == "forked" and fds and child.pidfd is None:
                child.pidfd = fds.pop()
            elif child is not None and msg.get("t") == "died":
                child.died = msg
            for fd in fds:  # a child already retired, or a duplicate
                os.close(fd)

    def _wait(self, fd: int | None, deadline: float) -> bool:
        """Wait until `fd` (if any) or the control socket is readable; take the control messages. False if
        the deadline passed first."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        poll = select.poll()
        if fd is not None:
            poll.register(fd, select.POLLIN)
        if not self._zygote_gone:
            poll.register(self._ctrl, select.POLLIN)
        events = poll.poll(left * 1000)
        if not self._zygote_gone and any(f == self._ctrl.fileno() for f, _ in events):
            self._ctrl_poll()
        return bool(events)

    def _read(self, child: Child) -> bytes:
        """What the child has written since the last read (b"" if nothing); end-of-file marks it exited."""
        try:
            chunk = os.read(child.r, 1 << 20)
        except BlockingIOError:
            return b""
        child.eof = not chunk
        child.buf += chunk
        return chunk

    def _await_pidfd(self, child: Child, deadline: float) -> None:
        """Take the control messages until `child`'s pidfd has come (the zygote sends it right after the fork),
        the zygote is gone, or `deadline` passes."""
        self._ctrl_poll()
        while child.pidfd is None and not self._zygote_gone and self._wait(None, deadline):
            pass

    def _retire(self, child: Child) -> bool:
        """Kill `child` (through its pidfd: no round trip through the zygote) and wait until nothing more can
        come from it: its frame pipe reads end-of-file once every write end is closed, at its exit or when an
        honest child closes it after its result. True if it wrote anything after its last frame that was read.
        The zygote reaps it and forks the next child only then, so it cannot act beside the next call."""
        if child.closed:
            return child.leftover
        child.closed, child.leftover = True, bool(child.buf)
        deadline = time.monotonic() + 10
        self._await_pidfd(child, deadline)
        if child.pidfd is not None:  # even after end-of-file: a child that closed its pipe may still run
            try:
                signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it has exited already
        while not child.eof and self._wait(child.r, deadline):
            child.leftover |= bool(self._read(child))
        self._children.pop(child.cid, None)  # only now: the zygote's messages about it were wanted until here
        _close_child(child)
        if not child.eof:  # no exit 10 s after SIGKILL (or after the zygote died): nothing can be trusted
            self._kill("")
            raise SandboxError("a sandbox worker did not exit after SIGKILL; the sandbox was stopped")
        return child.leftover

    def _await_ready(self) -> None:
        """The next child's first frame. A child that breaks the protocol, dies or hangs while loading the library
        is the library's doing (module-level code runs there): a load error, reported to the caller as one.
        Only a zygote that is gone is the sandbox's own failure (SandboxError)."""
        child = self.child
        deadline = child.forked + self.limits.start_wall_s
        try:
            msg, why = self._recv(child, deadline), ""
        except Violation as e:
            msg, why = None, f"it broke the sandbox protocol ({e})"
        if msg is None:
            why = why or self._death_reason(child, deadline, self.limits.start_wall_s)
            if (child.died or {}).get("t") == "gone" or self.proc.poll() is not None:
                self._kill("")  # the zygote itself died: the sandbox cannot run here
                raise SandboxError(f"sandbox worker did not start: {why}")
            self._retire(child)
            self.child = self._fork()
            self.load_error, self.functions = f"the worker stopped while loading the library: {why}", []
            return
        child.ready = True
        self._report_layers(msg["isolation"])
        if msg["t"] == "init_error":
            self._retire(child)
            self.child = self._fork()
            self.load_error, self.functions = msg["msg"], []
        else:
            self.load_error, self.functions = "", sorted(self._known)

    def _report_layers(self, worker_report: dict) -> None:
        iso = {k: v for k, v in self.isolation.items() if k == "bwrap"}
        if self.bwrap:
            iso["bwrap"] = "namespaces: mount (read-only allow-list), pid, ipc, uts, net, cgroup; empty environment"
            iso["read_allowlist"] = "only the runtime and system libraries are mounted"
            iso["scratch_limit"] = f"tmpfs of {self.limits.scratch_bytes} bytes"
            iso["netns"] = "bwrap's network namespace"
        else:
            iso["scratch_limit"] = "MISSING: scratch is a host folder (files are capped, not their total)"
            iso["read_allowlist"] = "Landlock read rules" if str(worker_report.get("landlock", [False, ""])[1]).find(
                "reads only") >= 0 else "MISSING: neither bwrap nor Landlock read rules"
        iso["memory_cgroup"] = (f"limit {self.limits.memory_bytes} bytes" if self.cgroup.procs
                                else f"MISSING: {self.cgroup.why}; memfd and shared memory denied by seccomp")
        for k, v in worker_report.items():
            if len(v) == 2 and isinstance(v[0], bool):
                iso[k] = str(v[1]) if v[0] else f"MISSING: {v[1]}"
            else:
                iso[k] = "; ".join(map(str, v))
        for k in LAYERS:
            iso.setdefault(k, "MISSING: not reported")
        self.isolation = iso
        self.missing = tuple(k for k in LAYERS if iso[k].startswith("MISSING"))
        key = (self.missing, bool(self.bwrap))
        if key not in _LOGGED:
            _LOGGED.add(key)
            log.info("sandbox layers: %s", "; ".join(f"{k}: {v}" for k, v in iso.items()))
            if self.missing:
                log.warning("sandbox layer(s) missing on this machine: %s (config key sandbox.require decides "
                            "whether a run may go on without them)", ", ".join(self.missing))
        refused = [k for k in self.require if k in self.missing]
        if refused:
            self._kill("")
            raise SandboxError("config key sandbox.require: layer(s) " + ", ".join(refused) + " unavailable here: "
                               + "; ".join(f"{k}: {iso[k]}" for k in refused))

    def load(self) -> str:
        """Start the sandbox if it is not running (again after its process died), wait until the library has
        loaded, and return why it did not load ("" when it did). Calls and cells start it as needed; a check of
        the library alone calls this."""
        if self.proc is not None and self.proc.poll() is not None:
            self.restarts += 1
            self._kill("")
        if self.proc is None:
            self._spawn()
        if not self.child.ready:
            self._await_ready()
        return self.load_error

    def _kill(self, why: str) -> str:
        """Kill the zygote and all its children (bwrap's pid namespace takes them with it)."""
        _stop(self.__dict__)
        return why

    def close(self) -> None:
        self._finalizer()

    # ------------------------------------------------------------------------------------ framing
    @staticmethod
    def _write(fd: int, msg: dict, deadline: float) -> bool:
        """Write one frame without ever blocking past `deadline` (a worker that stops reading cannot hang us)."""
        data = json.dumps(msg, default=repr).encode()
        buf = memoryview(struct.pack(">I", len(data)) + data)
        while buf:
            try:
                n = os.write(fd, buf)
                buf = buf[n:]
                continue
            except BlockingIOError:
                pass
            except OSError:
                return False  # the worker died; the next read reports it
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poll = select.poll()
            poll.register(fd, select.POLLOUT)
            poll.poll(left * 1000)
        return True

    def _recv(self, child: Child, deadline: float) -> dict | None:
        """Next well-formed frame of `child`; None when the deadline passed or the child exited (what it wrote
        before counts); Violation for anything malformed."""
        while True:
            if len(child.buf) >= 4:
                (n,) = struct.unpack(">I", child.buf[:4])
                if n > self.max_message:
                    raise Violation(f"a frame of {n} bytes (the limit is {self.max_message})")
                if len(child.buf) >= 4 + n:
                    data, child.buf = child.buf[4:4 + n], child.buf[4 + n:]
                    try:
                        msg = json.loads(data)
                    except (ValueError, RecursionError):
                        raise Violation("a frame that is not JSON") from None
                    msg = check_frame(msg, child.call, child.seq, self.limits.output_chars)
                    child.seq += 1
                    return msg
            if child.eof:
                return None
            if not self._read(child) and not child.eof and not self._wait(child.r, deadline):
                return None

    @staticmethod
    def _exited(child: Child, timeout: float) -> bool:
        """Whether the child has exited (its pidfd turns readable then), waiting up to `timeout` seconds."""
        poll = select.poll()
        poll.register(child.pidfd, select.POLLIN)
        return bool(poll.poll(timeout * 1000))

    def _death_reason(self, child: Child, deadline: float, wall_s: float) -> str:
        if not child.eof:
            return f"wall-clock limit of {wall_s:g} s reached" if time.monotonic() >= deadline else "worker gone"
        # Its frame pipe is closed: it exited, or skill code closed the pipe and goes on (then it is killed
        # here, and its exit status would only say SIGKILL). On a busy machine a child can close its pipe before
        # the zygote has sent its pidfd: without waiting for it, a child still running read as a dead zygote.
        self._await_pidfd(child, time.monotonic() + 5)
        if child.pidfd is not None and not self._exited(child, 0.5):
            try:
                signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return "the worker closed its frame pipe and went on; it was killed"
        end = time.monotonic() + 5  # it exited: the zygote reaps it at once and says how
        while child.died is None and not self._zygote_gone and self._wait(None, end):
            pass
        died = child.died
        if died is None:
            child.died = {"t": "gone"}
            return "the sandbox's zygote died"
        sig, code = died.get("signal"), died.get("code")
        if isinstance(sig, int) and sig > 0:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            hint = {"SIGXCPU": " (CPU limit)", "SIGKILL": " (killed; memory or CPU limit)",
                    "SIGSYS": " (a system call seccomp forbids on pain of death)",
                    "SIGSEGV": " (crashed; e.g. stack overflow from deep recursion)"}.get(name, "")
            return f"worker died with {name}{hint}"
        return f"worker exited with status {code}"

    # ------------------------------------------------------------------------------------ skills
    def call_skill(self, name: str, args: list[Any], step: int = -1, wall_s: float | None = None) -> Outcome:
        """Run skill `name(*args)`; primitives go to self.env. `wall_s` shortens the wall clock (e.g. to the
        episode's remaining time). Raises ActionError for bad arguments and for a worker that breaks the
        protocol; the worker is replaced after every call."""
        self.load()
        top = uuid.uuid4().hex[:12]
        args_json = json.dumps([args, {}], default=repr)[:2100]
        if self.load_error:
            exc = f"the skill library failed to load: {self.load_error}"
            self.record(SkillCall(top, "", self.episode_id, step, name, args_json, "[]", "", exc, 0.0))
            return Outcome(None, exc, "", 0, None, 0)
        wall = self.limits.call_wall_s if wall_s is None else max(0.0, min(wall_s, self.limits.call_wall_s))
        frames: dict[str, Frame] = {top: Frame(top, "", name, args_json, time.time())}
        stack = [top]
        deadline = time.monotonic() + wall
        cur, self.child = self.child, None
        cur.call, cur.seq = top, 0
        n_prims, last_obs, violation, out = 0, None, "", None
        nxt = None
        try:
            if not self._write(cur.w, {"t": "call", "call": top, "frame": top, "name": name, "args": args,
                                       "done": bool(self.env.done)}, deadline):
                raise Violation("the worker stopped reading its pipe")
            nxt = self._fork(staged=True)  # the next call's child takes its layers while this call runs
            while out is None:
                msg = self._recv(cur, deadline)
                if msg is None:
                    why = self._death_reason(cur, deadline, wall)
                    out = Outcome(None, "", "", 0, last_obs, n_prims, killed=why)
                    break
                t = msg["t"]
                if t == "prim":
                    if msg["name"] not in self._primitive_names:
                        raise Violation(f"unknown primitive {msg['name']!r}")
                    if msg["frame"] != stack[-1]:
                        raise Violation(f"a primitive from frame {msg['frame']!r}, not the open frame {stack[-1]!r}")
                    frame = frames[stack[-1]]
                    if n_prims >= self.limits.max_primitives:
                        self._write(cur.w, {"t": "prim_limit", "msg": f"limit of {self.limits.max_primitives} primitive calls per skill call reached"}, deadline)
                        frame.primitives.append([msg["name"], msg["args"], "(refused: primitive call limit)"])
                        n_prims += 1
                        continue
                    n_prims += 1
                    try:
                        res = self.env.step(msg["name"], msg["args"])
                    except ActionError as e:
                        frame.primitives.append([msg["name"], msg["args"], f"ActionError: {e}"])
                        self._write(cur.w, {"t": "prim_error", "msg": str(e)}, deadline)
                        continue
                    # An exception of any other kind is a broken env, not the skill's fault: it surfaces
                    # (the finally below retires the child).
                    last_obs = res.observation
                    frame.primitives.append([msg["name"], msg["args"], res.observation])
                    self._write(cur.w, {"t": "obs", "text": None if res.returns_none else res.observation,
                                        "done": bool(self.env.done)}, deadline)
                elif t == "enter":
                    fid = msg["frame"]
                    if msg["fn"] not in self._known:
                        raise Violation(f"frame {fid!r} names {msg['fn']!r}, which the library does not define")
                    if not (fid.startswith(top + ".") and fid[len(top) + 1:].isdigit()) or fid in frames:
                        raise Violation(f"frame id {fid!r} is not a fresh child of this call")
                    if msg["parent"] != stack[-1]:
                        raise Violation(f"frame {fid!r} names parent {msg['parent']!r}, not the open frame")
                    if len(frames) > self.limits.max_frames:
                        raise Violation(f"more than {self.limits.max_frames} frames")
                    frames[fid] = Frame(fid, msg["parent"], msg["fn"], msg["args"], time.time())
                    stack.append(fid)
                elif t == "exit":
                    if len(stack) < 2 or msg["frame"] != stack[-1]:
                        raise Violation(f"exit of frame {msg['frame']!r}, which is not the open nested frame")
                    f = frames[stack.pop()]
                    f.ret, f.exc, f.dur = msg["ret"], msg["exc"], time.time() - f.started
                elif t == "badargs":
                    if msg["seq"] != 0:
                        raise Violation("badargs after the call started")
                    if not self._retire(cur):
                        raise ActionError(msg["msg"])
                    raise Violation("the worker wrote after badargs")
                elif t == "result":
                    if len(stack) != 1:
                        raise Violation(f"result while frame {stack[-1]!r} is open")
                    out = Outcome(msg["ret"], msg["exc"], msg["out"], msg["out_total"], last_obs, n_prims,
                                  traceback=msg["tb"])
                else:
                    raise Violation(f"a {t} frame during a call")
        except Violation as e:
            violation = f"the sandbox worker broke the protocol ({e}); it was replaced"
            out = Outcome(None, "", "", 0, last_obs, n_prims, killed=violation)
        finally:
            # This child is killed, and nothing more can come from it, before this returns, whatever
            # happened. The next call's child (staged as this call started) loads the library only once the
            # zygote has reaped this one, so no model-written code of two calls ever runs at once; it loads
            # while the actor thinks, and its start is timed from now.
            if self.proc is not None:
                self.child = nxt if nxt is not None else self._fork()
            leftover = self._retire(cur)
            if self.child is not None:
                self.child.forked = time.monotonic()
        if leftover and not violation:  # a signal handler or __del__ wrote after the result: the call fails
            violation = "the sandbox worker wrote after its result; it was replaced"
            out.killed = out.killed or violation
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
        if violation:
            raise ActionError(f"skill {name}: {violation}")
        return out

    # ------------------------------------------------------------------------------------ inducer
    def start(self) -> dict[str, str]:
        """Start the worker now and return its layer report; SandboxError if it cannot start, if the library
        or the history does not load, or if a layer the policy requires is missing. A job that runs
        model-written code calls this first, so that it fails with the cause instead of going on without."""
        self.load()
        if self.load_error:
            raise SandboxError(f"the sandbox worker could not start here: {self.load_error}")
        return dict(self.isolation)

    def exec_code(self, code: str) -> Outcome:
        """Run `code` in the persistent interpreter (a notebook: names survive between calls, until a call is
        killed)."""
        self.load()
        if self.load_error:  # at the start, or again after a killed cell: the job cannot do its work
            raise SandboxError(f"the interpreter failed to start: {self.load_error}")
        deadline = time.monotonic() + self.limits.call_wall_s
        child = self.child  # one child serves every cell, until one is killed
        child.call, child.seq = uuid.uuid4().hex[:12], 0
        why = ""
        try:
            self._write(child.w, {"t": "exec", "call": child.call, "code": code}, deadline)
            msg = self._recv(child, deadline)
            while msg is not None and msg["t"] in ("enter", "exit"):  # library functions called by the code
                msg = self._recv(child, deadline)
            if msg is not None and msg["t"] != "result":
                raise Violation(f"a {msg['t']} frame answering exec")
        except Violation as e:
            msg, why = None, f"the interpreter broke the protocol ({e})"
        if msg is None:
            why = why or self._death_reason(child, deadline, self.limits.call_wall_s)
            self._retire(child)
            self.child = self._fork()  # no other child runs: the history copy in scratch is its alone
            return Outcome(None, "", "", 0, None, 0, killed=why)
        if msg["exc"].startswith(RESTART):  # the cell left something that could run before the next one
            self._retire(child)
            self.child = self._fork()
        return Outcome(msg["ret"], msg["exc"], msg["out"], msg["out_total"], None, 0)


_LOGGED: set = set()


def probe(policy: SandboxPolicy) -> dict[str, str]:
    """Start one worker to see which layers this machine gives (logged once per process), and raise
    SandboxError if one that `policy` requires is missing: a job calls this before any work starts."""
    session = SandboxSession(policy=policy)
    try:
        return session.start()
    finally:
        session.close()


def _close_child(child: Child) -> None:
    """SIGKILL the child (it may still run: a ready child at the session's end) and close our ends."""
    child.closed = True
    if child.pidfd is not None:
        try:
            signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
        except OSError:
            pass  # exited already
    for fd in (child.w, child.r, child.pidfd):
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    child.w = child.r = child.pidfd = None


def _stop(state: dict) -> None:
    """Stop the zygote and every child of it (a session's __dict__: also called by its finalizer)."""
    for child in list(state.get("_children", {}).values()):
        if not child.closed:
            _close_child(child)
    state["_children"], state["child"] = {}, None
    proc = state.get("proc")
    if proc is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap's pid namespace takes every child with it
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if proc.stdin is not None:
            proc.stdin.close()
    if state.get("_ctrl") is not None:
        state["_ctrl"].close()
    state["proc"], state["_ctrl"], state["_zygote_gone"] = None, None, True


def _cleanup(state: dict) -> None:
    _stop(state)
    if state.get("cgroup") is not None:
        state["cgroup"].remove()
    if state.get("scratch", "").startswith(tempfile.gettempdir()):
        shutil.rmtree(state["scratch"], ignore_errors=True)
