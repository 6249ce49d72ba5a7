"""SkillScaffold's two benchmarks that cannot be installed offline, read from data the user supplies
(seed 002, appendix A.1): WebShop goals with the category split, and tau2-bench tasks per domain.

Only the data side is here: the goals and tasks as typed records, and the splits the paper trains and
evaluates on. Playing them needs WebShop's search server and tau2-bench's user simulator, neither of
which is on PyPI; no environment wrapper is claimed.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

# ----------------------------------------------------------------------------------------------------
# WebShop (Yao et al., 2022): data/items_shuffle*.json (products), data/items_human_ins.json (goals)

WEBSHOP_SHUFFLE_SEED = 233  # WebShop's SimServer shuffles its goal list with random.seed(233)
WEBSHOP_TEST, WEBSHOP_DEV = range(0, 500), range(500, 1500)  # original goal indices; train: 1,500 onward
ID_DOMAINS = ("Apparel", "Electronics", "Footwear", "Other")
OOD_DOMAINS = ("Accessories", "Beauty & Health", "Home Decor")

# Keyword rule for the seven domains (the paper's own keyword lists are not published; these are ours).
# First match wins, in this order, so footwear is tested before apparel ("running shoes" is footwear).
DOMAIN_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Footwear", ("shoe", "sneaker", "boot", "sandal", "slipper", "loafer", "heel", "flip flop", "clog", "oxford")),
    ("Electronics", ("charger", "cable", "headphone", "earbud", "speaker", "camera", "laptop", "tablet", "phone",
                     "usb", "hdmi", "bluetooth", "wireless", "battery", "monitor", "keyboard", "mouse", "router",
                     "tv ", "television", "remote", "adapter", "projector", "microphone")),
    ("Beauty & Health", ("shampoo", "conditioner", "lotion", "cream", "serum", "makeup", "lipstick", "mascara",
                         "nail", "perfume", "fragrance", "skin", "hair", "toothbrush", "toothpaste", "vitamin",
                         "supplement", "deodorant", "moisturizer", "sunscreen", "eyeshadow", "foundation")),
    ("Accessories", ("watch band", "wallet", "belt", "sunglasses", "necklace", "bracelet", "earring", "ring ",
                     "handbag", "purse", "backpack", "hat", "cap", "scarf", "glove", "jewelry", "keychain")),
    ("Home Decor", ("curtain", "rug", "pillow", "cushion", "blanket", "lamp", "wall art", "canvas", "vase", "candle",
                    "mirror", "bedding", "duvet", "sheet set", "furniture", "shelf", "table", "chair", "sofa",
                    "decor", "tapestry", "ottoman")),
    ("Apparel", ("shirt", "t-shirt", "dress", "pant", "jean", "short", "skirt", "jacket", "coat", "hoodie",
                 "sweater", "sweatshirt", "legging", "blouse", "top", "bra", "underwear", "sock", "pajama", "swimsuit",
                 "bikini", "jumpsuit", "romper", "vest", "tank", "polo", "cardigan")),
)


def webshop_domain(instruction: str) -> str:
    """The domain of a goal instruction by the keyword rule; Other when no keyword matches."""
    text = " " + " ".join(re.findall(r"[a-z0-9&-]+", instruction.lower())) + " "
    for domain, words in DOMAIN_KEYWORDS:
        if any(re.search(r"\b" + re.escape(w.strip()) + r"s?\b", text) for w in words):
            return domain
    return "Other"


@dataclass(frozen=True)
class WebShopGoal:
    index: int  # position in WebShop's shuffled goal list (what "goal index" means in its code and papers)
    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    domain: str

    @property
    def pool(self) -> str:
        """test | dev | train by WebShop's own index ranges."""
        return "test" if self.index in WEBSHOP_TEST else "dev" if self.index in WEBSHOP_DEV else "train"


def load_webshop_goals(data_dir: str | Path) -> list[WebShopGoal]:
    """WebShop's human goals in its own order: products in file order (first occurrence of each ASIN),
    each product's human instructions that name at least one attribute, then the shuffle WebShop applies."""
    d = Path(data_dir)
    products_file = next((d / n for n in ("items_shuffle.json", "items_shuffle_1000.json") if (d / n).is_file()), None)
    human_file = d / "items_human_ins.json"
    if products_file is None or not human_file.is_file():
        raise FileNotFoundError(f"WebShop data at {d}: expected items_shuffle.json (or items_shuffle_1000.json) and "
                                "items_human_ins.json, as WebShop's setup.sh downloads them (config key webshop data_path)")
    products = json.loads(products_file.read_text())
    human: dict[str, list[dict[str, Any]]] = json.loads(human_file.read_text())
    goals, seen = [], set()
    for p in products:
        asin = p.get("asin")
        if not asin or asin in seen:
            continue
        seen.add(asin)
        for ins in human.get(asin, []):
            if not ins.get("instruction_attributes"):
                continue  # WebShop drops goals without attributes
            text = ins["instruction"]
            goals.append((asin, text, tuple(ins["instruction_attributes"]), tuple(ins.get("instruction_options") or ())))
    random.Random(WEBSHOP_SHUFFLE_SEED).shuffle(goals)
    return [WebShopGoal(i, a, t, at, op, webshop_domain(t)) for i, (a, t, at, op) in enumerate(goals)]


def webshop_splits(goals: Sequence[WebShopGoal], other_train: int = 1000, other_val: int = 100,
                   seed: int = 0) -> dict[str, list[WebShopGoal]]:
    """Appendix A.1's category-generalization split: train = ID-domain goals from index 1,500 on;
    id_val / ood_val = ID / OOD-domain goals of the validation pool (indices 0-1,499). Other is cut to
    `other_train` / `other_val` goals by a seeded uniform draw (the paper uses farthest-point sampling
    over sentence embeddings; see docs/deviations.md)."""
    rng = random.Random(seed)

    def cap_other(gs: list[WebShopGoal], n: int) -> list[WebShopGoal]:
        other = [g for g in gs if g.domain == "Other"]
        keep = {g.index for g in (rng.sample(other, n) if len(other) > n else other)}
        return [g for g in gs if g.domain != "Other" or g.index in keep]

    train = [g for g in goals if g.pool == "train" and g.domain in ID_DOMAINS]
    val = [g for g in goals if g.pool != "train"]
    return {"train": cap_other(train, other_train),
            "id_val": cap_other([g for g in val if g.domain in ID_DOMAINS], other_val),
            "ood_val": [g for g in val if g.domain in OOD_DOMAINS]}


# ----------------------------------------------------------------------------------------------------
# tau2-bench (Yao et al., 2024): data/tau2/domains/{airline,retail,telecom}/tasks.json + policy.md

TAU2_DOMAINS = ("airline", "retail", "telecom")


@dataclass(frozen=True)
class Tau2Task:
    domain: str
    task_id: str
    instructions: str  # what the simulated user is told (reason, known info, task instructions)
    n_actions: int  # write/read actions the evaluator expects
    policy: str  # the domain policy the agent must follow (policy.md)


def load_tau2_tasks(data_dir: str | Path, domains: Sequence[str] = TAU2_DOMAINS) -> list[Tau2Task]:
    """Every task of the given domains, from tau2-bench's data layout."""
    root = Path(data_dir)
    out = []
    for dom in domains:
        if dom not in TAU2_DOMAINS:
            raise ValueError(f"tau2 domain {dom!r}; known: {', '.join(TAU2_DOMAINS)}")
        folder = root / "domains" / dom
        tasks_file = folder / "tasks.json"
        if not tasks_file.is_file():
            raise FileNotFoundError(f"tau2-bench data at {root}: no domains/{dom}/tasks.json (config key data_path)")
        policy_file = folder / "policy.md"
        policy = policy_file.read_text() if policy_file.is_file() else ""
        for t in json.loads(tasks_file.read_text()):
            if "id" not in t or "user_scenario" not in t:
                raise ValueError(f"{tasks_file}: a task without 'id' or 'user_scenario': {str(t)[:120]}")
            ins = t["user_scenario"].get("instructions", "")
            if isinstance(ins, dict):
                ins = "\n".join(f"{k}: {v}" for k, v in ins.items() if v)
            actions = (t.get("evaluation_criteria") or {}).get("actions") or []
            out.append(Tau2Task(dom, str(t["id"]), str(ins), len(actions), policy))
    return out


def informative_tasks(pass_counts: dict[str, tuple[int, int]]) -> list[str]:
    """Appendix A.1's RL pool filter: keep tasks whose SFT-model pass count (passed, tried) is neither
    all-success nor all-failure, since such groups carry no group-relative learning signal."""
    return [t for t, (k, n) in pass_counts.items() if 0 < k < n]
