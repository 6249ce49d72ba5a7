# Hand-written reference library for ScienceWorld's electricity family (T3: power-component, its renewable
# vs non-renewable variant, test-conductivity and test-conductivity-of-unknown-substances) and classification
# family (T4: find-living-thing, find-non-living-thing, find-plant, find-animal): the `reference` method's
# positive control. It calls only the benchmark's primitives (go, open, look_around, look_at, pick_up,
# put_down, move, connect, activate, deactivate, focus_on, wait, disambiguate, inventory, submit_answer) and reads only the
# text they return. Public: solve_task; the functions whose names start with an underscore are private
# helpers. A library is its top-level functions only (no module-level code): each helper keeps its own
# constants.


def _read_room(text):
    """Parse the last room description in `text`: (room name, object lines, {door target: is open}), or None
    when the text holds no room description."""
    import re

    text = str(text or "")
    starts = [m.start() for m in re.finditer(r"This (?:room|outside location) is called the ", text)]
    if not starts:
        return None
    block = text[starts[-1]:]
    name = re.match(r"This (?:room|outside location) is called the ([^.]+)\.", block).group(1).strip()
    objects, doors, in_doors = [], {}, False
    for line in block.splitlines()[1:]:
        raw = line.strip()
        if not raw:
            continue
        if raw.startswith("You also see"):
            in_doors = True
            continue
        m = re.match(r"A door to the (.+?) \(that is (open|closed)\)", raw)
        if m:
            doors[m.group(1).strip()] = m.group(2) == "open"
            continue
        if not in_doors and line.startswith("\t"):
            objects.append(raw)
    return name, objects, doors


def _new_world():
    """The rooms seen so far and a way to move between them. Rooms are nodes, doors edges; every primitive's
    observation that carries a room description updates them. (Its methods are not library functions, so
    the many small calls are not traced.)"""
    actions = {"go": go, "open": open, "look_around": look_around, "look_at": look_at, "pick_up": pick_up,
               "put_down": put_down, "move": move, "connect": connect, "activate": activate,
               "deactivate": deactivate, "focus_on": focus_on, "wait": wait, "disambiguate": disambiguate}

    class World:
        def __init__(self):
            self.room, self.objects = "", []
            self.doors = {}  # room -> {neighbour: is open}
            self.seen = {}  # room -> its object lines when last seen
            self.visited = set()
            self.last = ""

        def update(self, text):
            parsed = _read_room(text)
            if parsed is None:
                return
            self.room, self.objects, doors = parsed
            self.doors[self.room] = doors
            self.seen[self.room] = list(self.objects)
            self.visited.add(self.room)

        def act(self, name, *args):
            """Issue one primitive; answer the parser's 'Ambiguous request' question with the option in the
            inventory, else in this room, else the first."""
            import re

            text = str(actions[name](*args))
            if "Ambiguous request" in text:
                options = re.findall(r"^\s*(\d+):\s*(.*)$", text, re.M)
                choice = 0
                for key in ("inventory", "in " + self.room):
                    hit = [int(n) for n, o in options if key in o]
                    if hit:
                        choice = hit[0]
                        break
                text = str(disambiguate(choice))
            self.last = text
            self.update(text)
            if name in ("go",) and _read_room(text) is None:  # room_each_step off: read the room ourselves
                self.look()
            return text

        def look(self):
            return self.act("look_around")

        def step_to(self, room):
            """Through the door to an adjacent room; True when there."""
            if not self.doors.get(self.room, {}).get(room, False):
                self.act("open", f"door to {room}")
            self.act("go", room)
            return self.room == room

        def path(self, goal):
            """Shortest known sequence of rooms to `goal` (a room name, or a set of them)."""
            goals = {goal} if isinstance(goal, str) else set(goal)
            frontier, came = [self.room], {self.room: None}
            while frontier:
                nxt = []
                for r in frontier:
                    if r in goals:
                        out = []
                        while came[r] is not None:
                            out.append(r)
                            r = came[r]
                        return out[::-1]
                    for n in self.doors.get(r, {}):
                        if n not in came:
                            came[n] = r
                            nxt.append(n)
                frontier = nxt
            return None

        def go_to(self, room):
            """Walk to `room`, exploring while no known path leads there; True when there."""
            for _ in range(30):
                if self.room == room:
                    return True
                route = self.path(room) or self.path({n for ds in self.doors.values() for n in ds} - self.visited)
                if not route:
                    return False
                if not self.step_to(route[0]):
                    return False
            return self.room == room

        def find(self, test):
            """Visit rooms, nearest unvisited first, until one holds an object line for which `test` gives a
            name; (room, name) or None. Rooms already seen are searched first."""
            for _ in range(30):
                for line in self.objects:
                    name = test(line)
                    if name:
                        return self.room, name
                for room, lines in self.seen.items():
                    if room != self.room and any(test(line) for line in lines):
                        if self.go_to(room):
                            break
                else:
                    unvisited = {n for ds in self.doors.values() for n in ds} - self.visited
                    route = self.path(unvisited) if unvisited else None
                    if not route or not self.step_to(route[0]):
                        return None
            return None

    w = World()
    w.look()
    return w


def _names_in(line, pattern):
    """Every match of regex `pattern` (one group) in an object line, in order."""
    import re

    return [m.group(1) for m in re.finditer(pattern, line)]


def _build_circuit(w, source, device, wires, tested=None):
    """Wire `source` (a battery or generator) to `device` with the given wires, through `tested` when given
    (a thing whose conductivity is being tested sits in series): source anode -> wire 1 -> device cathode,
    device anode -> wire 3 -> tested -> wire 2 -> source cathode (or wire 2 straight to the device)."""
    w.act("connect", f"{source} anode", f"{wires[0]} terminal 1")
    w.act("connect", f"{source} cathode", f"{wires[1]} terminal 1")
    w.act("connect", f"{wires[0]} terminal 2", f"cathode in {device}")
    if tested is None:
        w.act("connect", f"{wires[1]} terminal 2", f"anode in {device}")
        return
    w.act("connect", f"{wires[2]} terminal 2", f"anode in {device}")
    w.act("connect", f"{tested} terminal 1", f"{wires[1]} terminal 2")
    w.act("connect", f"{tested} terminal 2", f"{wires[2]} terminal 1")


def _is_on(w, device):
    """Whether `device` reports that it is on."""
    return f"{device}, which is on" in w.act("look_at", device) or "which is on" in w.last.split("\n\n")[0]


def _power_component(w, task):
    """Turn a device on: focus on it, wire a power source to it (a renewable one outside, a non-renewable
    generator activated), wait, and check it is on."""
    import re

    device = re.search(r"turn on the (.+?) by powering|turn on the (.+?)\.", task)
    device = (device.group(1) or device.group(2)).strip()
    renewable = "using a renewable" in task
    nonrenewable = "nonrenewable" in task or "non-renewable" in task
    found = w.find(lambda line: device if line.startswith(("a " + device, "an " + device, device)) else None)
    if not found:
        return f"Could not find the {device}."
    w.act("focus_on", device)
    everything = " ".join(w.objects)
    wires = sorted(set(_names_in(everything, r"\b(\w+ wire)\b")))
    if renewable:
        kinds = ("solar panel", "wind generator")
    elif nonrenewable:
        kinds = ("nuclear generator", "gas generator", "coal generator", "oil generator")
    else:
        kinds = ("battery",)
    source = next((k for k in kinds if k in everything), None)
    if source is None or len(wires) < 2:
        return f"Could not find a power source ({' or '.join(kinds)}) and two wires beside the {device}."
    wires = wires[:2]
    if renewable:  # sun and wind are outside: carry everything there
        for thing in (device, source, *wires):
            w.act("pick_up", thing)
        if not w.go_to("outside"):
            return "Could not reach the outside to use the renewable source."
        for thing in (device, source, *wires):
            w.act("put_down", thing)
    _build_circuit(w, source, device, wires)
    if nonrenewable:
        w.act("activate", source)
    w.act("wait", 2)
    return "done" if _is_on(w, device) else f"Could not turn the {device} on."


def _conductivity(w, task):
    """Test whether a thing conducts: fetch it (water in a container filled at a sink), focus on it, put it in
    series with a light bulb or buzzer in the room of the answer boxes, and move it into the box the answer
    names."""
    import re

    thing = re.search(r"determine if (.+?) is electrically conductive", task).group(1).strip()
    around = re.search(r"located around the ([^.]+)\.", task)
    yes_box = re.search(r"If it is electrically conductive, place it in the (.+?)\.", task).group(1)
    no_box = re.search(r"If it is electrically nonconductive, place it in the (.+?)\.", task).group(1)
    carried = thing  # what goes into the box: the thing, or for water the container holding it
    if thing == "water":
        containers = ("jug", "glass cup", "cup", "bowl", "pot")

        found = None
        for _ in range(12):
            room_text = " ".join(w.objects)
            cup = next((c for c in containers if f"a {c} (containing nothing)" in room_text), None)
            if "a sink" in room_text and cup:
                found = cup
                break
            unvisited = {n for ds in w.doors.values() for n in ds} - w.visited
            route = w.path(unvisited) if unvisited else None
            if not route or not w.step_to(route[0]):
                break
        if not found:
            return "Could not find a sink with an empty container beside it."
        w.act("move", found, "sink")
        w.act("activate", "sink")
        w.act("deactivate", "sink")
        w.act("pick_up", found)
        w.act("focus_on", f"substance in {found}")
        carried = found
    else:
        if around:
            w.go_to(around.group(1).strip())
        key = thing.split()[-1]
        found = w.find(lambda line: thing if (thing in line or key in line) and "box" not in line else None)
        if not found:
            return f"Could not find the {thing}."
        text = w.act("pick_up", thing)
        if "inventory" not in text:
            w.act("pick_up", key)
        w.act("focus_on", thing)
    if not w.find(lambda line: yes_box if line.startswith("a " + yes_box) else None):
        return f"Could not find the {yes_box}."
    w.act("put_down", carried)
    everything = " ".join(w.objects)
    wires = sorted(set(_names_in(everything, r"\b(\w+ wire)\b")))
    # A device standing on the floor first (the table's bulbs work too).
    floor = [line for line in w.objects if not line.startswith("a table")]
    devices = [d for line in floor for d in _names_in(line, r"^an? ((?:\w+ )?light bulb|electric buzzer)\b")]
    devices += _names_in(everything, r"\b(\w+ light bulb)\b")
    if "battery" not in everything or len(wires) < 3 or not devices:
        return "Could not find a battery, three wires and a light bulb or buzzer."
    _build_circuit(w, "battery", devices[0], wires[:3], tested=thing)
    w.act("wait", 2)
    box = yes_box if _is_on(w, devices[0]) else no_box
    w.act("move", carried, box)
    return "done: moved to the " + box


def _category_test(category):
    """A test of object lines for one of ScienceWorld's classification categories: it gives the name to act
    on, or None. Animals show as eggs, babies or named creatures, plants grow in flower pots."""
    import re

    animals = ("wolf", "crocodile", "dove", "frog", "butterfly", "tortoise", "turtle", "moth", "beaver", "bear",
               "chameleon", "chipmunk", "dragonfly", "elephant", "parrot", "rabbit", "toad", "ant", "bee",
               "spider", "fish", "mouse", "squirrel", "hedgehog", "blue jay", "robin", "cat", "dog")
    lifeless = ("wire", "light bulb", "battery", "switch", "chair", "cup", "book", "shovel", "axe", "thermometer",
                "lighter", "stopwatch", "jug", "pillow", "drawing", "picture", "painting", "bowl", "table", "couch")

    def animal(line):
        m = re.match(r"^an? ((?:baby |adult )?[\w ]+? egg|baby [\w ]+|adult [\w ]+)$", line)
        if m:
            return m.group(1)
        m = re.match(r"^an? ([\w ]+)$", line)
        if m and any(re.search(rf"\b{a}\b", m.group(1)) for a in animals) and "hive" not in m.group(1):
            return m.group(1)
        return None

    def plant(line):
        m = re.match(r"^an? (flower pot \d+) \(containing an? ([\w ]+?) in the \w+ stage", line)
        return f"{m.group(1)}|{m.group(2)}" if m else None  # the pot to carry | the plant to focus on

    def thing(line):
        m = re.match(r"^an? ([\w ]+?)(?:,| \(|\. |$)", line)
        if m and any(m.group(1).endswith(k) for k in lifeless) and "box" not in m.group(1):
            return m.group(1)
        return None

    if category == "animal":
        return animal
    if category == "plant":
        return plant
    if category == "living thing":
        return lambda line: animal(line) or plant(line)
    return thing


def _carried(w):
    """The names of what the inventory holds now."""
    import re

    text = str(inventory())
    listing = text.split("\n\n")[0]
    return [re.sub(r"^(?:an?|the) ", "", line.strip()).split(" (")[0] for line in listing.splitlines()[1:]
            if line.strip()]


def _find_category(w, task):
    """Find a thing of the task's category, focus on it, carry it to the named box and put it in."""
    import re

    m = re.search(r"find a\(n\) ([\w -]+?)\. .*move it to the (.+? box) in the ([^.]+)\.", task)
    if not m:
        return "Could not read the category and the box in the task."
    category, box, box_room = m.group(1).strip(), m.group(2), m.group(3).strip()
    test = _category_test(category)
    if category == "non-living thing":  # plenty of those wherever the box is: no carrying across the house
        w.go_to(box_room)
    found = w.find(test)
    if not found:
        return f"Could not find a {category}."
    carry, _, focus = found[1].partition("|")
    w.act("focus_on", focus or carry)
    if w.room != box_room:
        had = _carried(w)
        w.act("pick_up", carry)
        if not w.go_to(box_room):
            return f"Could not reach the {box_room}."
        if not w.act("move", carry, box).startswith("You move"):
            # What is carried may have a new name by now (an egg hatches on the way): take it from the inventory.
            new = [c for c in _carried(w) if c not in had]
            if len(new) == 1:
                w.act("move", new[0], box)
        return "done: moved to the " + box
    w.act("move", carry, box)
    return "done: moved to the " + box


def _readable(text):
    """Whether `text` holds a task in the words the solvers below read (the environment's own phrasing)."""
    import re

    patterns = {
        "electrically conductive": (r"determine if (.+?) is electrically conductive",
                                    r"If it is electrically conductive, place it in the (.+?)\.",
                                    r"If it is electrically nonconductive, place it in the (.+?)\."),
        "turn on the": (r"turn on the (.+?)(?: by powering|\.)",),
        "find a(n)": (r"find a\(n\) ([\w -]+?)\. .*move it to the (.+? box) in the ([^.]+)\.",),
    }
    return any(marker in text and all(re.search(p, text) for p in pats) for marker, pats in patterns.items())


def solve_task(task: str) -> str:
    """Carry out a whole ScienceWorld electricity or classification task and submit it, e.g.
    solve_task("Your task is to turn on the red light bulb. ...") or solve_task("Your task is to find a(n)
    animal. ..."): pass the task text. It walks between rooms, wires circuits, tests conductivity and sorts
    things by itself. Returns the submission's verdict, or what went wrong (the task is then not submitted)."""
    text = " ".join(str(task).split())
    if not _readable(text):  # a paraphrase, a summary or no text: the environment states the task itself
        text = " ".join(task_description().split())
    w = _new_world()
    if "electrically conductive" in text:
        result = _conductivity(w, text)
    elif "turn on the" in text:
        result = _power_component(w, text)
    elif "find a(n)" in text:
        result = _find_category(w, text)
    else:
        return (f"Could not read a task in {task!r}; pass the task text, for example "
                "solve_task(\"Your task is to turn on the red light bulb. ...\").")
    if not result.startswith("done"):
        return result + "\n" + w.last
    return submit_answer()
