# Hand-written reference library for Crafter (the `reference` method's positive control). It calls only the
# game's primitives (move_north/south/east/west, do, sleep, noop, place_*, make_*, get_current_observation)
# and reads only the text view get_current_observation() returns (or, with the benchmark's observe:
# every_step, the view each action returns). Public: play_step; the functions whose names start with an
# underscore are private helpers. A library is its top-level functions only (no module-level code): each
# helper keeps its own constants. Nothing is remembered between calls (each call runs in a fresh process):
# every decision is made from the view, so the actor can call play_step() again and again.
#
# What it pursues, in order: survival first (hit an adjacent zombie or skeleton, sleep when energy is low,
# drink and eat when low), then the tech tree: wood, a table, a wood pickaxe and sword, stone, placing a
# stone, a stone pickaxe and sword, a furnace, coal, iron; on the way: saplings, drinking, a cow, zombies.


def _parse(text):
    """The view as a dict: step, health/food/drink/energy, asleep, inventory {item: n}, facing (dx, dy),
    front (what is directly in front), things {kind: [(dx, dy), ...]} nearest first, truncated {kind}, dead."""
    import re

    text = str(text or "")
    v = {"step": 0, "health": 9, "food": 9, "drink": 9, "energy": 9, "asleep": False, "inventory": {},
         "facing": (0, 1), "front": "grass", "things": {}, "truncated": set(), "dead": "You died" in text,
         "night": "It is night" in text}
    m = re.search(r"Step (\d+) of", text)
    if m:
        v["step"] = int(m.group(1))
    for k in ("health", "food", "drink", "energy"):
        m = re.search(rf"{k} (\d+)/9", text)
        if m:
            v[k] = int(m.group(1))
    v["asleep"] = "you are asleep" in text
    m = re.search(r"Inventory: (.*)\.", text)
    if m and m.group(1) != "empty":
        for part in m.group(1).split(", "):
            name, _, n = part.rpartition(" ")
            if n.isdigit():
                v["inventory"][name] = int(n)
    m = re.search(r"Facing (\w+); directly in front of you: (.*)\.", text)
    if m:
        v["facing"] = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}[m.group(1)]
        v["front"] = m.group(2)
    for line in text.splitlines():
        m = re.match(r"- ([\w ()]+?): (.*)$", line.strip())
        if not m or m.group(1) == "only grass":
            continue
        kind, rest = m.group(1), m.group(2)
        if "more)" in rest:
            v["truncated"].add(kind)
        spots = []
        for off in re.sub(r"\(\+\d+ more\)", "", rest).split(","):
            dx = dy = 0
            for n, d in re.findall(r"(\d+)([NSEW])", off):
                n = int(n)
                dx += n if d == "E" else -n if d == "W" else 0
                dy += n if d == "S" else -n if d == "N" else 0
            if dx or dy:
                spots.append((dx, dy))
        v["things"][kind] = spots
    return v


def _new_player():
    """Acts and reads the view, counting the primitives of this call (the sandbox allows 200 per call)."""
    moves = {(0, -1): move_north, (0, 1): move_south, (1, 0): move_east, (-1, 0): move_west}
    actions = {"do": do, "sleep": sleep, "noop": noop, "place_stone": place_stone, "place_table": place_table,
               "place_furnace": place_furnace, "place_plant": place_plant,
               "make_wood_pickaxe": make_wood_pickaxe, "make_stone_pickaxe": make_stone_pickaxe,
               "make_iron_pickaxe": make_iron_pickaxe, "make_wood_sword": make_wood_sword,
               "make_stone_sword": make_stone_sword, "make_iron_sword": make_iron_sword}

    class Player:
        def __init__(self, budget):
            self.budget, self.used, self.actions = budget, 0, 0
            self.view = _parse(self.read())

        def read(self):
            self.used += 1
            self.text = str(get_current_observation())
            return self.text

        def left(self):
            return self.budget - self.used

        def act(self, name):
            """One game action (a name, or a direction (dx, dy) to move), then the view after it."""
            fn = moves[name] if isinstance(name, tuple) else actions[name]
            self.used += 1
            self.actions += 1
            out = fn()
            if isinstance(out, str) and "<<OBSERVATION_BEGIN>>" in out:  # observe: every_step
                self.text = out
            else:  # D.2/D.3: actions return None; read the world
                self.read()
            self.view = _parse(self.text)
            return self.view

    return Player


def _blocked(view):
    """Cells (dx, dy) a move cannot enter, or must not (lava kills): everything listed but sand and path."""
    out = set()
    for kind, spots in view["things"].items():
        if kind not in ("sand", "path"):
            out.update(spots)
    return out


def _route(view, targets, adjacent=True):
    """The first move (dx, dy) of a shortest path over the 9x9 view to a cell next to one of `targets`
    (adjacent=True) or onto one (False); None when no path is known. Unlisted cells are grass."""
    blocked = _blocked(view)
    goals = set()
    for tx, ty in targets:
        if adjacent:
            goals.update({(tx + 1, ty), (tx - 1, ty), (tx, ty + 1), (tx, ty - 1)})
        else:
            goals.add((tx, ty))
    goals = {g for g in goals if g == (0, 0) or g not in blocked}
    if (0, 0) in goals:
        return (0, 0)
    start, frontier, first = (0, 0), [(0, 0)], {(0, 0): None}
    while frontier:
        nxt = []
        for x, y in frontier:
            for d in ((0, -1), (1, 0), (0, 1), (-1, 0)):
                c = (x + d[0], y + d[1])
                if c in first or c in blocked or max(abs(c[0]), abs(c[1])) > 4:
                    continue
                first[c] = first[(x, y)] or d
                if c in goals:
                    return first[c]
                nxt.append(c)
        frontier = nxt
    return None


def _face(p, target):
    """Turn toward an adjacent `target` cell (a move into a blocked cell only turns); True when facing it."""
    if p.view["facing"] == target:
        return True
    p.act(target)
    return p.view["facing"] == target


def _explore(p):
    """One move toward what is needed but not in reach: each direction is scored by the things in view on
    its side (water and the sand that borders it when thirsty, open grass where cows graze when hungry,
    trees for wood, stone for stone), plus a standing heading that turns every 40 steps. A tree or (with a
    pickaxe) a stone in the way is collected; a free cell is walked into."""
    v, things, inv = p.view, p.view["things"], p.view["inventory"]
    wish = {"water": 6 if v["drink"] <= 5 else 1, "sand": 2 if v["drink"] <= 5 else 0,
            "cow": 4 if v["food"] <= 5 else 1, "tree": 3 if inv.get("wood", 0) < 5 else 0,
            "stone": 2 if inv.get("wood_pickaxe") and inv.get("stone", 0) < 9 else 0,
            "coal": 2 if inv.get("wood_pickaxe") else 0, "iron": 3 if inv.get("stone_pickaxe") else 0,
            "zombie": -3, "lava": -5, "skeleton": -4}
    headings = ((1, 0), (0, -1), (-1, 0), (0, 1))
    standing = headings[(v["step"] // 40) % 4]
    grass = 81 - sum(len(spots) for spots in things.values())
    score = {}
    for d in headings:
        total = 2.0 if d == standing else 0.0
        for kind, spots in things.items():
            w = wish.get(kind, 0)
            total += w * sum(1 for x, y in spots if x * d[0] + y * d[1] > 0) / max(1, len(spots)) ** 0.5
        if v["food"] <= 5 and grass > 40:
            total += 1.0 if d != (0, 0) else 0.0
        score[d] = total
    blocked = _blocked(v)
    for d in sorted(headings, key=lambda d: -score[d]):
        if d not in blocked:
            p.act(d)
            return
        if d in things.get("tree", []) or (d in things.get("stone", []) and inv.get("wood_pickaxe")):
            _face(p, d)
            p.act("do")
            return
    p.act("noop")


def _go_and_do(p, kind, times=1):
    """Walk next to the nearest `kind` in view, face it and `do` on it `times` times; True if it was reached.
    Creatures move, so the route is replanned after every step."""
    for _ in range(30):
        if p.left() < 3 or (kind != "zombie" and _threat(p.view)):
            return True  # out of primitives, or a foe to deal with first: back to the caller's next decision
        spots = p.view["things"].get(kind)
        if not spots:
            return False
        near = [s for s in spots if abs(s[0]) + abs(s[1]) == 1]
        if near:
            if _face(p, near[0]) and p.left() >= 2:
                for _ in range(times):
                    if p.left() < 2:
                        break
                    p.act("do")
            return True
        step = _route(p.view, spots)
        if step is None or step == (0, 0):
            return False
        p.act(step)
    return False


def _free_front(p):
    """Make the cell in front placeable (grass, sand or path, nothing on it); True when it is."""
    for _ in range(4):
        if p.view["front"] in ("grass", "sand", "path"):
            return True
        blocked = _blocked(p.view)
        free = [d for d in ((0, -1), (1, 0), (0, 1), (-1, 0)) if d not in blocked]
        if not free or p.left() < 2:
            return False
        p.act(free[0])  # moves there and faces on: the next cell may be free
    return p.view["front"] in ("grass", "sand", "path")


def _near(view, kind):
    """Whether `kind` is within one cell (diagonals too): what crafting needs of a table or furnace."""
    return any(max(abs(dx), abs(dy)) <= 1 for dx, dy in view["things"].get(kind, []))


def _walls(view):
    """Cells no zombie can enter and none will leave: everything listed but sand, path and creatures; with a
    skeleton in view not water or lava either (its arrows fly over them)."""
    open_kinds = ["sand", "path", "cow", "zombie", "skeleton", "arrow"]
    if "skeleton" in view["things"]:
        open_kinds += ["water", "lava"]
    return {c for kind, spots in view["things"].items() if kind not in open_kinds for c in spots}


def _threat(view):
    """A zombie, skeleton or arrow next to the player: whatever a long routine is doing, stop and fight."""
    return any(abs(x) + abs(y) <= 1 for kind in ("zombie", "skeleton", "arrow")
               for x, y in view["things"].get(kind, []))


def _dark(view):
    """Night or its approach: zombies come in numbers on grass. Crafter's daylight follows the step:
    1 - |cos(pi * (step / 300 % 1 + 0.3))| ** 3, below 0.5 for steps 148..272 of every 300 (the pocket is
    built a little before and left a little before its end, to drink and eat)."""
    return 140 <= view["step"] % 300 < 268


def _pocket(p):
    """Whether the player is walled in: all four cells around are walls, or three are and the fourth is a
    free cell whose other three are walls (a two-cell pocket; checked by stepping in, since cells two away
    may be left out of the view's list)."""
    d4 = ((0, -1), (1, 0), (0, 1), (-1, 0))
    free = [d for d in d4 if d not in _walls(p.view)]
    if not free:
        return True
    if len(free) != 1 or free[0] in _blocked(p.view):
        return False
    if p.pocket:
        return True
    if p.probes >= 3:  # a nook, not a pocket, seen often enough this call
        return False
    p.probes += 1
    f = free[0]
    p.act(f)
    p.pocket = [d for d in d4 if d not in _walls(p.view)] == [(-f[0], -f[1])]
    return p.pocket


def _place_wall(p):
    """A stone in front, or a table when there is no stone (it takes wood, and no zombie walks through it)."""
    p.act("place_stone" if p.view["inventory"].get("stone", 0) >= 1 else "place_table")


def _build_pocket(p):
    """Wall the player into a two-cell pocket with stones for the night: the player's cell X and a free
    neighbour Y. A stone goes only on the cell in front, and the player faces a free cell only by having
    just stepped toward it, so each wall is placed from outside (walk to two cells short of it, step toward
    it, place) and the last one, the entrance beside X, from inside (enter, step to Y, step back to X, place).
    True when sealed."""
    d4 = ((0, -1), (1, 0), (0, 1), (-1, 0))
    walls, blocked = _walls(p.view), _blocked(p.view)
    best = None
    for b in d4:
        y, a = b, (-b[0], -b[1])  # the second cell; the entrance
        if y in blocked or (a in blocked and a not in walls):
            continue
        side = (b[1], b[0])
        cells = [side, (-side[0], -side[1]), (y[0] + side[0], y[1] + side[1]), (y[0] - side[0], y[1] - side[1]),
                 (2 * y[0], 2 * y[1])]
        need = [c for c in cells if c not in walls]
        cost = len(need) + (a not in walls)
        if best is None or cost < best[0]:
            best = (cost, b, need, a)
    inv = p.view["inventory"]
    if best is None or inv.get("stone", 0) + inv.get("wood", 0) // 2 < best[0]:  # tables are walls too
        return False
    _, b, need, entrance = best
    pos = [0, 0]  # the player, in the frame the pocket was planned in (X = (0, 0))

    def rel(c):
        return (c[0] - pos[0], c[1] - pos[1])

    def move(d):
        if d not in _blocked(p.view):
            pos[0] += d[0]
            pos[1] += d[1]
        p.act(d)

    def walk_to(c):
        for _ in range(16):
            if p.left() < 6 or _threat(p.view):
                return False
            step = _route(p.view, [rel(c)], adjacent=False)
            if step == (0, 0):
                return True
            if step is None:
                return False
            move(step)
        return False

    def place(c):
        """A stone on frame cell c, approached from whichever side is open; True when c is a wall."""
        if rel(c) in _walls(p.view):
            return True
        for d in sorted(d4, key=lambda d: abs(rel(c)[0] - 2 * d[0]) + abs(rel(c)[1] - 2 * d[1])):
            stand, start = (c[0] - d[0], c[1] - d[1]), (c[0] - 2 * d[0], c[1] - 2 * d[1])
            if rel(stand) in _blocked(p.view) or rel(start) in _blocked(p.view) or not walk_to(start):
                continue
            move(d)
            if _threat(p.view):
                return False
            if tuple(pos) == stand and p.view["front"] in ("grass", "sand", "path"):
                _place_wall(p)
            if rel(c) in _walls(p.view):
                return True
        return False

    for c in need:
        if not place(c):
            return False
    if p.left() < 10 or not walk_to(entrance):
        return False
    for d in (b, b, (-b[0], -b[1])):  # in to X, on to Y, back to X facing the entrance
        move(d)
    if tuple(pos) != (0, 0):
        return False
    if p.view["front"] in ("grass", "sand", "path"):
        _place_wall(p)
    p.pocket = False
    return _pocket(p)


def _dig_shelter(p):
    """For the night without stones to build with: tunnel into stone, then step back toward the entrance and
    seal it with the stone just mined (a pocket of the two innermost cells). True when walled in."""
    stones = [s for s in p.view["things"].get("stone", []) if abs(s[0]) + abs(s[1]) == 1]
    if not stones:
        return _go_and_do(p, "stone", times=0) and False
    d = stones[0]
    for depth in range(3):  # into the stone: mine the cell ahead, step in, look at its sides
        if p.left() < 8 or _threat(p.view):
            return False
        _face(p, d)
        if p.view["front"] != "stone":
            return False
        p.act("do")
        p.act(d)
        side = {(d[1], d[0]), (-d[1], -d[0])}
        if depth >= 1 and side <= _walls(p.view) and d in _walls(p.view):
            break
    else:
        return False
    p.act((-d[0], -d[1]))  # one cell back toward the entrance, facing it
    if p.view["front"] in ("grass", "sand", "path") and p.view["inventory"].get("stone", 0) >= 1:
        p.act("place_stone")
    p.pocket = False
    return _pocket(p)


def _meet(p, zombie):
    """A zombie two or three cells away: it walks to the player and strikes first when it arrives, so do not
    walk into it; with health to spare wait for it, else step away from it."""
    zx, zy = zombie
    if p.view["health"] >= 5:
        toward = (0 if zx == 0 else (1 if zx > 0 else -1), 0) if abs(zx) >= abs(zy) else (0, 1 if zy > 0 else -1)
        if toward in _blocked(p.view):  # turning toward it costs nothing when the cell there is taken
            return _face(p, toward)
        return p.act("noop")
    return _step_away(p, zombie)


def _step_away(p, foe):
    """One step that puts the most distance between the player and `foe` (dx, dy)."""
    blocked = _blocked(p.view)
    away = [d for d in ((0, -1), (1, 0), (0, 1), (-1, 0)) if d not in blocked]
    if not away:
        return p.act("noop")
    return p.act(max(away, key=lambda d: abs(d[0] - foe[0]) + abs(d[1] - foe[1])))


def _tick(p):
    """One decision from the view: the most urgent need, else the next step of the tech tree."""
    v, inv = p.view, p.view["inventory"]
    things = v["things"]
    if v["asleep"]:
        return p.act("noop")  # sleeping until energy is full (wake_up); a hit wakes the player
    for foe in ("zombie", "skeleton"):
        close = [s for s in things.get(foe, []) if abs(s[0]) + abs(s[1]) == 1]
        if close:
            _face(p, close[0])
            return p.act("do")
    if _dark(v):  # the night: in a pocket, sleep (wake_up) or wait; else build or dig one
        if _pocket(p):
            return p.act("sleep" if p.view["energy"] < 9 else "noop")
        archers = sorted(things.get("skeleton", []), key=lambda c: abs(c[0]) + abs(c[1]))
        if archers and abs(archers[0][0]) + abs(archers[0][1]) <= 5:  # no wall holds against arrows over
            return _step_away(p, archers[0])  # water: first get away from the caves' skeletons
        if inv.get("stone", 0) + inv.get("wood", 0) // 2 >= 3 and p.left() < 120:
            p.stop = True  # too few primitives left in this call to build: the next call starts with 200
            return None
        if _build_pocket(p) or (inv.get("wood_pickaxe") and "stone" in things and p.left() >= 12
                                and _dig_shelter(p)):
            return p.act("sleep")
        v, inv, things = p.view, p.view["inventory"], p.view["things"]
    coming = [s for s in things.get("zombie", []) if abs(s[0]) + abs(s[1]) <= 3]
    if coming:
        return _meet(p, coming[0])
    if v["energy"] <= 1:
        return p.act("sleep")
    evening = 90 <= v["step"] % 300 < 140  # top up before a night in the pocket
    if (v["drink"] <= 6 or (evening and v["drink"] < 9)) and "water" in things:
        return _go_and_do(p, "water", times=9 - v["drink"])
    if (v["food"] <= 6 or (evening and v["food"] < 8)) and "cow" in things:
        return _go_and_do(p, "cow", times=3)
    wood, stone = inv.get("wood", 0), inv.get("stone", 0)
    table_near = _near(v, "table")
    wants = []  # (what to make, the table or furnace it needs, the wood and stone it uses)
    if not inv.get("wood_pickaxe"):
        wants.append(("make_wood_pickaxe", 1, 0))
    if not inv.get("wood_sword"):
        wants.append(("make_wood_sword", 1, 0))
    if inv.get("wood_pickaxe") and not inv.get("stone_pickaxe"):
        wants.append(("make_stone_pickaxe", 1, 1))
    if inv.get("wood_pickaxe") and not inv.get("stone_sword"):
        wants.append(("make_stone_sword", 1, 1))
    for make, need_wood, need_stone in wants:
        if table_near and wood >= need_wood and stone >= need_stone:
            return p.act(make)
    if inv.get("sapling") and v["front"] == "grass":
        return p.act("place_plant")
    if stone >= 9 and "furnace" not in things and (table_near or "table" in things):  # stones to spare
        if not table_near:
            return _go_and_do(p, "table", times=0)
        if _free_front(p):
            return p.act("place_furnace")
    if wants and "table" in things and not table_near and any(wood >= w and stone >= s for _, w, s in wants):
        return _go_and_do(p, "table", times=0)
    if wants and "table" not in things and wood >= 4:  # a table here (a new one if the old is out of view)
        if _free_front(p):
            return p.act("place_table")
    if "zombie" in things and v["health"] >= 6:
        return _go_and_do(p, "zombie", times=2)
    if inv.get("wood_pickaxe"):
        for kind, enough in (("coal", 2), ("stone", 9)):  # stones for tools, a furnace and a night's walls
            if kind in things and inv.get(kind, 0) < enough:
                return _go_and_do(p, kind, times=1)
        if inv.get("stone_pickaxe") and "iron" in things:
            return _go_and_do(p, "iron", times=1)
    if wood < 5 and "tree" in things:
        return _go_and_do(p, "tree", times=3)
    if stone >= 1 and "place_stone" not in p.done and _free_front(p):
        p.done.add("place_stone")  # once a call: place a stone and mine it back (the stone is not lost)
        p.act("place_stone")
        return p.act("do")
    if "water" in things and v["drink"] < 9:
        return _go_and_do(p, "water", times=9 - v["drink"])
    if "cow" in things and v["food"] < 9:
        return _go_and_do(p, "cow", times=3)
    if v["front"] == "grass" and v["step"] % 7 == 0:
        return p.act("do")  # a sapling, one time in ten
    return _explore(p)


def play_step() -> str:
    """Play Crafter for up to about 90 actions, then report: survive (fight, sleep, drink, eat) and climb the
    tech tree (wood, table, wood pickaxe and sword, stone, stone pickaxe and sword, furnace, coal, iron) on
    its own. Takes no argument; call it again to go on playing. Returns what it did and the view now."""
    Player = _new_player()
    p = Player(196)
    p.done, p.pocket, p.stop, p.probes = set(), False, False, 0
    start_step, start_inv = p.view["step"], dict(p.view["inventory"])
    while p.left() >= 6 and not p.view["dead"] and not p.stop:
        before = p.used
        _tick(p)
        if p.used == before and not p.stop:  # a decision that issued nothing: move on
            _explore(p)
    gained = {k: n - start_inv.get(k, 0) for k, n in p.view["inventory"].items() if n > start_inv.get(k, 0)}
    gain = ", ".join(f"{k} +{n}" for k, n in gained.items()) or "nothing new"
    return (f"Played {p.actions} actions (steps {start_step} to {p.view['step']}); inventory gained: {gain}.\n"
            + p.text)
