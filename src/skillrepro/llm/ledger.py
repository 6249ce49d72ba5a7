"""What a run's LLM calls cost, shared by every job of the run (and jobs running at once) through files under
`results/llm/` in the workflow's working directory:

- `responses/`: the response cache (`llm.response_cache`, on by default). Every request this client sends is
  seeded, so a request is its whole body (model, messages, tools, every sampling setting, the seed) with the
  backend: a rerun, a resumed job or an analysis that sends the same request reads the stored reply instead of
  paying for it again. The reply's record says so (`LLMCall.from_cache`), and the run's spend counts it as
  free (the tables still price it: what the method's call costs). Delete the folder
  to ask the servers again (a server that changed behind the same model name is not noticed).
- `spend.jsonl`: the dollar ledger (`llm.max_dollars`, none by default). Before a priced request a job takes
  the ledger's lock, adds up what the run has spent and what requests in flight may still cost, and stops with
  SpendingCapReached if this request's worst case (each byte of the prompt a token at the input price, the
  whole completion cap at the output price) would cross the cap; otherwise it reserves that worst case, and
  settles it with the reply's real cost. A ledger started on a results folder that has records begins with
  their cost. A job killed in mid-request leaves its reservation counted: the request may have been billed.

Raising the cap and rerunning resumes: the cap is an operational setting (no finished job reruns) and the
replies the stopped job already had come from the cache.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from skillrepro.config import Price, prices as price_table
from skillrepro.store import atomic_path, connect

log = logging.getLogger(__name__)

ROOT = Path("results/llm")  # relative: Snakemake runs every job in the workflow's working directory


class SpendingCapReached(RuntimeError):
    """The run's spend with this request's worst case would cross llm.max_dollars. Not an LLMFatalError or an
    LLMRequestError, which some callers turn into an outcome: this one must end the job."""


def request_key(backend: str, request: dict[str, Any]) -> str:
    text = json.dumps({"backend": backend, "request": request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Ledger:
    root: Path
    prices: dict[str, Price]  # model -> its price; a model without one costs nothing
    max_dollars: float | None = None
    cache: bool = True
    # the ledger file as read so far: its length, the settled dollars and the open reservations
    _offset: int = field(default=0, init=False)
    _settled: float = field(default=0.0, init=False)
    _open: dict[str, float] = field(default_factory=dict, init=False)

    @classmethod
    def for_run(cls, config: dict[str, Any], root: Path = ROOT) -> "Ledger":
        """The ledger of the run `config` (checked, defaults filled) describes."""
        llm = config.get("llm") or {}
        return cls(Path(root), price_table(config), llm.get("max_dollars"), bool(llm.get("response_cache", True)))

    # ---------------------------------------------------------------------------------------- responses
    def _response_path(self, key: str) -> Path:
        return self.root / "responses" / key[:2] / f"{key}.json"

    def cached(self, key: str) -> dict[str, Any] | None:
        if not self.cache:
            return None
        try:
            return json.loads(self._response_path(key).read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # a file cut short by a crash elsewhere: ask the server again
            return None

    def keep(self, key: str, response: dict[str, Any]) -> None:
        if self.cache:
            with atomic_path(self._response_path(key)) as tmp:
                tmp.write_text(json.dumps(response, ensure_ascii=False))

    # ---------------------------------------------------------------------------------------- dollars
    def capped(self, model: str) -> bool:
        return self.max_dollars is not None and model in self.prices

    def reserve(self, model: str, role: str, prompt_bytes: int, cap_tokens: int) -> str | None:
        """Check the cap for one request of `model` and reserve its worst case; the reservation's id (None where
        nothing is capped). Raises SpendingCapReached before the request is sent."""
        if not self.capped(model):
            return None
        price = self.prices[model]
        worst = (prompt_bytes * price.input + cap_tokens * price.output) / 1e6
        with self._locked() as f:
            spent = self.spent_locked(f)
            if spent + worst > self.max_dollars:
                raise SpendingCapReached(
                    f"config key llm.max_dollars: the run has spent or reserved ${spent:.4f} of its "
                    f"${self.max_dollars:g}, and this {role} request of {model} may cost up to ${worst:.4f} "
                    f"(ledger {self.root / 'spend.jsonl'}); nothing of this job is kept. Raise llm.max_dollars "
                    f"and rerun: finished jobs are not redone and replies already received come from the cache")
            rid = uuid.uuid4().hex
            self._append(f, {"reserve": rid, "dollars": worst, "model": model, "role": role})
        return rid

    def reserved(self, rid: str) -> float:
        return self._open.get(rid, 0.0)

    def settle(self, rid: str | None, dollars: float) -> None:
        if rid is None:
            return
        with self._locked() as f:
            self.spent_locked(f)
            self._append(f, {"settle": rid, "dollars": dollars})

    def spent(self) -> float:
        """Dollars settled plus those reserved by requests in flight (or killed in flight)."""
        with self._locked() as f:
            return self.spent_locked(f)

    def spent_locked(self, f) -> float:
        f.seek(self._offset)
        for line in f.read().splitlines():
            entry = json.loads(line)
            if "reserve" in entry:
                self._open[entry["reserve"]] = entry["dollars"]
            else:
                self._open.pop(entry.get("settle"), None)
                self._settled += entry["dollars"]
        self._offset = f.tell()
        return self._settled + sum(self._open.values())

    def _append(self, f, entry: dict[str, Any]) -> None:
        f.seek(0, os.SEEK_END)
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())
        self.spent_locked(f)

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        path = self.root / "spend.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # every job of the run, and jobs at once: one reader-writer at a time
            try:
                if f.tell() == 0:  # 'a+' stands at the end: a new ledger
                    self._open_from_records(f)
                yield f
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _open_from_records(self, f) -> None:
        """A new ledger on a results folder that already has records starts with what they cost."""
        results = self.root.parent
        con = connect(results)
        dollars = 0.0
        for model, prompt, cached, completion in con.execute(
                "SELECT model, prompt_tokens, cached_tokens, completion_tokens FROM llm_calls "
                "WHERE NOT coalesce(from_cache, false)").fetchall():
            if model in self.prices:
                dollars += self.prices[model].cost(prompt, cached, completion)
        if dollars:
            log.info("spend ledger started at $%.4f: the cost of the records already under %s", dollars, results)
            f.write(json.dumps({"settle": "records", "dollars": dollars}) + "\n")
            f.flush()
