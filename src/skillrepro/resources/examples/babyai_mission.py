def mission_steps(mission):
    """The mission's steps in the order they must be done, each ("pick up" or "go to", object name): for
    "go to a red box after you pick up the key" that is [("pick up", "key"), ("go to", "red box")]."""
    import re

    steps = re.findall(r"(pick up|go to) (?:the|a|an) ((?:\w+ )?(?:ball|box|key|door))", mission)
    if " after you " in mission:
        steps.reverse()
    return steps
