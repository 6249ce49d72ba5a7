"""ReAct: no learning between episodes. The library is carried forward unchanged."""
from __future__ import annotations

from skillrepro.methods import InduceContext, NoOptions, register
from skillrepro.skills import Library


def induce(ctx: InduceContext, client=None) -> Library:
    return ctx.library.next_version(meta={"method": "react", "cycle": ctx.cycle})


register("react", NoOptions, induce, sleeps=False)
