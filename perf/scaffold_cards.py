"""Format-valid rate of SkillScaffold Generator cards per model and decoding mode, side by side, on the
same evidence records (real Scout evidence written by the `scaffold_evidence` rule).

    python perf/scaffold_cards.py --evidence results/scaffold/babyai/grp/evidence.parquet \
        [--evidence .../anc/evidence.parquet] [--model qwen2.5-coder-0.5b] [--m 4] [--max-tokens 500] \
        [--modes grammar none] [--baseline-template FILE]

Modes: `grammar` (pre-fill + llama.cpp grammar, the default of the pipeline), `json_schema` (--reply json
only), `prompt` (no pre-fill, free decoding: the paper's), `none` (pre-fill, free decoding) and `baseline`: no
pre-fill, no constraint, with --baseline-template (for the pipeline as it was before constrained decoding:
`git show <rev>:src/skillrepro/prompts/scaffold_babyai.txt`). --reply: the reply form (default: the env's, as
the pipeline's scaffold.generator_reply default).
Every card is checked by the same `check_card`. The server is started here unless SKILLREPRO_LLM_URL
names one already serving --model.
"""
from __future__ import annotations

import argparse
import collections
import os
import time
from dataclasses import replace

from skillrepro.config import LLMConfig
from skillrepro.llm import servers
from skillrepro.llm.client import LLMClient
from skillrepro.studies.scaffold.cards import (REPLY_FORMS, GeneratorRequest, GeneratorTemplate, generate_candidates,
                                               generator_request, paper_card, paper_reply)
from skillrepro.studies.scaffold.records import EvidenceRecord, read_rows
from skillrepro.studies.scaffold.rollouts import phase_seed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evidence", action="append", required=True)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--env", default="babyai", help="benchmark env whose generator template is used")
    ap.add_argument("--m", type=int, default=4, help="cards per evidence record")
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--modes", nargs="+", default=["grammar", "none"])
    ap.add_argument("--reply", choices=list(REPLY_FORMS), help="the Generator's reply form (default: the env's)")
    ap.add_argument("--baseline-template")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cfg = LLMConfig(model=a.model, temperature=0.7, seed=0, slots=1, ctx_per_slot=8192, threads=a.threads)
    fmt = replace(paper_card(a.env), reply=a.reply or paper_reply(a.env))
    evidence = [ev for path in a.evidence for ev in read_rows(path, EvidenceRecord) if not ev.skip]
    server = None if os.environ.get(servers.URL_ENV) else servers.start(cfg, workdir="/tmp")
    url = os.environ.get(servers.URL_ENV) or server.url
    try:
        rows = []
        for mode in a.modes:
            if mode == "baseline":
                template = GeneratorTemplate.load(a.env, a.baseline_template)
                request = GeneratorRequest("", {})
            else:
                template = GeneratorTemplate.load(a.env)
                request = generator_request(fmt, mode, cfg.backend, a.max_tokens)
            clients = {j: LLMClient(phase_seed(cfg, "generate", j), url) for j in range(a.m)}
            started, cands = time.perf_counter(), []
            for ev in evidence:
                new = generate_candidates(clients.__getitem__, ev, template, fmt, a.m, a.max_tokens, request)[0]
                print(f"  {mode} task {ev.task_id}: valid {[c.valid for c in new]} "
                      f"problems {[c.problems for c in new if not c.valid]}", flush=True)
                cands += new
            wall = time.perf_counter() - started
            problems = collections.Counter(p.split(":")[0] for c in cands for p in c.problems.split("; ") if p)
            rows.append((mode, sum(c.valid for c in cands), len(cands), wall, problems.most_common(2)))
            print(f"{mode}: {rows[-1][1]}/{len(cands)} valid, {wall:.0f} s", flush=True)
    finally:
        if server:
            server.stop()
    print(f"\nmodel {a.model}, {len(evidence)} evidence records x {a.m} cards, max_tokens {a.max_tokens}")
    print(f"{'mode':<12}{'valid':>8}{'rate':>8}{'s/card':>8}  most common problems")
    for mode, ok, n, wall, probs in rows:
        print(f"{mode:<12}{ok:>4}/{n:<3}{ok / max(n, 1):>8.0%}{wall / max(n, 1):>8.1f}  {probs}")


if __name__ == "__main__":
    main()
