"""What the kernel enforces around LLM-written code, and what this machine offers of it: the sandbox's limits
and policy, bubblewrap's availability, the worker's runtime and read allow-list, and the memory cgroup.

Layers (each reported under its name in `SandboxSession.isolation`; a missing one is logged, and config key
`sandbox.require` names the ones a run refuses to start without):

| layer          | what it does                                                                                |
|----------------|---------------------------------------------------------------------------------------------|
| bwrap          | bubblewrap: fresh mount, pid, ipc, uts, net and cgroup namespaces; the worker sees only the |
|                | read allow-list below, read-only, and an empty environment                                  |
| read_allowlist | the Python runtime's standard library and the system libraries (bwrap's mount namespace,    |
|                | and Landlock read rules): no home folder, results, project or environment packages          |
| scratch_limit  | the only writable folder is a tmpfs of `scratch_bytes` (bwrap only)                         |
| uid            | the worker runs as nobody (65534), not the parent's uid; RLIMIT_NPROC applies to it         |
| seccomp        | foreign architectures (i386 `int 0x80`) and the x32 bit kill the worker; fork/exec/clone of |
|                | processes, sockets, signals, ptrace, memfd/shm, chmod/chown/utime/xattr, mount, io_uring,  |
|                | bpf, keyctl ... fail with EPERM                                                              |
| landlock       | writes only under scratch, reads only the allow-list, no TCP, signals scoped (Linux >= 5.13)|
| memory_cgroup  | a memory cgroup counts every page the worker touches (tmpfs included), limit memory_bytes   |
| netns          | no network (bwrap's, or an unshared namespace in the fallback)                              |
| rlimits        | AS, FSIZE, CPU, NOFILE, NPROC=0                                                             |
| audit_hook     | clear messages for the common cases; a convenience, never relied on (it can be switched off)|
Without bubblewrap (not installed, or no namespaces allowed) the worker is started directly and applies
the uid, seccomp, Landlock, netns and rlimits layers itself; then scratch_limit is missing and memfd/shm are
denied by seccomp instead of being counted (memory_cgroup needs a writable cgroup in either mode).
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAYERS = ("bwrap", "read_allowlist", "scratch_limit", "uid", "seccomp", "landlock", "memory_cgroup", "netns",
          "rlimits")
NOBODY = 65534
SCRATCH_IN_BWRAP = "/scratch"


@dataclass(frozen=True)
class SandboxLimits:
    call_wall_s: float = 60.0  # wall clock per skill call / execute_code, enforced by the parent
    call_cpu_s: float = 30.0  # CPU per call (ITIMER_PROF in the worker)
    worker_cpu_s: float = 1800.0  # RLIMIT_CPU for the worker's whole life (kernel)
    memory_bytes: int = 1 << 30  # RLIMIT_AS, and the memory cgroup's limit
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE (scratch files)
    scratch_bytes: int = 64 << 20  # size of the scratch tmpfs (bwrap)
    max_primitives: int = 200  # primitive calls per skill invocation
    output_chars: int = 4000  # printed output and return value kept per call
    max_frames: int = 500  # nested frames recorded per invocation
    start_wall_s: float = 30.0  # worker start (and library load)


@dataclass(frozen=True)
class SandboxPolicy:
    """What a job demands of every sandbox it starts (config key sandbox.require), passed to each session:
    never a module global, so that every job that runs model-written code applies it."""

    require: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = sorted(set(self.require) - set(LAYERS))
        if unknown:
            raise SandboxError(f"config key sandbox.require: unknown layer(s) {', '.join(unknown)}; "
                               f"known: {', '.join(LAYERS)}")


class SandboxError(RuntimeError):
    """The worker could not be started, or a layer that config key sandbox.require names is missing."""


def absolute_db(db: dict) -> dict:
    """The interpreter's history description with every file path absolute."""
    return {**db, "tables": {t: [os.path.abspath(f) for f in files] for t, files in db["tables"].items()},
            "library_versions": {v: os.path.abspath(f) for v, f in db.get("library_versions", {}).items()}}


def interpreter_mounts(db: dict) -> list[str]:
    """What bwrap mounts for the inducer's interpreter beyond the runtime: its virtual environment (duckdb is
    imported from there) and the history files, all read before the layers apply. Landlock's read list stays
    the runtime's, so no cell reads these (the history is queried from the copy in scratch)."""
    files = [f for fs in db["tables"].values() for f in fs] + list(db.get("library_versions", {}).values())
    return [sys.prefix, *site.getsitepackages(), *files]


def runtime() -> tuple[str, list[str]]:
    """The base interpreter (never a virtual environment's: skills import only the standard library) and
    the read allow-list of a skill worker."""
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    libs = [p for p in ("/usr/lib", "/usr/lib64") if os.path.isdir(p)]
    return exe, [os.path.realpath(sys.base_prefix), *libs, "/dev/urandom", "/dev/zero"]


def traversable_by_nobody(path: str) -> bool:
    """Whether uid 65534 can reach `path` (every folder above it searchable by others)."""
    p = Path(path)
    return all(os.stat(d).st_mode & 0o001 for d in [*reversed(p.parents), p] if d.is_dir())


_BWRAP: dict[str, Any] = {}


def bwrap() -> tuple[str | None, str]:
    """The bubblewrap binary if it can create namespaces here (checked once per process), and why not."""
    if not _BWRAP:
        path, why = shutil.which("bwrap"), "bwrap is not installed (apt-get install bubblewrap)"
        if path:
            probe = [path, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--", "/bin/true"]
            if os.geteuid() != 0:
                probe[1:1] = ["--unshare-user"]
            try:
                r = subprocess.run(probe, capture_output=True, text=True, timeout=20, env={})
                why = "" if r.returncode == 0 else f"bwrap cannot create namespaces here: {r.stderr.strip()[:200]}"
            except (OSError, subprocess.TimeoutExpired) as e:
                why = f"bwrap failed to run: {e}"
        _BWRAP.update(path=path if not why else None, why=why)
    return _BWRAP["path"], _BWRAP["why"]


class MemoryCgroup:
    """A child memory cgroup of our own (v1 or v2) with a hard limit; every page the worker touches,
    tmpfs and page tables included, is charged to it. `procs` is None where none can be made."""

    def __init__(self, limit: int):
        self.path, self.procs, self.why = None, None, ""
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError as e:
            self.why = f"unavailable ({e})"
            return
        v1 = [ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == "memory"]
        v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
        if v1:
            base, files = Path("/sys/fs/cgroup/memory") / v1[0].lstrip("/"), [("memory.limit_in_bytes", limit),
                                                                              ("memory.memsw.limit_in_bytes", limit)]
        elif v2:
            base, files = Path("/sys/fs/cgroup") / v2[0].lstrip("/"), [("memory.max", limit), ("memory.swap.max", 0)]
        else:
            self.why = "unavailable (no memory controller)"
            return
        path = base / f"skillrepro-sandbox-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError as e:
            self.why = f"unavailable (cannot create a cgroup under {base}: {e.strerror})"
            return
        self.path = path
        for name, value in files:
            try:
                (path / name).write_text(str(value))
            except OSError as e:
                if name in ("memory.limit_in_bytes", "memory.max"):
                    self.remove()
                    self.why = f"unavailable (cannot set {name}: {e.strerror})"
                    return
        self.procs = str(path / "cgroup.procs")

    def remove(self) -> None:
        """Remove the cgroup once its last (just killed) task has gone; the kernel needs a moment for that."""
        for _ in range(200):
            if self.path is None:
                return
            try:
                self.path.rmdir()
                self.path = self.procs = None
            except FileNotFoundError:
                self.path = self.procs = None
            except OSError:
                time.sleep(0.01)
