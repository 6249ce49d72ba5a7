"""SkillScaffold's results layout, written here once: the rules build every path from these folders, patterns and
kinds (rules/scaffold/*.smk), and the scripts read an instance, a checkpoint, a cohort evaluation or a held-out
policy back from a path with the kind's `of`, the inverse of its `folder`.

Under SCAFFOLD_RESULTS, one folder per instance (Instance.name): `babyai` holds the validation experiment and the
benchmark's GRPO checkpoints, cohort evaluations and held-out evaluation; `babyai@grp3` holds iteration 3 of chain
grp's training."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from skillrepro.studies.contract import RESULTS, TIMINGS

SCAFFOLD_RESULTS = f"{RESULTS}/scaffold"
SCAFFOLD_TIMINGS = f"{TIMINGS}/scaffold"  # a job's timing, named as its log under logs/scaffold/
# The rules' patterns, which the kinds below fill in. An instance's records (wildcard sbench: Instance.name), a
# utility variant's or chain's within it (svariant); on a benchmark (sbench: its name), a chain's checkpoint k and
# the evaluations of its early cohort; a benchmark's held-out evaluation (hpolicy: HeldoutPolicy.policy).
SC = SCAFFOLD_RESULTS + "/{sbench}"
SCV = SC + "/{svariant}"
SC_CHECKPOINT = SCV + "/grpo/ckpt{k}"
SC_COHORT = SCV + "/cohort/ckpt{k}"
SC_COHORT_CONTROL = SCV + "/cohort_grpo/ckpt{k}"  # played by plain GRPO's checkpoint k
SC_HO = SCAFFOLD_RESULTS + "/{hbench}/heldout"

BASE_POLICY = "base"  # the held-out policy folder of llm.model, checkpoint 0 of every chain
DIRECT_POLICY = "base-skill"  # the one of the base model with scaffold.heldout.skills' card (direct skill prompting)
DIRECT = "direct"  # that policy's chain name in the held-out tables

_CHAIN = r"[a-z](?:[a-z0-9_-]*[a-z_-])?"  # a chain's name: a variant's, never ending in a digit
_INSTANCE = re.compile(rf"(?P<bench>[^/@]+)(?:@(?P<chain>{_CHAIN})(?P<k>\d+))?")


def _search(pattern: str, path: str | PurePath, kind: str) -> re.Match:
    # the last scaffold/ folder the pattern follows: a working directory may have one of its own above results/
    m = re.match(rf"(?:.*/)?scaffold/{pattern}(?:/|$)", PurePath(path).as_posix())
    if not m:
        raise ValueError(f"{path}: not a SkillScaffold {kind} folder")
    return m


@dataclass(frozen=True)
class Instance:
    """What a SkillScaffold job plays: a benchmark's validation experiment (`babyai`), or training iteration
    `iteration` of a GRPO chain (`babyai@grp3`)."""

    bench: str
    chain: str | None = None
    iteration: int = 0

    def __post_init__(self) -> None:
        if self.chain is None and self.iteration:
            raise ValueError(f"scaffold instance of {self.bench}: iteration {self.iteration} of no chain")

    @property
    def name(self) -> str:
        """The rules' wildcard sbench."""
        return f"{self.bench}@{self.chain}{self.iteration}" if self.chain else self.bench

    @property
    def folder(self) -> str:
        return SC.format(sbench=self.name)

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint that plays it: its chain's checkpoint k for iteration k > 0 (None: llm.model on the
        shared server, for the validation experiment and every iteration 0)."""
        return Checkpoint(self.bench, self.chain, self.iteration) if self.chain and self.iteration else None

    @classmethod
    def named(cls, name: str) -> Instance:
        """The instance a wildcard sbench names: Instance.name read back."""
        m = _INSTANCE.fullmatch(name)
        if not m:
            raise ValueError(f"scaffold instance {name!r}: expected <benchmark> or <benchmark>@<variant><iteration>")
        return cls(m["bench"], m["chain"], int(m["k"] or 0))

    @classmethod
    def of(cls, path: str | PurePath) -> Instance:
        return cls.named(_search(r"(?P<name>[^/]+)", path, "instance")["name"])


@dataclass(frozen=True)
class Checkpoint:
    """Checkpoint k of a chain's policy on a benchmark, written by GRPO update k (scaffold_grpo_update)."""

    bench: str
    chain: str
    k: int

    @property
    def folder(self) -> str:
        return SC_CHECKPOINT.format(sbench=self.bench, svariant=self.chain, k=self.k)

    @classmethod
    def of(cls, path: str | PurePath) -> Checkpoint:
        m = _search(rf"(?P<bench>[^/@]+)/(?P<chain>{_CHAIN})/grpo/ckpt(?P<k>\d+)", path, "checkpoint")
        return cls(m["bench"], m["chain"], int(m["k"]))


@dataclass(frozen=True)
class CohortEval:
    """Checkpoint k playing a chain's early cohort skill-free (table 4): the chain's own checkpoint, or with
    `control` plain GRPO's checkpoint of the same index."""

    bench: str
    chain: str
    k: int
    control: bool = False

    @property
    def folder(self) -> str:
        return (SC_COHORT_CONTROL if self.control else SC_COHORT).format(sbench=self.bench, svariant=self.chain, k=self.k)

    @classmethod
    def of(cls, path: str | PurePath) -> CohortEval:
        m = _search(rf"(?P<bench>[^/@]+)/(?P<chain>{_CHAIN})/cohort(?P<control>_grpo)?/ckpt(?P<k>\d+)", path,
                    "cohort evaluation")
        return cls(m["bench"], m["chain"], int(m["k"]), bool(m["control"]))


@dataclass(frozen=True)
class HeldoutPolicy:
    """A policy of a benchmark's held-out evaluation: the base model (chain ""), the base model with a card (chain
    DIRECT), or checkpoint k of a chain."""

    bench: str
    chain: str = ""
    k: int = 0

    def __post_init__(self) -> None:
        if (self.k > 0) != (self.chain not in ("", DIRECT)):
            raise ValueError(f"held-out policy of {self.bench}: checkpoint {self.k} of chain {self.chain!r}")

    @property
    def policy(self) -> str:
        """The rules' wildcard hpolicy."""
        return {"": BASE_POLICY, DIRECT: DIRECT_POLICY}.get(self.chain) or f"{self.chain}/ckpt{self.k}"

    @property
    def folder(self) -> str:
        return f"{SC_HO.format(hbench=self.bench)}/{self.policy}"

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint it plays (None: llm.model on the shared server)."""
        return Checkpoint(self.bench, self.chain, self.k) if self.chain not in ("", DIRECT) else None

    @classmethod
    def named(cls, bench: str, policy: str) -> HeldoutPolicy:
        """The policy a wildcard hpolicy names on `bench`: HeldoutPolicy.policy read back."""
        if policy in (BASE_POLICY, DIRECT_POLICY):
            return cls(bench, "" if policy == BASE_POLICY else DIRECT)
        m = re.fullmatch(rf"(?P<chain>{_CHAIN})/ckpt(?P<k>[1-9]\d*)", policy)
        if not m:
            raise ValueError(f"held-out policy {policy!r}: expected {BASE_POLICY}, {DIRECT_POLICY} or <chain>/ckpt<k>")
        return cls(bench, m["chain"], int(m["k"]))

    @classmethod
    def of(cls, path: str | PurePath) -> HeldoutPolicy:
        m = _search(rf"(?P<bench>[^/@]+)/heldout/(?P<policy>{BASE_POLICY}|{DIRECT_POLICY}|{_CHAIN}/ckpt\d+)", path,
                    "held-out policy")
        return cls.named(m["bench"], m["policy"])


LAYOUT = (Instance, Checkpoint, CohortEval, HeldoutPolicy)
