"""Skill libraries: versioned folders of Python source that the actor can call."""
from skillrepro.skills.library import Library, SkillFunction, parse_functions

__all__ = ["Library", "SkillFunction", "parse_functions"]
