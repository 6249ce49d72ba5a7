"""Skill libraries: versioned folders of Python source that the actor can call."""
from skillrepro.skills.library import Library, SkillFunction, parse_functions

__all__ = ["Library", "SkillFunction", "parse_functions", "tools_for"]


def tools_for(library: Library, env, record, visible: list[str] | None = None, policy=None) -> list:
    """The skills named in `visible` (default: the public ones) as actor tools bound to `env`; every
    function of the library stays callable from them. Each invocation's frames go to `record`.

    An empty library (ReAct, OPO, v0 of every method) adds no tools. `policy` (a sandbox.SandboxPolicy,
    None for none) is what the episode's sandbox must have."""
    names = [f.name for f in library.public()] if visible is None else list(visible)
    if not names:
        return []
    from skillrepro.skills.sandbox import SandboxPolicy, skill_tools  # sandbox imports skills.library: not above

    return skill_tools(library, env, record, policy or SandboxPolicy(), names=names)
