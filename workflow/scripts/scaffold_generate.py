"""SkillScaffold: M candidate skill cards per query from the benchmark's generator template (section 4.2)."""
from skillrepro.studies import scaffold as ss
from skillrepro.llm.client import LLMClient
from skillrepro.pipeline import setup_logging
from skillrepro.store import LLMCall, write_records

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
cfg = p.scaffold
template = ss.GeneratorTemplate.load(p.bench.env, cfg.generator_prompts.get(p.bench.env))
request = cfg.generator_request(p.llm.backend)
cands, calls = [], []
with ss.policy_server(p.llm, p.policy):
    clients = {j: LLMClient.connect(ss.phase_seed(p.llm, "generate", j)) for j in range(cfg.n_candidates)}
    for ev in ss.read_rows(snakemake.input.evidence, ss.EvidenceRecord):
        c, k = ss.generate_candidates(clients.__getitem__, ev, template, cfg.card, cfg.n_candidates,
                                      cfg.generator_max_tokens, request)
        cands += c
        calls += k
        log.info("task=%s skip=%s valid=%d/%d", ev.task_id, ev.skip, sum(x.valid for x in c), len(c))
write_records(snakemake.output.llm_calls, calls, LLMCall)
write_records(snakemake.output.candidates, cands, ss.CandidateRecord)
