"""The sandbox worker: a separate Python process that runs untrusted skill or inducer code.

Long because it must be one file: it runs alone inside the sandbox on the standard library, so its layers, its protocol and the interpreter cannot be imported from elsewhere.

Started by skillrepro.skills.sandbox as `python -I [-S] _worker.py`, inside bubblewrap where it can run; it
imports only the standard library (and duckdb when the inducer asks for its history). The zygote reads its
setup from stdin, then forks children on the parent's requests over a control socket; each child talks to the
parent over two pipes of its own (passed with the request) in length-prefixed JSON frames. fds 0-2 point at
/dev/null so skill code cannot write into the protocol by printing. Every frame a child sends carries the
call id and a per-call sequence number; the parent checks both (and everything else) and trusts nothing here.

Isolation is applied in this order, before any untrusted code is read (see sandbox.py for the table of
what the kernel enforces and what only the audit hook enforces):
  unprivileged uid -> fresh environment -> netns (unshare) -> no_new_privs -> Landlock -> rlimits ->
  seccomp -> drop capabilities -> audit hook (a convenience only: code in this process can switch it off).
Each layer reports `[active, description]` under its name; the parent decides what a missing one means.
"""
from __future__ import annotations

import ast
import gc
import json
import linecache
import os
import resource
import select
import signal
import struct
import sys
import traceback

IN_FD, OUT_FD = 0, 1  # replaced by private duplicates in main()
GO_FD: int | None = None  # a staged child's go pipe: it loads the library once this reads a byte
NOBODY = 65534
RESTART = "InterpreterRestart"  # starts the exec result of a cell that left something running (sandbox.py)
_CALL = {"id": "init", "seq": 0}  # the call the frames belong to, and the next sequence number


# ---------------------------------------------------------------------------------------------- framing
def send(msg: dict) -> None:
    msg = {**msg, "call": _CALL["id"], "seq": _CALL["seq"]}
    data = json.dumps(msg, default=repr).encode()
    _CALL["seq"] += 1  # only for a frame that is written: a failed encoding (RecursionError) leaves no gap
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


def _json(value) -> str:
    """JSON of what skill code passes around, whatever it is (tuple keys, cycles, a hostile __repr__)."""
    try:
        return json.dumps(value, default=repr)
    except (RecursionError, MemoryError):
        raise  # the skill's own limit: it reaches the skill as its exception
    except Exception:  # noqa: BLE001 - any other failure becomes a description, never a crash of the call
        return json.dumps(_repr(value))


def _repr(value) -> str:
    try:
        return repr(value)
    except (RecursionError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001
        return f"<unrepresentable {type(value).__name__}: {type(e).__name__}>"


def _clip(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more characters cut]"


# ---------------------------------------------------------------------------------------------- isolation
_LIBC: tuple | None = None


def _libc():
    """ctypes and the C library, loaded once by the zygote: each child would pay the load (and its page
    faults) again. The reference stays (dropping it would free the module page by page in every child), so
    skill code can reach ctypes through it: the audit hook's refusal of `import ctypes` is a convenience, and
    the kernel layers hold regardless."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes, ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _drop_uid(init: dict, report: dict) -> None:
    """Become `nobody` (host uid 65534) before anything untrusted runs: its files, processes and rlimits
    are not the parent's, and RLIMIT_NPROC applies (the kernel never applies it to uid 0)."""
    if os.geteuid() != 0:  # bwrap mapped us to nobody in a user namespace, or we run as the parent's user
        report["uid"] = ([True, f"nobody ({NOBODY}) in a user namespace; RLIMIT_NPROC applies"] if init.get("bwrap")
                         else [False, f"the parent's own uid {os.geteuid()} (not root, so RLIMIT_NPROC applies)"])
        return
    if not init.get("drop_uid"):
        report["uid"] = [False, "unavailable: root, and the Python runtime is not readable by nobody here"]
        return
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)  # from 0 to non-zero: every capability is gone
    report["uid"] = [True, f"nobody ({NOBODY}): not the parent's uid, RLIMIT_NPROC applies"]


def _unshare_net(report: dict) -> None:
    ctypes, libc = _libc()
    CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
    if libc.unshare(CLONE_NEWNET) == 0:
        report["netns"] = [True, "new network namespace (no interfaces but a down loopback)"]
        return
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        report["netns"] = [True, "new user+network namespace"]
        return
    report["netns"] = [False, f"unavailable ({os.strerror(ctypes.get_errno())})"]


# Landlock (Linux >= 5.13): kernel-enforced file-system, TCP and signal restrictions for this process.
_LL_FS = {  # access right bit -> first ABI that knows it
    "EXECUTE": (1 << 0, 1), "WRITE_FILE": (1 << 1, 1), "READ_FILE": (1 << 2, 1), "READ_DIR": (1 << 3, 1),
    "REMOVE_DIR": (1 << 4, 1), "REMOVE_FILE": (1 << 5, 1), "MAKE_CHAR": (1 << 6, 1), "MAKE_DIR": (1 << 7, 1),
    "MAKE_REG": (1 << 8, 1), "MAKE_SOCK": (1 << 9, 1), "MAKE_FIFO": (1 << 10, 1), "MAKE_BLOCK": (1 << 11, 1),
    "MAKE_SYM": (1 << 12, 1), "REFER": (1 << 13, 2), "TRUNCATE": (1 << 14, 3), "IOCTL_DEV": (1 << 15, 5),
}
_READ = ("EXECUTE", "READ_FILE", "READ_DIR")


_LL_SYS_CREATE, _LL_SYS_ADD, _LL_SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and aarch64
_LANDLOCK: dict | None = None  # the ruleset's plan, made once by the zygote (_landlock_plan)


def _landlock_plan(scratch: str, read_paths: list[str] | None) -> dict:
    """What every child's ruleset holds, worked out once by the zygote: the ABI, the handled rights and one
    packed rule per existing path, each on an O_PATH descriptor the zygote keeps open for its children
    (a child closes its copies once it is restricted). Only the child's own /proc entry is added per child."""
    ctypes, libc = _libc()
    abi = libc.syscall(_LL_SYS_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return {"error": f"unavailable ({os.strerror(ctypes.get_errno())})"}
    known = {k: bit for k, (bit, since) in _LL_FS.items() if since <= abi}
    write_rights = sum(bit for k, bit in known.items() if k not in _READ)
    read_rights = sum(known[k] for k in _READ)
    handled_fs = write_rights | (read_rights if read_paths is not None else 0)
    handled_net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP, with no rule allowing any port
    scoped = 0b11 if abi >= 6 else 0  # ABSTRACT_UNIX_SOCKET | SIGNAL: nothing outside the sandbox
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    # Files accept only file rights (execute, read/write file, truncate, ioctl).
    file_only = sum(known.get(k, 0) for k in ("EXECUTE", "WRITE_FILE", "READ_FILE", "TRUNCATE", "IOCTL_DEV"))
    rules: list[tuple[str, int, bytes]] = []

    def allow(path: str, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # a path that does not exist needs no rule
        rules.append((path, pfd, struct.pack("<Qi", rights if os.path.isdir(path) else rights & file_only, pfd)))

    allow(scratch, handled_fs)
    allow("/dev/null", known["WRITE_FILE"] | (known["READ_FILE"] if read_paths is not None else 0))
    for p in read_paths or []:
        allow(p, read_rights)
    return {"attr": struct.pack("<QQQ", handled_fs, handled_net, scoped)[:size], "rules": rules,
            # The process's own /proc entry (not /proc/self, which would follow whoever reads it): its
            # threads' seccomp modes are read from there after the layers (_thread_report). Nothing in it is secret.
            "proc_rights": known["READ_FILE"] | known["READ_DIR"] if read_paths is not None else 0,
            "text": f"ABI {abi}: writes only under scratch"
                    + ("; reads only the allow-list" if read_paths is not None else "")
                    + ("; TCP bind/connect denied" if handled_net else "")
                    + ("; signals and abstract unix sockets scoped to the sandbox" if scoped else "")}


def _landlock(plan: dict, report: dict) -> None:
    """Restrict this process by `plan` (from _landlock_plan) plus a rule for its own /proc entry."""
    if "error" in plan:
        report["landlock"] = [False, plan["error"]]
        return
    ctypes, libc = _libc()
    fd = libc.syscall(_LL_SYS_CREATE, ctypes.c_char_p(plan["attr"]), len(plan["attr"]), 0)
    if fd < 0:
        report["landlock"] = [False, f"ruleset failed ({os.strerror(ctypes.get_errno())})"]
        return
    rules = list(plan["rules"])
    if plan["proc_rights"]:
        me = f"/proc/{os.getpid()}"
        pfd = os.open(me, os.O_PATH | os.O_CLOEXEC)
        rules.append((me, pfd, struct.pack("<Qi", plan["proc_rights"], pfd)))
    for path, _, rule in rules:
        if libc.syscall(_LL_SYS_ADD, fd, 1, ctypes.c_char_p(rule), 0) != 0:
            report.setdefault("landlock_rule_errors", []).append(f"{path}: {os.strerror(ctypes.get_errno())}")
    if libc.syscall(_LL_SYS_RESTRICT, fd, 0) != 0:
        report["landlock"] = [False, f"restrict_self failed ({os.strerror(ctypes.get_errno())})"]
    else:
        report["landlock"] = [True, plan["text"]]
    os.close(fd)
    for _, pfd, _ in rules:  # this process's copies of the zygote's descriptors, and its /proc entry
        os.close(pfd)


# seccomp (x86_64 only). Any other architecture (the i386 `int 0x80` entry) and the x32 bit kill the
# process; the calls below fail with EPERM; clone is allowed only for threads (RLIMIT_NPROC=0 refuses those
# too where it applies), clone3 answers ENOSYS so that libc falls back to clone, whose flags a filter can read.
_DENY = {
    "process": {57: "fork", 58: "vfork", 59: "execve", 322: "execveat", 101: "ptrace", 310: "process_vm_readv",
                311: "process_vm_writev", 312: "kcmp", 272: "unshare", 308: "setns", 135: "personality"},
    "signals": {62: "kill", 200: "tkill", 234: "tgkill", 129: "rt_sigqueueinfo", 297: "rt_tgsigqueueinfo",
                424: "pidfd_send_signal", 434: "pidfd_open", 438: "pidfd_getfd"},
    "sockets": {41: "socket", 53: "socketpair"},
    "uncounted memory": {319: "memfd_create", 447: "memfd_secret", 29: "shmget", 30: "shmat", 31: "shmctl",
                         68: "msgget", 69: "msgsnd", 240: "mq_open", 323: "userfaultfd"},
    "file metadata": {90: "chmod", 91: "fchmod", 268: "fchmodat", 452: "fchmodat2", 92: "chown", 93: "fchown",
                      94: "lchown", 260: "fchownat", 132: "utime", 235: "utimes", 280: "utimensat",
                      261: "futimesat", 188: "setxattr", 189: "lsetxattr", 190: "fsetxattr", 197: "removexattr",
                      198: "lremovexattr", 199: "fremovexattr", 133: "mknod", 259: "mknodat"},
    "kernel interfaces": {165: "mount", 166: "umount2", 155: "pivot_root", 161: "chroot", 250: "keyctl",
                          248: "add_key", 249: "request_key", 321: "bpf", 298: "perf_event_open",
                          425: "io_uring_setup", 426: "io_uring_enter", 427: "io_uring_register",
                          303: "name_to_handle_at", 304: "open_by_handle_at", 428: "open_tree", 429: "move_mount",
                          430: "fsopen", 431: "fsconfig", 432: "fsmount", 433: "fspick", 442: "mount_setattr"},
}
_X86_64, _X32_BIT = 0xC000003E, 0x40000000
_SYS_CLONE, _SYS_CLONE3, _SYS_PRLIMIT64, _CLONE_THREAD = 56, 435, 302, 0x00010000


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The BPF program (classic BPF, `struct sock_filter` tuples); tests read it to check the arch test."""
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    KILL, ALLOW, EPERM, ENOSYS = 0x80000000, 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    denied = sorted({nr for group in _DENY.values() for nr in group})
    # Layout: header, one JEQ per denied number (-> EPERM), clone, clone3, prlimit64 checks, returns.
    head = [(LD, 0, 0, 4), None, (LD, 0, 0, 0), None]  # arch, x86_64?, nr, x32 bit?
    n = len(denied)
    body_start = len(head)
    # Index of each target, computed once the length is known.
    i_clone_chk = body_start + n + 3  # after the JEQ list and the three dispatch JEQs
    i_allow = i_clone_chk + 6
    i_eperm, i_enosys, i_kill = i_allow + 1, i_allow + 2, i_allow + 3
    prog = head
    prog[1] = (JEQ, 0, i_kill - 2, _X86_64)  # jumps are relative to the next instruction
    prog[3] = (JGE, i_kill - 4, 0, _X32_BIT)
    for k, nr in enumerate(denied):
        here = body_start + k
        prog.append((JEQ, i_eperm - here - 1, 0, nr))
    here = len(prog)
    prog.append((JEQ, i_clone_chk - here - 1, 0, _SYS_CLONE))
    prog.append((JEQ, i_enosys - here - 2, 0, _SYS_CLONE3))
    prog.append((JEQ, 2, i_allow - here - 3, _SYS_PRLIMIT64))  # -> prlimit check (2 below the clone check)
    # i_clone_chk: clone flags (low 32 bits of args[0]); a thread -> allow, else EPERM
    prog += [(LD, 0, 0, 16), (JSET, i_allow - i_clone_chk - 2, i_eperm - i_clone_chk - 2, _CLONE_THREAD)]
    # prlimit64 on another process (pid != 0) -> EPERM; on itself (pid 0) -> allow
    prog += [(LD, 0, 0, 16), (JEQ, 0, i_eperm - i_clone_chk - 4, 0),
             (LD, 0, 0, 20), (JEQ, i_allow - i_clone_chk - 6, i_eperm - i_clone_chk - 6, 0)]
    prog += [(RET, 0, 0, ALLOW), (RET, 0, 0, EPERM), (RET, 0, 0, ENOSYS), (RET, 0, 0, KILL)]
    assert len(prog) == i_kill + 1 and all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in prog)
    return prog


_FILTER: tuple | None = None  # (buffer, struct sock_fprog): made once by the zygote, each child installs it


def _compile_filter() -> tuple:
    ctypes, _ = _libc()
    prog = seccomp_program()
    buf = ctypes.create_string_buffer(b"".join(struct.pack("<HBBI", *ins) for ins in prog))
    return buf, struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(buf))


def _seccomp(report: dict) -> None:
    """Install the filter on every thread of this process at once (seccomp(2) with TSYNC: prctl would cover
    only the calling thread). The layer's report comes from what the kernel says per thread (_thread_report)."""
    if os.uname().machine != "x86_64":
        report["seccomp"] = [False, f"not installed (the filter is written for x86_64, this is {os.uname().machine})"]
        return
    ctypes, libc = _libc()
    _buf, fprog = _FILTER or _compile_filter()  # the buffer must stay alive until the call returns
    SYS_SECCOMP, SET_MODE_FILTER, FLAG_TSYNC = 317, 1, 1
    rc = libc.syscall(SYS_SECCOMP, SET_MODE_FILTER, FLAG_TSYNC, ctypes.c_char_p(fprog))
    if rc == 0:
        report["seccomp"] = [True, "foreign architectures and x32 kill the process; denied: "
                             + ", ".join(sorted(_DENY)) + "; clone only for threads"]
    elif rc > 0:  # TSYNC names the thread it could not synchronise
        report["seccomp"] = [False, f"thread {rc} could not be synchronised"]
    else:
        report["seccomp"] = [False, f"failed ({os.strerror(ctypes.get_errno())})"]


def _threads() -> list[str]:
    return sorted(os.listdir("/proc/self/task"), key=int)


def _thread_report(report: dict, landlock_probe: str) -> None:
    """Replace the seccomp and Landlock reports by what the kernel shows for every thread: the Seccomp mode
    of each /proc/self/task/*/status (2 = filter), and whether `landlock_probe` (a folder outside the read
    allow-list) can be listed, from the main thread and, where the process has other threads, from a fresh one."""
    modes = {}
    for tid in _threads():
        try:  # os-level reads: a skill child pays this per call, and the text layer costs page faults
            fd = os.open(f"/proc/self/task/{tid}/status", os.O_RDONLY)
            try:
                status = os.read(fd, 1 << 16).decode()
            finally:
                os.close(fd)
            at = status.find("\nSeccomp:")
            modes[tid] = status[at + 9:status.find("\n", at + 1)].strip() if at >= 0 else "?"
        except OSError:
            modes[tid] = "?"  # the thread ended meanwhile
    if report.get("seccomp", [False])[0]:
        off = sorted(t for t, m in modes.items() if m != "2")
        detail = f"; {len(modes)} thread(s), all in filter mode" if not off else ""
        report["seccomp"] = [not off, report["seccomp"][1] + detail if not off
                             else f"thread(s) {', '.join(off)} of {len(modes)} run without the filter"]
    if report.get("landlock", [False])[0] and landlock_probe:
        def probe(out: list) -> None:
            try:
                os.listdir(landlock_probe)
                out.append(False)
            except PermissionError:
                out.append(True)
            except OSError:
                out.append(True)  # absent: nothing to read either way

        seen: list = []
        probe(seen)
        # From a fresh thread too where the process has others (the inducer's DuckDB threads). A skill
        # child has one thread here, restricted above, and every thread it starts inherits its domain: the
        # second probe would only cost each skill call a thread start.
        if len(modes) > 1:
            # through _thread: the zygote does not import threading, whose fork handler costs every child
            # some hundred page faults
            import _thread

            done = _thread.allocate_lock()
            done.acquire()

            def on_thread() -> None:
                try:
                    probe(seen)
                finally:
                    done.release()

            try:
                _thread.start_new_thread(on_thread, ())
                done.acquire()
            except RuntimeError:
                seen.append(True)  # no thread can start (RLIMIT_NPROC): none can escape either
        if not all(seen):
            report["landlock"] = [False, f"reading {landlock_probe} outside the allow-list succeeded"]


def _drop_capabilities(report: dict) -> None:
    if os.geteuid() != 0:
        return
    ctypes, libc = _libc()
    header = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # effective, permitted, inheritable = 0 (two 32-bit words each)
    ok = libc.syscall(126 if os.uname().machine == "x86_64" else 91, ctypes.c_char_p(header),
                      ctypes.c_char_p(data)) == 0
    report["capabilities"] = [ok, "all dropped" if ok else f"capset failed ({os.strerror(ctypes.get_errno())})"]


def _rlimits(lim: dict, report: dict, nproc: bool = True) -> None:
    def setlim(which, value):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError) as e:
            report.setdefault("rlimit_errors", []).append(f"{which}: {e}")

    setlim(resource.RLIMIT_AS, lim["memory_bytes"])
    setlim(resource.RLIMIT_FSIZE, lim["file_bytes"])
    setlim(resource.RLIMIT_CPU, int(lim["worker_cpu_s"]))
    setlim(resource.RLIMIT_CORE, 0)
    setlim(resource.RLIMIT_NOFILE, 64)
    if nproc:  # else set by _no_more_threads once the interpreter's DuckDB threads exist
        setlim(resource.RLIMIT_NPROC, 0)  # no new process or thread (never applied to uid 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of killing us
    nproc = "applies" if os.geteuid() != 0 else "NOT applied (uid 0)"
    report["rlimits"] = [not report.get("rlimit_errors"),
                         f"AS {lim['memory_bytes']}, FSIZE {lim['file_bytes']}, CPU {int(lim['worker_cpu_s'])} s, "
                         f"NOFILE 64, NPROC 0 ({nproc})"]


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

    # Named, not searched for: a scan of sys.modules would touch every module name, page by page (each a
    # copy-on-write fault in a fresh child). A ctypes submodule imported later is refused by the hook.
    for name in ("ctypes", "ctypes._endian", "_ctypes"):
        sys.modules.pop(name, None)
    sys.addaudithook(hook)


# ---------------------------------------------------------------------------------------------- helpers for the inducer
def _build_history_db(db: dict, scratch: str) -> tuple[str, dict]:
    """Copy this run's history into a DuckDB file in scratch, before any layer is applied (the records belong
    to the parent's uid and sit outside the read allow-list). The connection is closed again, which joins
    DuckDB's worker threads: the layers must be applied while this process has one thread (Landlock has no
    thread-sync), and the threads DuckDB starts when the file is reopened inherit them all."""
    # lazy: the sandbox worker imports only the standard library until the inducer asks for its history
    import duckdb

    path = os.path.join(scratch, "history.duckdb")
    if os.path.exists(path):  # an earlier child's copy (that child is dead); it may have been tampered with
        os.unlink(path)
    con = duckdb.connect(path, config={"threads": 1})
    try:
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
        con.execute("CHECKPOINT")
    finally:
        con.close()
    os.chmod(path, 0o444)  # readable by nobody after the uid change; nobody may not rewrite it
    versions = {}
    for v, lib in db["library_versions"].items():
        try:
            with open(lib) as f:
                versions[int(v)] = f.read()
        except OSError:
            versions[int(v)] = ""
    return path, versions


def _open_history_db(path: str, versions: dict) -> dict:
    """The inducer's helpers over the history file, opened read-only after every layer is in place."""
    # lazy: the sandbox worker, as in _build_history_db
    import duckdb

    con = duckdb.connect(path, read_only=True, config={"threads": 1, "enable_external_access": False,
                                                       "lock_configuration": True})

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
        self.baseline: dict | None = None  # _residue() before the first cell
        self.stack: list[str] = []
        self.counter = 0
        self.done = False
        for name in init["primitives"]:
            self.ns[name] = self._primitive(name)

    # primitives are proxied: one request, one reply from the parent
    def _primitive(self, name: str):
        def call(*args):
            if self.done:
                raise EpisodeOver("the episode is over")
            if len(_json(list(args))) > 4000:
                raise ActionError(f"{name}: arguments longer than 4000 characters")
            send({"t": "prim", "frame": self.stack[-1] if self.stack else "", "name": name, "args": list(args)})
            reply = recv()  # the parent's answers are trusted: it wrote them
            if reply["t"] == "obs":
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
                      "args": _clip(_json([list(args), kwargs]), 2000)})
            # Past max_frames a call is not recorded: its primitives belong to the innermost recorded frame.
            self.stack.append(frame if visible else parent)
            ret, exc = None, ""
            try:
                ret = fn(*args, **kwargs)
                return ret
            except BaseException as e:
                exc = f"{type(e).__name__}: {e}"
                raise
            finally:
                self.stack.pop()
                if visible:
                    send({"t": "exit", "frame": frame, "ret": _clip(_repr(ret), 2000), "exc": _clip(exc, 2000)})

        wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = name, fn.__doc__, fn
        return wrapper

    def load(self, source: str, functions: list[str]) -> None:
        """Run the library's module code and trace its top-level functions (`functions`, named by the parent,
        which parsed the same source: the child does not parse it a second time)."""
        linecache.cache["<skills>"] = (len(source), None, source.splitlines(True), "<skills>")
        exec(compile(source, "<skills>", "exec"), self.ns)
        self.functions = list(functions)
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
        _CALL["id"], _CALL["seq"] = msg["call"], 0
        fn = self.ns.get(name)
        if name not in self.functions or fn is None:
            return {"t": "badargs", "msg": f"unknown skill {name!r}"}
        try:
            inspect.signature(fn.__wrapped__).bind(*args)
        except TypeError as e:
            return {"t": "badargs", "msg": f"{name}{inspect.signature(fn.__wrapped__)}: {e}"}
        self.stack, self.counter, self.frames_sent = [msg["frame"]], 0, 0
        self.done = bool(msg.get("done"))
        # The actor's call is frame msg["frame"] (the parent opened it); nested calls get child ids.
        fn_inner = fn.__wrapped__
        ret, exc, tb = None, "", ""
        try:
            ret = self._run_limited(lambda: fn_inner(*args))
        except BaseException as e:  # everything comes back to the actor as an observation
            exc = _clip(f"{type(e).__name__}: {e}", 2000)
            tb = _clip("".join(traceback.format_exception(e)[-6:]), 3000)
        out, total = self.out.take()
        self.stack = []
        return {"t": "result", "ret": None if ret is None else _clip(ret if isinstance(ret, str) else _repr(ret),
                                                                    self.lim["output_chars"]),
                "exc": exc, "tb": tb, "out": out, "out_total": total}

    def exec_code(self, msg: dict) -> dict:
        if self.baseline is None:  # what runs between cells is compared with the interpreter before its first
            self.baseline = _residue()
        code, ret, exc = msg["code"], None, ""
        _CALL["id"], _CALL["seq"] = msg["call"], 0
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
        left = [k for k, v in _residue().items() if v != self.baseline.get(k)]
        if left:  # the parent stops this process on this marker before it answers the model
            exc = (f"{RESTART}: the cell left {', '.join(left)} behind (threads, timers or signal handlers); "
                   f"the interpreter was restarted and its names are lost\n" + exc)
        return {"t": "result", "ret": None if ret is None else _clip(_repr(ret), self.lim["output_chars"]),
                "exc": _clip(exc, 3000), "tb": "", "out": out, "out_total": total}


def _child(init: dict) -> None:
    """One skill call's (or the inducer's) process: apply the per-process layers, load the library, serve.

    Every layer is applied while the process has a single thread, so no thread can run without one; the
    inducer's DuckDB threads start afterwards and inherit them all."""
    report: dict = dict(init["zygote_report"])
    try:
        db = _build_history_db(init["db"], init["scratch"]) if init.get("db") else None
        if len(_threads()) != 1:
            raise RuntimeError(f"{len(_threads())} threads before the layers are applied; refusing to run")
        _drop_uid(init, report)
        libc = _libc()[1]
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (again: the uid change cleared it)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by Landlock and seccomp without privileges
        _drop_capabilities(report)
        _landlock(_LANDLOCK or _landlock_plan(init["scratch"], init.get("read_paths")), report)
        _rlimits(init["limits"], report, nproc=db is None)
        _seccomp(report)
        helpers = _open_history_db(*db) if db else {}
        if db:
            _no_more_threads(report)
        read = [os.path.realpath(r) for r in init.get("read_paths") or []]
        _thread_report(report, "/" if init.get("read_paths") is not None and "/" not in read else "")
        if init.get("audit_hook", True):  # switched off only by tests that check the kernel layers alone
            _install_audit_hook(init["scratch"])
            report["audit_hook"] = [True, "a convenience for clear messages, not a boundary"]
        signal.signal(signal.SIGPROF, _on_cpu_timer)
        w = Worker(init)
        w.ns.update(helpers)
        w.functions = []
        if GO_FD is not None:  # staged beside a running child: model-written code waits for its turn
            if os.read(GO_FD, 1) != b"g":
                os._exit(0)  # the zygote is gone
            os.close(GO_FD)
        if init.get("source"):
            w._run_limited(lambda: w.load(init["source"], init["functions"]))
    except BaseException as e:
        send({"t": "init_error", "msg": _clip(f"{type(e).__name__}: {e}", 2000), "isolation": report})
        return
    send({"t": "ready", "isolation": report})
    while True:
        msg = recv()
        if msg["t"] == "call":
            send(w.call(msg))
            # One call per child. Closing the frame pipe tells the parent at once that nothing more can come
            # (its end-of-file needs every write end closed, so a copy kept by skill code delays it to the
            # child's death); the parent kills the child regardless.
            os.close(OUT_FD)
            os._exit(0)
        elif msg["t"] == "exec":
            send(w.exec_code(msg))


def _no_more_threads(report: dict) -> None:
    """RLIMIT_NPROC 0 once DuckDB's threads exist: no cell can start a thread or a process."""
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ValueError, OSError) as e:
        report.setdefault("rlimit_errors", []).append(f"NPROC: {e}")
        report["rlimits"] = [False, report.get("rlimits", [False, ""])[1]]


def _residue() -> dict:
    """What could run after a cell returns: threads, POSIX timers, interval timers, caught signals."""
    out = {"threads": _threads(), "itimers": [signal.getitimer(t) != (0.0, 0.0)
                                              for t in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL)]}
    for name in ("timers", "status"):
        try:
            with open(f"/proc/self/{name}") as f:
                text = f.read()
        except OSError:
            text = "unreadable"  # compared as such: unreadable before and after is no change
        out[name] = text if name == "timers" else [ln for ln in text.splitlines() if ln.startswith(("SigCgt", "SigBlk"))]
    return out


def _ctrl_send(ctrl, msg: dict, fds: tuple = ()) -> None:
    """One control message (a datagram of the parent's SOCK_SEQPACKET pair), with file descriptors."""
    import socket

    socket.send_fds(ctrl, [json.dumps(msg).encode()], list(fds))


def _become_child(ctrl, fds: list[int], go_fd: int | None) -> None:
    """In a freshly forked child: keep only its own two pipes, its go pipe (a staged child), /dev/null on 0-2
    and the Landlock plan's path descriptors (closed once it is restricted). The zygote's control socket and
    anything else it holds are closed: no child can reach the zygote or the parent but through its own pipes."""
    global IN_FD, OUT_FD, GO_FD
    ctrl.detach()  # the fd is closed below; a socket object that closed it again later could hit a reused fd
    IN_FD, OUT_FD, GO_FD = *fds, go_fd
    keep = {0, 1, 2, *fds, *([go_fd] if go_fd is not None else []),
            *(pfd for _, pfd, _ in (_LANDLOCK or {}).get("rules", ()))}
    # The descriptors actually open, not a range up to the limit: where close_range(2) is missing, Python
    # closes a range one descriptor at a time.
    for fd in [int(f) for f in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the descriptor listdir itself used


def main() -> None:
    """The zygote: set up what all children share once, then fork one child per request of the parent.
    It never runs untrusted code; children cannot reach it (another uid, no signals, no ptrace, no /proc,
    and its control socket is closed in them). Each child gets two pipes of its own from the parent (passed
    over the control socket), so nothing a child does to its pipes reaches any other child; the parent
    kills a child itself, through the pidfd the zygote hands back, and the zygote reaps it. Each child
    changes its uid itself, after reading the inducer's history (written by the parent's uid)."""
    import socket

    global IN_FD, OUT_FD
    IN_FD, OUT_FD = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    init = recv()
    os.close(IN_FD)  # the init pipe: children talk over pipes of their own
    os.close(OUT_FD)
    ctrl = socket.socket(fileno=init["ctrl"])
    report: dict = {}
    libc = _libc()[1]
    if not init.get("bwrap"):  # bubblewrap has already given us every namespace
        _unshare_net(report)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
    libc.prctl(4, 0)  # PR_SET_DUMPABLE 0: no ptrace or /proc/<pid>/mem of the zygote (children inherit it)
    os.chdir(init["scratch"])
    os.environ.clear()  # the parent started us with an empty environment; nothing is inherited
    os.environ.update(HOME=init["scratch"], TMPDIR=init["scratch"], PATH="/nonexistent")
    import inspect  # noqa: F401  (imported once here, so that a child starts in a few milliseconds)

    # Not imported here: threading and tempfile (through random); their fork handlers would run in every
    # child. tempfile finds scratch through TMPDIR.
    global _FILTER, _LANDLOCK
    _FILTER = _compile_filter()
    _LANDLOCK = _landlock_plan(init["scratch"], init.get("read_paths"))
    libc.syscall, libc.prctl  # noqa: B018  (ctypes makes a function object at the first lookup: once, here)
    init["zygote_report"] = report
    # Everything the zygote holds is shared copy-on-write with its children; frozen, no collection in a
    # child walks (and so copies) those pages.
    gc.freeze()
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (the parent's id of the child, pid)
    waiting: list[tuple[int, list[int], bool]] = []  # fork requests not served yet: (id, pipes, staged)
    staged: tuple[int, int] | None = None  # the staged child waiting for its turn: (pidfd, go pipe's write end)
    while True:
        ready, _, _ = select.select([ctrl.fileno(), *children], [], [])
        for pidfd in [fd for fd in ready if fd in children]:  # a child ended (killed by the parent, a limit...)
            cid, pid = children.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            if staged and staged[0] == pidfd:  # the staged child died before its turn
                os.close(staged[1])
                staged = None
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            _ctrl_send(ctrl, {"t": "died", "cid": cid, "signal": sig, "code": 0 if sig else os.WEXITSTATUS(status)})
        if ctrl.fileno() in ready:
            try:
                data, fds, _, _ = socket.recv_fds(ctrl, 4096, 2)
                cmd = json.loads(data) if data else {"t": "quit"}
            except (OSError, ValueError):
                cmd, fds = {"t": "quit"}, []
            if cmd.get("t") != "fork" or len(fds) != 2:
                os._exit(0)  # the parent closed the socket (or sent what it never sends): the sandbox ends
            waiting.append((cmd["cid"], fds, cmd.get("staged") is True))
        # Model-written code runs in one child at a time. A request is served when no child is alive; a
        # staged request (the next skill call's child, asked for when a call starts) also beside one running
        # child: it is forked and takes its layers now, and loads the library only when its go pipe says so,
        # which is once every other child has been reaped.
        if staged and len(children) == 1:  # the staged child is alone now: its turn
            os.write(staged[1], b"g")
            os.close(staged[1])
            staged = None
        if waiting and (not children or (waiting[0][2] and len(children) == 1 and not staged and not init.get("db"))):
            cid, fds, _ = waiting.pop(0)
            go_r, go_w = os.pipe() if children else (None, None)
            pid = os.fork()
            if pid == 0:
                try:  # whatever happens, the child never returns into the zygote's loop
                    _become_child(ctrl, fds, go_r)
                    _child(init)
                finally:
                    os._exit(0)
            for fd in (*fds, *([go_r] if go_r is not None else [])):
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = (cid, pid)
            if go_w is not None:
                staged = (pidfd, go_w)
            _ctrl_send(ctrl, {"t": "forked", "cid": cid}, (pidfd,))


if __name__ == "__main__":
    main()
