"""Skill libraries: versioned folders of Python source that the actor can call."""
from skillrepro.skills.library import Library, SkillFunction, parse_functions

__all__ = ["Library", "SkillFunction", "parse_functions", "tools_for"]


def tools_for(library: Library, env, record) -> list:
    """The library's public skills as actor tools bound to `env`; each invocation's frames go to `record`.

    An empty library (ReAct, OPO, v0 of every method) adds no tools."""
    if not library.public():
        return []
    from skillrepro.skills.sandbox import skill_tools

    return skill_tools(library, env, record)
