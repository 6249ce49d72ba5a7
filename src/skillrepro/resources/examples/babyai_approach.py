def approach(name, max_steps=20):
    """Walk until the object `name` (for example "blue box") is 1 step forward, reading where it is in the
    text each primitive returns (a line such as "a blue box 2 steps left and 3 steps forward"); return the
    last text."""
    import re

    view = turn_left()
    view = turn_right()  # turned away and back: the current view, without moving
    for _ in range(max_steps):
        if "Mission complete" in view or "episode is over" in view:
            return view
        line = re.search(r"\b" + name + r"\b([^\n]*)", view)
        if line is None:
            view = turn_left()  # not in sight: look the other way
            continue
        where = {side: int(n) for n, side in re.findall(r"(\d+) steps? (left|right|forward)", line.group(1))}
        ahead, left, right = where.get("forward", 0), where.get("left", 0), where.get("right", 0)
        if ahead == 1 and not left and not right:
            return view
        if ahead > 1 or (ahead == 1 and (left or right)):
            moved = go_forward()
            if moved == view:  # something blocks the way: turn toward the object's side and step there
                moved = turn_left() if left else turn_right()
                moved = go_forward()
            view = moved
        elif left:
            view = turn_left()
        else:
            view = turn_right()
    return view
