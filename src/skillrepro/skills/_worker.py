"""The sandbox worker: a separate Python process that runs untrusted skill or inducer code.

Started by skillrepro.skills.sandbox as `python -I [-S] _worker.py`; it imports only the standard library
(and duckdb when the inducer asks for its history). It talks to the parent over its inherited stdin/stdout
pipes with length-prefixed JSON frames; once running, fds 0-2 point at /dev/null so skill code cannot
write into the protocol by printing.

Isolation is applied in this order, before any untrusted code is read (see sandbox.py for the table of
what the kernel enforces and what only the audit hook enforces):
  netns (unshare) -> no_new_privs -> Landlock -> rlimits -> drop capabilities -> audit hook.
"""
from __future__ import annotations

import ast
import json
import linecache
import os
import resource
import signal
import struct
import sys
import time
import traceback

IN_FD, OUT_FD = 0, 1  # replaced by private duplicates in main()


# ---------------------------------------------------------------------------------------------- framing
def send(msg: dict) -> None:
    data = json.dumps(msg, default=repr).encode()
    buf = struct.pack(">I", len(data)) + data
    while buf:
        n = os.write(OUT_FD, buf)
        buf = buf[n:]


def _read_exact(n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(IN_FD, n - len(out))
        if not chunk:
            os._exit(0)  # the parent went away
        out += chunk
    return out


def recv() -> dict:
    (n,) = struct.unpack(">I", _read_exact(4))
    return json.loads(_read_exact(n))


# ---------------------------------------------------------------------------------------------- limits
class SandboxLimit(BaseException):
    """A limit hit inside the sandbox (CPU time, primitive calls). BaseException, so that a skill's
    `except Exception` does not swallow it."""


class EpisodeOver(BaseException):
    """The episode ended while a skill was still issuing primitives."""


class ActionError(Exception):
    """A primitive call the env rejected (bad arguments). Skill code may catch it."""


def _on_cpu_timer(signum, frame):
    raise SandboxLimit("CPU time limit of the skill call reached")


class CappedOutput:
    """sys.stdout/sys.stderr replacement: keeps the first `cap` characters and counts the rest."""

    def __init__(self, cap: int):
        self.cap, self.parts, self.kept, self.total = cap, [], 0, 0

    def write(self, s) -> int:
        s = str(s)
        self.total += len(s)
        if self.kept < self.cap:
            part = s[: self.cap - self.kept]
            self.parts.append(part)
            self.kept += len(part)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def take(self) -> tuple[str, int]:
        text, total = "".join(self.parts), self.total
        self.parts, self.kept, self.total = [], 0, 0
        return text, total


def _clip(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more characters cut]"


# ---------------------------------------------------------------------------------------------- isolation
def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _unshare_net(report: dict) -> None:
    ctypes, libc = _libc()
    CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
    if libc.unshare(CLONE_NEWNET) == 0:
        report["netns"] = "new network namespace (no interfaces but a down loopback)"
        return
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        report["netns"] = "new user+network namespace"
        return
    report["netns"] = f"unavailable ({os.strerror(ctypes.get_errno())})"


# Landlock (Linux >= 5.13): kernel-enforced file-system, TCP and signal restrictions for this process.
_LL_FS = {  # access right bit -> first ABI that knows it
    "EXECUTE": (1 << 0, 1), "WRITE_FILE": (1 << 1, 1), "READ_FILE": (1 << 2, 1), "READ_DIR": (1 << 3, 1),
    "REMOVE_DIR": (1 << 4, 1), "REMOVE_FILE": (1 << 5, 1), "MAKE_CHAR": (1 << 6, 1), "MAKE_DIR": (1 << 7, 1),
    "MAKE_REG": (1 << 8, 1), "MAKE_SOCK": (1 << 9, 1), "MAKE_FIFO": (1 << 10, 1), "MAKE_BLOCK": (1 << 11, 1),
    "MAKE_SYM": (1 << 12, 1), "REFER": (1 << 13, 2), "TRUNCATE": (1 << 14, 3), "IOCTL_DEV": (1 << 15, 5),
}
_READ = ("EXECUTE", "READ_FILE", "READ_DIR")


def _landlock(scratch: str, read_paths: list[str] | None, report: dict) -> None:
    ctypes, libc = _libc()
    SYS_CREATE, SYS_ADD, SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and aarch64
    abi = libc.syscall(SYS_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        report["landlock"] = f"unavailable ({os.strerror(ctypes.get_errno())})"
        return
    known = {k: bit for k, (bit, since) in _LL_FS.items() if since <= abi}
    write_rights = sum(bit for k, bit in known.items() if k not in _READ)
    read_rights = sum(known[k] for k in _READ)
    handled_fs = write_rights | (read_rights if read_paths is not None else 0)
    handled_net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP, with no rule allowing any port
    scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET | SIGNAL: nothing outside the sandbox
    attr = struct.pack("<QQQ", handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = libc.syscall(SYS_CREATE, ctypes.c_char_p(attr[:size]), size, 0)
    if fd < 0:
        report["landlock"] = f"ruleset failed ({os.strerror(ctypes.get_errno())})"
        return

    def allow(path: str, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # a path that does not exist needs no rule
        is_dir = os.path.isdir(path)
        # Files accept only file rights (execute, read/write file, truncate, ioctl).
        file_only = sum(known.get(k, 0) for k in ("EXECUTE", "WRITE_FILE", "READ_FILE", "TRUNCATE", "IOCTL_DEV"))
        rule = struct.pack("<Qi", rights if is_dir else rights & file_only, pfd)
        if libc.syscall(SYS_ADD, fd, 1, ctypes.c_char_p(rule), 0) != 0:
            report.setdefault("landlock_rule_errors", []).append(f"{path}: {os.strerror(ctypes.get_errno())}")
        os.close(pfd)

    allow(scratch, handled_fs)
    allow("/dev/null", known["WRITE_FILE"] | (known["READ_FILE"] if read_paths is not None else 0))
    if read_paths is not None:
        for p in read_paths:
            allow(p, read_rights)
    if libc.syscall(SYS_RESTRICT, fd, 0) != 0:
        report["landlock"] = f"restrict_self failed ({os.strerror(ctypes.get_errno())})"
    else:
        report["landlock"] = (f"ABI {abi}: writes only under scratch"
                              + ("; reads only the listed paths" if read_paths is not None else "")
                              + ("; TCP bind/connect denied" if handled_net else "")
                              + ("; signals and abstract unix sockets scoped to the sandbox" if scoped else ""))
    os.close(fd)


def _seccomp(report: dict) -> None:
    """Kernel filter (x86_64): no fork/vfork, no clone without CLONE_THREAD, no execve. Threads still work.

    Needed because RLIMIT_NPROC never applies to uid 0, whatever its capabilities."""
    if os.uname().machine != "x86_64":
        report["seccomp"] = "not installed (filter written for x86_64 only)"
        return
    ctypes, libc = _libc()
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
    ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [
        (LD, 0, 0, 4),  # 0: arch
        (JEQ, 0, 7, 0xC000003E),  # 1: not x86_64 -> allow (9)
        (LD, 0, 0, 0),  # 2: syscall number
        (JEQ, 6, 0, 56),  # 3: clone -> flag check (10)
        (JEQ, 8, 0, 57),  # 4: fork -> deny (13)
        (JEQ, 7, 0, 58),  # 5: vfork -> deny
        (JEQ, 6, 0, 59),  # 6: execve -> deny
        (JEQ, 5, 0, 322),  # 7: execveat -> deny
        (JEQ, 5, 0, 435),  # 8: clone3 -> ENOSYS (14): libc falls back to clone, whose flags we can read
        (RET, 0, 0, ALLOW),  # 9
        (LD, 0, 0, 16),  # 10: clone flags (low 32 bits of args[0])
        (JSET, 0, 1, 0x00010000),  # 11: CLONE_THREAD -> allow (12) else deny (13)
        (RET, 0, 0, ALLOW),  # 12
        (RET, 0, 0, EPERM),  # 13
        (RET, 0, 0, ENOSYS),  # 14
    ]
    filt = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(filt)
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buf))
    if libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        report["seccomp"] = "fork, vfork, process clone and execve refused by the kernel"
    else:
        report["seccomp"] = f"failed ({os.strerror(ctypes.get_errno())})"


def _drop_capabilities(report: dict) -> None:
    if os.geteuid() != 0:
        return
    ctypes, libc = _libc()
    header = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # effective, permitted, inheritable = 0 (two 32-bit words each)
    ok = libc.syscall(126 if os.uname().machine == "x86_64" else 91, ctypes.c_char_p(header),
                      ctypes.c_char_p(data)) == 0
    report["capabilities"] = "all dropped (root without capabilities: RLIMIT_NPROC applies)" if ok else \
        f"capset failed ({os.strerror(ctypes.get_errno())})"


def _rlimits(lim: dict, report: dict) -> None:
    def setlim(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError) as e:
            report.setdefault("rlimit_errors", []).append(f"{which}: {e}")

    setlim(resource.RLIMIT_AS, lim["memory_bytes"])
    setlim(resource.RLIMIT_FSIZE, lim["file_bytes"])
    setlim(resource.RLIMIT_CPU, int(lim["worker_cpu_s"]))
    setlim(resource.RLIMIT_CORE, 0)
    setlim(resource.RLIMIT_NPROC, 0)  # no new process or thread (for root only once capabilities are gone)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of killing us
    report["rlimits"] = {k: lim[k] for k in ("memory_bytes", "file_bytes", "worker_cpu_s")} | {"nproc": 0}


_BLOCKED = {
    "socket.__new__": "opening a socket", "socket.bind": "binding a socket", "socket.connect": "connecting a socket",
    "socket.getaddrinfo": "name resolution", "socket.gethostbyname": "name resolution",
    "os.fork": "forking", "os.forkpty": "forking", "os.system": "running a shell command",
    "os.exec": "exec", "os.posix_spawn": "spawning a process", "os.spawn": "spawning a process",
    "subprocess.Popen": "spawning a subprocess", "os.kill": "sending a signal", "os.killpg": "sending a signal",
    "signal.pthread_kill": "sending a signal", "resource.setrlimit": "changing resource limits",
    "resource.prlimit": "changing resource limits", "sys.remote_exec": "remote exec",
    "os.startfile": "starting a program", "pty.spawn": "spawning a process",
}
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
                "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod"}
_BLOCKED_IMPORTS = {"ctypes", "_ctypes", "cffi"}  # subprocess may be imported; running it is refused
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _install_audit_hook(scratch: str) -> None:
    root = os.path.realpath(scratch)

    def inside(p) -> bool:
        if isinstance(p, int):
            return True  # an already-open descriptor
        try:
            p = os.fsdecode(p)
        except TypeError:
            return True
        full = os.path.realpath(os.path.join(root, p))
        return full == root or full.startswith(root + os.sep)

    def deny(what: str):
        raise PermissionError(f"sandbox: {what} is not allowed")

    def hook(event: str, args) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, 0))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if writing and not inside(path):
                deny(f"writing {os.fsdecode(path) if not isinstance(path, int) else path} (only the scratch folder is writable)")
        elif event in _BLOCKED or event.startswith("ctypes."):
            deny(_BLOCKED.get(event, "ctypes"))
        elif event in _PATH_EVENTS:
            for a in args:
                if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                    deny(f"{event} on {os.fsdecode(a)} (only the scratch folder is writable)")
        elif event == "import" and args and args[0] in _BLOCKED_IMPORTS:
            deny(f"importing {args[0]}")

    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.") or m == "_ctypes"]:
        del sys.modules[name]
    sys.addaudithook(hook)


# ---------------------------------------------------------------------------------------------- helpers for the inducer
def _setup_db(db: dict) -> dict:
    """Load this run's history into an in-memory DuckDB, then switch off file and network access for good."""
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    for table, files in db["tables"].items():
        if files:
            listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet([{listing}], union_by_name=true)")
        elif db["empty_schemas"].get(table):
            cols = ", ".join(f'"{c}" {t}' for c, t in db["empty_schemas"][table])
            con.execute(f"CREATE TABLE {table} ({cols})")
    for table, rows in db.get("inline", {}).items():  # small tables the parent computed (e.g. openings)
        cols = list(rows[0]) if rows else ["task_id", "opening"]
        con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} VARCHAR' for c in cols)})")
        if rows:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in cols)})",
                            [[str(r[c]) for c in cols] for r in rows])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    versions = {}
    for v, path in db["library_versions"].items():
        try:
            with open(path) as f:
                versions[int(v)] = f.read()
        except OSError:
            versions[int(v)] = ""

    def sql(query: str, limit: int = 50) -> list[dict]:
        """Run a read-only SQL query; return up to `limit` rows as dicts."""
        cur = con.execute(query)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchmany(limit)]

    def show(query: str, limit: int = 20, width: int = 120) -> None:
        """Print a query's result as a compact table (each cell cut to `width` characters)."""
        rows = sql(query, limit)
        if not rows:
            print("(no rows)")
            return
        print(" | ".join(rows[0]))
        for r in rows:
            print(" | ".join(_clip(str(v).replace("\n", "\\n"), width) for v in r.values()))

    def library_source(version: int) -> str:
        """Source (skills.py) of an earlier library version."""
        if version not in versions:
            raise KeyError(f"no library version {version}; known: {sorted(versions)}")
        return versions[version]

    return {"db": con, "sql": sql, "show": show, "library_source": library_source,
            "library_versions": lambda: sorted(versions)}


# ---------------------------------------------------------------------------------------------- the worker
class Worker:
    def __init__(self, init: dict):
        self.lim = init["limits"]
        self.out = CappedOutput(self.lim["output_chars"])
        self.ns: dict = {"__name__": "skills", "ActionError": ActionError, "SandboxLimit": SandboxLimit}
        self.frames_sent = 0
        self.stack: list[str] = []
        self.counter = 0
        self.last_obs = None
        self.done = False
        for name in init["primitives"]:
            self.ns[name] = self._primitive(name)

    # primitives are proxied: one request, one reply from the parent
    def _primitive(self, name: str):
        def call(*args):
            if self.done:
                raise EpisodeOver("the episode is over")
            send({"t": "prim", "frame": self.stack[-1] if self.stack else "", "name": name, "args": list(args)})
            reply = recv()
            if reply["t"] == "obs":
                self.last_obs = reply["text"]
                # The primitive that ends the episode returns normally; any further one raises.
                self.done = bool(reply.get("done"))
                return reply["text"]
            if reply["t"] == "prim_limit":
                raise SandboxLimit(reply["msg"])
            raise ActionError(reply["msg"])

        call.__name__ = name
        return call

    def _traced(self, name: str, fn):
        def wrapper(*args, **kwargs):
            parent = self.stack[-1] if self.stack else ""
            self.counter += 1
            frame = f"{self.stack[0]}.{self.counter}" if self.stack else f"f{self.counter}"
            visible = self.frames_sent < self.lim["max_frames"]
            if visible:
                self.frames_sent += 1
                send({"t": "enter", "frame": frame, "parent": parent, "fn": name,
                      "args": _clip(json.dumps([list(args), kwargs], default=repr), 2000)})
            self.stack.append(frame)
            t0, ret, exc = time.perf_counter(), None, ""
            try:
                ret = fn(*args, **kwargs)
                return ret
            except BaseException as e:
                exc = f"{type(e).__name__}: {e}"
                raise
            finally:
                self.stack.pop()
                if visible:
                    send({"t": "exit", "frame": frame, "ret": _clip(repr(ret), 2000), "exc": _clip(exc, 2000),
                          "dur": time.perf_counter() - t0})

        wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = name, fn.__doc__, fn
        return wrapper

    def load(self, source: str) -> None:
        linecache.cache["<skills>"] = (len(source), None, source.splitlines(True), "<skills>")
        exec(compile(source, "<skills>", "exec"), self.ns)
        self.functions = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
        for name in self.functions:
            self.ns[name] = self._traced(name, self.ns[name])

    def _run_limited(self, thunk):
        """Run `thunk` with the per-call CPU timer armed and output captured."""
        sys.stdout = sys.stderr = self.out
        signal.setitimer(signal.ITIMER_PROF, self.lim["call_cpu_s"])
        try:
            return thunk()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__

    def call(self, msg: dict) -> dict:
        import inspect

        name, args = msg["name"], msg["args"]
        fn = self.ns.get(name)
        if name not in self.functions or fn is None:
            return {"t": "badargs", "msg": f"unknown skill {name!r}"}
        try:
            inspect.signature(fn.__wrapped__).bind(*args)
        except TypeError as e:
            return {"t": "badargs", "msg": f"{name}{inspect.signature(fn.__wrapped__)}: {e}"}
        self.stack, self.counter, self.frames_sent, self.last_obs = [msg["frame"]], 0, 0, None
        self.done = bool(msg.get("done"))
        # The actor's call is frame msg["frame"] (the parent opened it); nested calls get child ids.
        fn_inner = fn.__wrapped__
        ret, exc, tb = None, "", ""
        t0 = time.perf_counter()
        try:
            ret = self._run_limited(lambda: fn_inner(*args))
        except BaseException as e:  # everything comes back to the actor as an observation
            exc = f"{type(e).__name__}: {e}"
            tb = _clip("".join(traceback.format_exception(e)[-6:]), 3000)
        out, total = self.out.take()
        self.stack = []
        return {"t": "result", "ret": None if ret is None else _clip(ret if isinstance(ret, str) else repr(ret),
                                                                    self.lim["output_chars"]),
                "exc": exc, "tb": tb, "out": out, "out_total": total, "last_obs": self.last_obs,
                "dur": time.perf_counter() - t0}

    def exec_code(self, code: str) -> dict:
        ret, exc = None, ""
        try:
            tree = ast.parse(code, "<execute_code>")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None

            def run():
                exec(compile(tree, "<execute_code>", "exec"), self.ns)
                if last is not None:
                    return eval(compile(ast.Expression(last.value), "<execute_code>", "eval"), self.ns)

            linecache.cache["<execute_code>"] = (len(code), None, code.splitlines(True), "<execute_code>")
            ret = self._run_limited(run)
        except BaseException as e:
            exc = "".join(traceback.format_exception(e)[-4:])
        out, total = self.out.take()
        return {"t": "result", "ret": None if ret is None else _clip(repr(ret), self.lim["output_chars"]),
                "exc": _clip(exc, 3000), "tb": "", "out": out, "out_total": total, "last_obs": None, "dur": 0.0}


def main() -> None:
    global IN_FD, OUT_FD
    IN_FD, OUT_FD = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    init = recv()
    report: dict = {}
    try:
        ctypes, libc = _libc()
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
        scratch = init["scratch"]
        os.chdir(scratch)
        os.environ.update(HOME=scratch, TMPDIR=scratch)
        import tempfile

        tempfile.tempdir = scratch
        helpers = _setup_db(init["db"]) if init.get("db") else {}
        _unshare_net(report)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by Landlock without CAP_SYS_ADMIN
        _landlock(scratch, init.get("read_paths"), report)
        _rlimits(init["limits"], report)
        _seccomp(report)
        _drop_capabilities(report)
        del ctypes, libc
        if init.get("audit_hook", True):  # switched off only by tests that check the kernel layers alone
            _install_audit_hook(scratch)
            report["audit_hook"] = "sockets, processes, signals, ctypes, rlimit changes, writes outside scratch"
        signal.signal(signal.SIGPROF, _on_cpu_timer)
        w = Worker(init)
        w.ns.update(helpers)
        w.functions = []
        if init.get("source"):
            w._run_limited(lambda: w.load(init["source"]))
    except BaseException as e:
        send({"t": "init_error", "msg": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-3000:],
              "isolation": report})
        return
    send({"t": "ready", "isolation": report, "functions": w.functions})
    while True:
        msg = recv()
        if msg["t"] == "call":
            send(w.call(msg))
        elif msg["t"] == "exec":
            send(w.exec_code(msg["code"]))
        elif msg["t"] == "quit":
            return


if __name__ == "__main__":
    main()
