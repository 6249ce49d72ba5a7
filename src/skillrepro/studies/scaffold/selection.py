"""Utility and selection (seed 002, equations 8-10) and table 3's selection ablations.

The pure decisions (`utility`, `select`, `select_with`, `group_kind`) take plain numbers so a test can reach every
branch; `utilities_for_query` and `selection_for_query` apply them to one query's records."""
from __future__ import annotations

import math
import random
import zlib
from typing import Sequence

from skillrepro.studies.scaffold.records import CandidateRecord, SelectionRecord, Trajectory, UtilityRecord


VARIANTS = ("grp", "anc")


def utility(d_success: Sequence[float], d_failure: Sequence[float], variant: str = "grp") -> float:
    """Skill utility of one candidate from its per-Scout differences d(s, tau) = l(s; tau) - l(empty; tau).

    `d_success` / `d_failure` hold d for the successful / failed Scouts, each in sampling order.
    grp (eq. 8): mean over successes if no failure; minus the mean over failures if no success; otherwise
    half the success mean minus half the failure mean, so each outcome class weighs 1/2 whatever its size.
    anc (eq. 9): d on the anchor, the first successful Scout; failures are not used.
    NaN when undefined (no Scout at all, or no success for anc) or when a needed d is not finite.
    """
    s = [float(x) for x in d_success]
    f = [float(x) for x in d_failure]
    if variant == "anc":
        return s[0] if s and math.isfinite(s[0]) else math.nan
    if variant != "grp":
        raise ValueError(f"unknown utility variant {variant!r}; known: {', '.join(VARIANTS)}")
    if not s and not f:
        return math.nan
    if not all(math.isfinite(x) for x in s + f):
        return math.nan
    if not f:
        return sum(s) / len(s)
    if not s:
        return -sum(f) / len(f)
    return 0.5 * sum(s) / len(s) - 0.5 * sum(f) / len(f)


def select(utilities: Sequence[float], valid: Sequence[bool], threshold: float = 0.0) -> int | None:
    """Positive-gated selection (eq. 10): index of the best valid candidate with a finite utility, if that
    utility is above `threshold`; None (stay skill-free) otherwise. Ties go to the earlier candidate."""
    if len(utilities) != len(valid):
        raise ValueError(f"select: {len(utilities)} utilities but {len(valid)} validity flags")
    best: int | None = None
    for j, (u, ok) in enumerate(zip(utilities, valid)):
        if ok and u is not None and math.isfinite(u) and (best is None or u > utilities[best]):
            best = j
    if best is None or not utilities[best] > threshold:
        return None
    return best


SELECTIONS = ("utility", "random", "shuffled")


def select_with(utilities: Sequence[float], valid: Sequence[bool], threshold: float = 0.0, *,
                selection: str = "utility", gate: bool = True, rng: random.Random | None = None,
                ) -> tuple[int | None, list[float]]:
    """Selection with the ablations of table 3; returns (index or None, the utilities paired with the
    candidates as used, which are what the Generator's rewards read).

    utility: eq. 10. shuffled: the eligible candidates' utilities are permuted among them before eq. 10,
    so whether to inject is unchanged (the maximum is) but which card is unrelated to its own utility.
    random: inject when eq. 10 would, but a uniformly drawn eligible card. gate=False: the best eligible
    card is injected even when its utility is not above the threshold."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}; known: {', '.join(SELECTIONS)}")
    thr = threshold if gate else -math.inf
    us = [float(u) for u in utilities]
    eligible = [j for j, (u, ok) in enumerate(zip(us, valid)) if ok and math.isfinite(u)]
    if selection == "utility" or not eligible:
        return select(us, valid, thr), us
    rng = rng or random.Random(0)
    if selection == "shuffled":
        perm = rng.sample(eligible, len(eligible))
        shuffled = list(us)
        for j, k in zip(eligible, perm):
            shuffled[j] = us[k]
        return select(shuffled, valid, thr), shuffled
    return (None if select(us, valid, thr) is None else rng.choice(eligible)), us


def group_kind(outcomes: Sequence[bool]) -> str:
    """all_success | all_failure | mixed, for a non-empty Scout group."""
    if not outcomes:
        raise ValueError("group_kind: empty Scout group")
    n = sum(bool(o) for o in outcomes)
    return "all_success" if n == len(outcomes) else "all_failure" if n == 0 else "mixed"


def utilities_for_query(
    benchmark: str,
    variant: str,
    scouts: Sequence[Trajectory],
    candidates: Sequence[CandidateRecord],
    l_none: dict[str, float],
    l_cand: dict[tuple[int, str], float],
) -> list[UtilityRecord]:
    """U for every candidate of one query. `l_none[episode_id]`, `l_cand[(candidate, episode_id)]`:
    mean log-probs. Candidates with no score (invalid cards are not scored) get NaN."""
    scouts = sorted(scouts, key=lambda t: t.order)
    kind = group_kind([t.success for t in scouts])
    n_s = sum(t.success for t in scouts)
    out = []
    for c in candidates:
        d = {t.episode_id: l_cand.get((c.candidate, t.episode_id), math.nan) - l_none.get(t.episode_id, math.nan)
             for t in scouts}
        u = utility([d[t.episode_id] for t in scouts if t.success],
                    [d[t.episode_id] for t in scouts if not t.success], variant)
        out.append(UtilityRecord(benchmark, variant, c.task_id, c.candidate, kind, n_s, len(scouts) - n_s, u,
                                 c.valid, c.valid and math.isfinite(u)))
    return out


def selection_for_query(benchmark: str, variant: str, scouts: Sequence[Trajectory],
                        candidates: Sequence[CandidateRecord], utils: Sequence[UtilityRecord],
                        threshold: float, selection: str = "utility", gate: bool = True) -> SelectionRecord:
    """The selection of one query under `variant` (a utility variant or an ablation of one); the random
    draws of the ablations are seeded by (benchmark, variant, task) so reruns select the same card."""
    kind = group_kind([t.success for t in scouts])
    n_s = sum(t.success for t in scouts)
    j, us, _ = _select_query(benchmark, variant, scouts[0].task_id, candidates, utils, threshold, selection, gate)
    ok = [c.valid for c in candidates]
    eligible = [u for u, v in zip(us, ok) if v and math.isfinite(u)]
    return SelectionRecord(
        benchmark, variant, scouts[0].task_id, kind, n_s, len(scouts),
        -1 if j is None else candidates[j].candidate,
        math.nan if j is None else us[j],
        max(eligible) if eligible else math.nan, len(eligible),
        "" if j is None else candidates[j].card,
    )


def _select_query(benchmark: str, variant: str, task_id: str, candidates: Sequence[CandidateRecord],
                  utils: Sequence[UtilityRecord], threshold: float, selection: str, gate: bool
                  ) -> tuple[int | None, list[float], list[float]]:
    """`select_with` on one query's cards, with the ablations' random draws seeded by (benchmark, variant, task):
    (the selected index, the cards' scored utilities, the utilities as the selection paired them)."""
    by = {u.candidate: u for u in utils}
    us = [by[c.candidate].utility if c.candidate in by else math.nan for c in candidates]
    rng = random.Random(zlib.crc32(f"{benchmark}/{variant}/{task_id}".encode()))
    j, used = select_with(us, [c.valid for c in candidates], threshold, selection=selection, gate=gate, rng=rng)
    return j, us, used


def paired_utilities(benchmark: str, variant: str, candidates: Sequence[CandidateRecord],
                     utils: Sequence[UtilityRecord], threshold: float, selection: str, gate: bool
                     ) -> list[UtilityRecord]:
    """The utilities as a chain's selection paired them with its cards, which its Generator's rewards read: the
    scored ones, except under `shuffled` (table 3), where each card carries the utility the selection's
    permutation gave it (the same draw as `selection_for_query`'s)."""
    from dataclasses import replace

    if selection != "shuffled":
        return list(utils)
    out = []
    for task in sorted({c.task_id for c in candidates}):
        cs = [c for c in candidates if c.task_id == task]
        us = [u for u in utils if u.task_id == task]
        _, _, used = _select_query(benchmark, variant, task, cs, us, threshold, selection, gate)
        by = {u.candidate: u for u in us}
        out += [replace(by[c.candidate], utility=x) for c, x in zip(cs, used) if c.candidate in by]
    return out
