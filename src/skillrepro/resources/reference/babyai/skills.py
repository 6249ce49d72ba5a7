# Hand-written reference library for BabyAI-Text pick_up_seq_go_to (the `reference` method's positive
# control). It calls only the six primitives (turn_left, turn_right, go_forward, pick_up, drop, toggle) and
# reads only the text views they return. Public: solve_mission; the functions whose names start with an
# underscore are private helpers. A library is its top-level functions only (no module-level code): each
# helper keeps its own constants.


def _mission_patterns():
    """Priority-ordered mission patterns: the reversed phrasings ("... after you ...") come before the plain
    left-to-right ones, so "go to Y after you pick up X" is read as pick up X first. Each entry: a pattern,
    then its goals in execution order as (verb, group of the colour, group of the kind)."""
    obj = r"(?:the|a|an)\s+(?:(red|green|blue|purple|yellow|grey)\s+)?(key|ball|box|door)"
    then = r"\s*,?\s*(?:and\s+)?then\s+|\s+and\s+"
    return (
        (r"go to\s+" + obj + r"\s*,?\s*after you pick up\s+" + obj, (("pick", 3, 4), ("go", 1, 2))),
        (r"pick up\s+" + obj + r"\s*,?\s*after you go to\s+" + obj, (("go", 3, 4), ("pick", 1, 2))),
        (r"pick up\s+" + obj + "(?:" + then + r")go to\s+" + obj, (("pick", 1, 2), ("go", 3, 4))),
        (r"go to\s+" + obj + "(?:" + then + r")pick up\s+" + obj, (("go", 1, 2), ("pick", 3, 4))),
        (r"pick up\s+" + obj, (("pick", 1, 2),)),
        (r"go to\s+" + obj, (("go", 1, 2),)),
    )


def _parse_mission(mission):
    """The mission's goals in execution order: a list of (verb, colour or None, kind), verb "pick" or "go"."""
    import re

    text = " ".join(str(mission).lower().replace("_", " ").split())
    for pattern, order in _mission_patterns():
        m = re.search(pattern, text)
        if m:
            return [(verb, m.group(c), m.group(k)) for verb, c, k in order]
    return []


def _read_view(text):
    """Parse one view: (objects as a list of (colour, kind, side, ahead), walls as {direction: distance},
    what is carried as (colour, kind) or None, whether the mission was completed). A line such as "a red
    ball 1 step left and 2 steps forward" is the object at side -1 (right is positive), ahead 2."""
    import re

    objects, walls, carrying = [], {}, None
    done = "mission complete" in text.lower()
    for line in text.splitlines():
        line = line.strip().lower()
        m = re.match(r"you carry an? (\w+) (\w+)", line)
        if m:
            carrying = (m.group(1), m.group(2))
            continue
        m = re.match(r"an? wall (\d+) steps? (forward|left|right)$", line)
        if m:
            walls[m.group(2)] = int(m.group(1))
            continue
        m = re.match(r"an? (?:(?:open|closed|locked) )?(\w+) (key|ball|box|door) (.*)$", line)
        if not m:
            continue
        side, ahead = 0, 0
        for n, word in re.findall(r"(\d+) steps? (left|right|forward)", m.group(3)):
            if word == "left":
                side = -int(n)
            elif word == "right":
                side = int(n)
            else:
                ahead = int(n)
        objects.append((m.group(1), m.group(2), side, ahead))
    return objects, walls, carrying, done


def _new_world():
    """The agent's pose and what it has seen, updated from every view a primitive returns. The frame is fixed
    at the start of the call: the agent starts at (0, 0) facing north (0, -1); x grows to the right, y
    backwards. (Its methods are not library functions, so the many small calls are not traced.)"""
    step = ((0, -1), (1, 0), (0, 1), (-1, 0))
    actions = {"turn_left": turn_left, "turn_right": turn_right, "go_forward": go_forward,
               "pick_up": pick_up, "drop": drop, "toggle": toggle}

    class World:
        def __init__(self):
            self.x, self.y, self.d = 0, 0, 0
            self.objects = {}  # (x, y) -> (colour, kind)
            self.seen = set()
            self.bounds = {}  # min_x / max_x / min_y / max_y -> the coordinate of a wall line seen
            self.carrying, self.done, self.view, self.actions = None, False, "", 0

        def to_abs(self, side, ahead):
            (fx, fy), (rx, ry) = step[self.d], step[(self.d + 1) % 4]
            return self.x + ahead * fx + side * rx, self.y + ahead * fy + side * ry

        def front(self):
            fx, fy = step[self.d]
            return self.x + fx, self.y + fy

        def inside(self, cell):
            """False on or beyond a wall line seen so far (the room is one rectangle)."""
            b = self.bounds
            return (b.get("min_x", -99) < cell[0] < b.get("max_x", 99)
                    and b.get("min_y", -99) < cell[1] < b.get("max_y", 99))

        def free(self, cell):
            return self.inside(cell) and cell not in self.objects

        @staticmethod
        def matches(obj, colour, kind):
            """Whether a (colour, kind) pair, or None, fits the description (colour None: any colour)."""
            return obj is not None and obj[1] == kind and (colour is None or obj[0] == colour)

        def update(self, text):
            """Walls bound the room, reported objects are placed, and cells in view with nothing reported
            on them are empty."""
            self.view = text
            objects, walls, carrying, done = _read_view(text)
            self.carrying, self.done = carrying, self.done or done
            for direction, dist in walls.items():
                side, ahead = {"forward": (0, dist), "left": (-dist, 0), "right": (dist, 0)}[direction]
                x, y = self.to_abs(side, ahead)
                dx, dy = step[(self.d + {"forward": 0, "right": 1, "left": 3}[direction]) % 4]
                if dx:
                    self.bounds["max_x" if dx > 0 else "min_x"] = x
                else:
                    self.bounds["max_y" if dy > 0 else "min_y"] = y
            cone = {self.to_abs(s, a) for s in range(-3, 4) for a in range(0, 7)} - {(self.x, self.y)}
            cone = {c for c in cone if self.inside(c)}
            for cell in cone:
                self.objects.pop(cell, None)
            self.seen |= cone
            for colour, kind, side, ahead in objects:
                self.objects[self.to_abs(side, ahead)] = (colour, kind)

        def act(self, name):
            """Issue one primitive, track the pose, and read the view it returns."""
            self.actions += 1
            moves = name == "go_forward" and self.free(self.front())  # the last view said the cell was free
            text = actions[name]()
            if name == "turn_left":
                self.d = (self.d - 1) % 4
            elif name == "turn_right":
                self.d = (self.d + 1) % 4
            elif moves:
                self.x, self.y = self.front()
            self.update(text)
            return text

    return World()


def _plan(w, goal_cells):
    """Shortest list of primitives that ends facing one of `goal_cells`, over cells not known to be
    blocked; None when there is none."""
    step = ((0, -1), (1, 0), (0, 1), (-1, 0))
    start = (w.x, w.y, w.d)
    frontier, came = [start], {start: None}
    while frontier:
        nxt = []
        for state in frontier:
            x, y, d = state
            fx, fy = step[d]
            if (x + fx, y + fy) in goal_cells:
                path = []
                while came[state] is not None:
                    state, action = came[state]
                    path.append(action)
                return path[::-1]
            for action, new in (("turn_left", (x, y, (d - 1) % 4)), ("turn_right", (x, y, (d + 1) % 4)),
                                ("go_forward", (x + fx, y + fy, d))):
                if action == "go_forward" and not w.free((x + fx, y + fy)):
                    continue
                if new not in came and abs(new[0]) < 16 and abs(new[1]) < 16:
                    came[new] = (state, action)
                    nxt.append(new)
        frontier = nxt
    return None


def _explore_step(w):
    """One move toward cells not yet in view (the object sought is not among those seen)."""
    unseen = {(x, y) for x in range(w.x - 8, w.x + 9) for y in range(w.y - 8, w.y + 9)
              if w.inside((x, y)) and (x, y) not in w.seen and (x, y) not in w.objects}
    if not unseen:
        w.seen = set()  # everything was in view once: look again
        return w.act("turn_left")
    path = _plan(w, unseen)
    return w.act(path[0] if path else "turn_left")


def _go_next_to(w, colour, kind, max_actions=90):
    """Walk until an object matching (colour, kind) is directly in front, exploring while none is known;
    True when it is."""
    start = w.actions
    while w.actions - start < max_actions and not w.done:
        if w.matches(w.objects.get(w.front()), colour, kind):
            return True
        targets = sorted((c for c, o in w.objects.items() if w.matches(o, colour, kind)),
                         key=lambda c: abs(c[0] - w.x) + abs(c[1] - w.y))
        path = _plan(w, set(targets)) if targets else None
        if path:
            w.act(path[0])
        else:
            _explore_step(w)
    return w.matches(w.objects.get(w.front()), colour, kind)


def _pick_up_object(w, colour, kind):
    """Go to an object matching (colour, kind) and pick it up; True when carrying it."""
    if w.matches(w.carrying, colour, kind):
        return True
    if w.carrying is not None:  # one object at a time: put the other one down on a free cell
        for _ in range(4):
            if w.free(w.front()):
                w.act("drop")
                break
            w.act("turn_left")
    if not _go_next_to(w, colour, kind):
        return False
    w.act("pick_up")
    return w.matches(w.carrying, colour, kind)


def solve_mission(mission: str) -> str:
    """Carry out a whole BabyAI mission, e.g. solve_mission("pick up the red ball, then go to the blue key")
    or solve_mission("go to the blue key after you pick up the red ball"): pass the mission text. It walks,
    explores and picks up by itself. Returns "Mission complete." when the mission is done, otherwise what
    went wrong and the current view."""
    goals = _parse_mission(mission)
    if not goals:
        return (f"Could not read a mission in {mission!r}; pass the mission text, for example "
                "solve_mission(\"pick up the red ball, then go to the blue key\").")
    w = _new_world()
    w.act("turn_left")  # a first view (only primitives return views), and a look to the left
    w.act("turn_right")
    for verb, colour, kind in goals:
        ok = _pick_up_object(w, colour, kind) if verb == "pick" else _go_next_to(w, colour, kind)
        if w.done:
            break
        if not ok:
            what = f"{colour + ' ' if colour else ''}{kind}"
            return f"Could not {'pick up' if verb == 'pick' else 'go to'} the {what}.\n{w.view}"
    if w.done:
        return "Mission complete."
    return "Finished the steps, but the mission is not reported complete.\n" + w.view
