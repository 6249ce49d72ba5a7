"""ReAct: no learning between episodes. The library is carried forward unchanged."""
from __future__ import annotations

from skillrepro.learners import InduceContext
from skillrepro.skills import Library


def induce(ctx: InduceContext) -> Library:
    return ctx.library.next_version(meta={"learner": "react", "cycle": ctx.cycle})
