"""What crosses the sandbox's boundary: the frames a worker may send (each checked against its schema, call id
and sequence number), the parent's view of a worker's child and of a call's nested frames, and what one call
produced as the actor reads it.

The protocol: every frame the child sends must match its schema (keys, types, sizes), carry the current
call id and the next sequence number, and respect the frame stack (a nested frame's id is the call's root id
plus a fresh suffix, its parent the innermost open frame). A frame that does not is a protocol violation:
the child is killed, the call's records say so, and the actor gets an ActionError. So is any byte written
after the result. Environment steps and the last observation are the parent's own counts.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from skillrepro.store import SkillCall

RESTART = "InterpreterRestart"  # _worker.RESTART: a cell's result that asks to be stopped before the next


class Violation(Exception):
    """The worker sent something the protocol does not allow."""


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


# The worker's frames: exact keys (besides t, call, seq) with their types and maximum lengths (characters).
# A cap of -1 means output_chars (+100 for the worker's "... cut" note); 0 means none beyond the frame size.
SCHEMA: dict[str, dict[str, tuple[type | tuple, int]]] = {
    "ready": {"isolation": (dict, 0)},
    "init_error": {"msg": (str, 2100), "isolation": (dict, 0)},
    "prim": {"frame": (str, 80), "name": (str, 64), "args": (list, 4096)},
    "enter": {"frame": (str, 80), "parent": (str, 80), "fn": (str, 200), "args": (str, 2100)},
    "exit": {"frame": (str, 80), "ret": (str, 2100), "exc": (str, 2100)},
    "badargs": {"msg": (str, 2100)},
    "result": {"ret": ((str, type(None)), -1), "exc": (str, 3100), "tb": (str, 3100), "out": (str, -1),
               "out_total": (int, 0)},
}


def check_frame(msg: Any, call: str, seq: int, output_chars: int) -> dict:
    """`msg` if it is a well-formed frame of call `call` with sequence number `seq`; else _Violation."""
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str) or msg["t"] not in SCHEMA:
        raise Violation(f"unknown frame {str(msg)[:80]!r}")
    t, fields = msg["t"], SCHEMA[msg["t"]]
    if set(msg) != {"t", "call", "seq", *fields}:
        raise Violation(f"{t} frame with keys {sorted(msg)[:12]}; expected {sorted(['t', 'call', 'seq', *fields])}")
    if msg["call"] != call or msg["seq"] != seq or isinstance(msg["seq"], bool):
        raise Violation(f"{t} frame numbered {str(msg['call'])[:40]}#{str(msg['seq'])[:20]}; expected {call}#{seq}")
    for key, (typ, cap) in fields.items():
        v = msg[key]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise Violation(f"{t}.{key} has type {type(v).__name__}")
        cap = output_chars + 100 if cap == -1 else cap
        if cap and isinstance(v, (str, list)) and len(json.dumps(v) if isinstance(v, list) else v) > cap:
            raise Violation(f"{t}.{key} is longer than {cap}")
    if t == "result" and not (0 <= msg["out_total"] and len(msg["out"]) <= msg["out_total"]):
        raise Violation("result.out_total is inconsistent with result.out")
    if t == "prim" and not all(isinstance(a, (str, int, float, bool, type(None))) and
                               not (isinstance(a, float) and not math.isfinite(a)) for a in msg["args"]):
        raise Violation("prim.args must be plain values")
    if t in ("ready", "init_error"):
        iso = msg["isolation"]
        if len(iso) > 20 or not all(isinstance(k, str) and len(k) <= 40 and isinstance(v, list) and len(v) <= 40
                                    and all(isinstance(x, (bool, str)) and len(str(x)) <= 400 for x in v)
                                    for k, v in iso.items()):
            raise Violation("malformed isolation report")
    return msg


@dataclass
class Child:
    """One child of the zygote as the parent sees it: our ends of its two private pipes, its pidfd (once the
    zygote has sent it), and what it has written that is not yet read as a frame."""

    cid: int
    w: int | None  # its input: calls and observations
    r: int | None  # its frames
    forked: float  # time.monotonic() of the request
    pidfd: int | None = None
    buf: bytes = b""
    eof: bool = False  # its end of the frame pipe is closed: it has exited
    died: dict | None = None  # the zygote's word on how it ended ({"t": "gone"}: no word, the zygote is gone)
    ready: bool = False
    call: str = "init"  # the call id its frames must carry, and the next sequence number
    seq: int = 0
    closed: bool = False  # retired: killed, exited, our ends closed
    leftover: bool = False  # it wrote after its last frame that was read


@dataclass
class Frame:
    frame_id: str
    parent: str
    function: str
    arguments: str
    started: float
    primitives: list = field(default_factory=list)
    ret: str = ""
    exc: str = ""
    dur: float | None = None


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


def observed_nothing(observation: str) -> bool:
    """Whether an actor's observation shows nothing of the world: a game-advancing primitive's None (D.2), or
    `render_outcome` of a skill call that returned and printed nothing and whose last primitive returned None."""
    text = observation.strip()
    return text == "None" or (text.startswith("(") and text.endswith("; last observation:\nNone)"))


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
