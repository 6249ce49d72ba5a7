"""SkillScaffold: M candidate skill cards per query from the benchmark's generator template (section 4.2)."""
from skillrepro.studies.scaffold.cards import GeneratorTemplate, generate_candidates
from skillrepro.studies.scaffold.records import CandidateRecord, EvidenceRecord, read_rows
from skillrepro.studies.scaffold.rollouts import phase_seed, policy_server
from skillrepro.llm.client import LLMClient
from skillrepro.pipeline import start_job
from skillrepro.progress import Progress
from skillrepro.store import LLMCall, write_records

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, p = snakemake.wildcards, snakemake.params
cfg = job.settings.scaffold
template = GeneratorTemplate.load(job.settings.bench.env, cfg.generator_prompts.get(job.settings.bench.env))
fmt = cfg.card_format(job.settings.bench.env)  # the card format with the benchmark's reply form
request = cfg.generator_request(job.settings.generator_llm.backend, job.settings.bench.env)
cands, calls = [], []
evidence = read_rows(snakemake.input.evidence, EvidenceRecord)
with policy_server(job.settings.generator_llm, job.settings.policy), \
        Progress(cfg.n_candidates * sum(not ev.skip for ev in evidence), "cards") as progress:
    clients = {j: LLMClient.connect(phase_seed(job.settings.generator_llm, "generate", j)) for j in range(cfg.n_candidates)}
    for ev in evidence:
        c, k = generate_candidates(clients.__getitem__, ev, template, fmt, cfg.n_candidates,
                                   cfg.generator_max_tokens, request)
        cands += c
        calls += k
        log.info("task=%s skip=%s valid=%d/%d", ev.task_id, ev.skip, sum(x.valid for x in c), len(c))
        if c:  # a skipped query (no evidence) has no cards to count
            progress.update(len(c))
write_records(snakemake.output.llm_calls, calls, LLMCall)
write_records(snakemake.output.candidates, cands, CandidateRecord)
