"""A learned skill reaches the next checkpoint's actor: through the real rules, a SpeedRunner
sleep phase whose inducer is scripted to write first a function that acts through the notebook (the 1.5B
inducer's commonest mistake, kept private under `inducer.require_action`, with the reason) and then a known
function (the shipped BabyAI reference routine, as a model would write it in the default run's sleep-phase protocol, `inducer.tool_calling: text`: an Action line and
a ```python block), then the test evaluation at v1 on the real embedded Qwen2.5-Coder-0.5B with the default run's
actor settings (constrained JSON calls).

Only the inducer is scripted: a proxy answers its requests and passes every other one (the actor's, the
tokenizer's) to the real llama.cpp server. It asserts that the protocol showed a function example built from
BabyAI's primitives, that the idle write was kept out of the actor's list and the next request read why, that the second write
passed its checks and reached v1 (its mission parser, written public, kept private: it acts on nothing), that
the v1 actor was offered the function and called it, and that the call ran in the sandbox and was recorded
in skill_calls.parquet; it fails if a written function does not reach the next checkpoint's actor."""
import json
import os
import urllib.error
import urllib.request

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from skillrepro.config import LLMConfig
from skillrepro.llm import models, servers
from repo import ROOT, copy_workflow, snakemake
from scripted import ChatServer, completion

SKILL = (ROOT / "src/skillrepro/resources/reference/babyai/skills.py").read_text()
# As the default run's inducer replies (inducer.tool_calling: text), with its mission parser named as the
# inducers named theirs: public, though it only computes (kept as the acting function's private helper).
WRITE = ("Thought: one routine for the whole mission.\nAction: write_function(public=True)\n```python\n"
         f"{SKILL.replace('_parse_mission', 'parse_mission')}```")
FINISH = 'Thought: done.\nAction: finish("one routine for the whole mission")'
# Acts through the analysis notebook: no primitive is called where the agent runs a skill.
IDLE = ('Thought: pick the object up.\nAction: write_function(public=True)\n```python\n'
        'def grab():\n    """Pick up."""\n    return db.execute_query("pick_up()")\n```')


class InducerProxy(ChatServer):
    """Answers the inducer (its system prompt lists execute_code): the idle write, the good one, then
    `finish`; keeps the inducer's requests; relays everything else to `upstream` unchanged."""

    def __init__(self, upstream: str):
        self.base, self.requests, self.schemas = upstream.removesuffix("/v1"), [], []
        super().__init__(self.answer)

    def answer(self, path: str, raw: bytes) -> tuple[int, bytes]:
        body = json.loads(raw)
        if path.endswith("/chat/completions") and "execute_code" in (body["messages"][0].get("content") or ""):
            self.requests.append(body["messages"])
            self.schemas.append(body.get("response_format", {}).get("type"))
            return 200, completion(body["model"], [IDLE, WRITE, FINISH][min(len(self.requests), 3) - 1])
        req = urllib.request.Request(self.base + path, data=raw, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


@pytest.mark.workflow
def test_a_function_the_inducer_writes_is_called_by_the_next_checkpoints_actor(tmp_path):
    copy_workflow(tmp_path)
    llm = {"backend": "embedded", "model": "qwen2.5-coder-0.5b", "max_tokens": 96, "slots": 1, "ctx_per_slot": 4096,
           "seed": 1, "tool_calling": "constrained"}
    cfg = {
        # the proxy answers the inducer by the count of its requests, not their content: a request the trimmed
        # conversation makes equal to an earlier one must reach it, not the run's response cache
        "llm": {**llm, "response_cache": False},
        "actor": {"restate_skills": True, "stop": ["}\n{", "},\n{"]},  # the default run's actor settings
        "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 2}},
        "methods": {"speedrunner": {"method": "speedrunner"}},
        "protocol": {"seeds": [0], "train_rollouts": 1, "sleep_every": 1, "eval_every": 1, "n_test": 2},
        "budgets": {"rollout_wall_s": 300, "inducer_requests": 3},
        "inducer": {"tool_calling": "text", "require_action": True},
        "pricing": {},
    }
    (tmp_path / "learn.yaml").write_text(yaml.safe_dump(cfg))
    server = servers.start(LLMConfig(**llm), workdir=tmp_path)
    proxy = InducerProxy(server.url)
    run = tmp_path / "results/runs/babyai/speedrunner/seed0"
    try:
        snakemake(str(run.relative_to(tmp_path) / "eval/v1/skill_calls.parquet"), "--cores", "2",
                  "--configfile", "learn.yaml", cwd=tmp_path, env={**os.environ, servers.URL_ENV: proxy.url})
    finally:
        proxy.close()
        server.stop()

    # The sleep phase asked for text replies (the actor's stay constrained); its protocol showed a function
    # example made of BabyAI's own primitives.
    assert proxy.schemas == [None, None, None]
    protocol = "\n".join(m["content"] or "" for m in proxy.requests[0])
    assert "Action: write_function(public=True)" in protocol and "def turn_left_until(" in protocol, protocol
    # The idle write was kept private with why, and the next request carried that reason to the model.
    transcript = [json.loads(line) for line in (run / "induce/v1/transcript.jsonl").read_text().splitlines()]
    idle, write = [t for t in transcript if t["tool"] == "write_function"]
    assert idle["observation"].startswith("Saved grab (private)") and "no primitive action" in idle["observation"]
    assert "exist only in execute_code" in idle["observation"], idle
    assert any(idle["observation"] in (m["content"] or "") for m in proxy.requests[1])
    # The second write passed its checks, and v1 holds it as the only public skill.
    assert write["observation"].startswith("Saved ") and "solve_mission (public)" in write["observation"], write
    assert "parse_mission (private)" in write["observation"], write  # written public; it acts on nothing
    v1 = json.loads((run / "library/v1/manifest.json").read_text())
    assert [f["name"] for f in v1["functions"] if f["public"]] == ["solve_mission"]

    # The v1 actor (the real model) was offered it and called it; each valid call ran in the sandbox and left
    # its call stack in skill_calls.parquet, tagged with the step that made it, its frames stepping the env.
    steps = pq.read_table(run / "eval/v1/steps.parquet").to_pandas()
    frames = pq.read_table(run / "eval/v1/skill_calls.parquet").to_pandas()
    calls = pq.read_table(run / "eval/v1/llm_calls.parquet").to_pandas()
    assert "- solve_mission(mission: str): " in json.loads(calls.prompt.iloc[0])["messages"][0]["content"]
    called = steps[(steps.action == "solve_mission") & steps.valid]
    assert len(called) >= 1, steps[["episode_id", "step", "action", "valid"]].to_string()
    roots = frames[frames.parent_frame_id == ""]
    assert sorted(zip(roots.episode_id, roots.step)) == sorted(zip(called.episode_id, called.step))
    assert set(roots.function) == {"solve_mission"} and (frames.primitives.map(json.loads).map(len) > 0).any()
    # The training batch played v0, which had nothing to call: the skill is what the sleep phase added.
    assert pd.read_parquet(run / "train/batch0/skill_calls.parquet").empty


class ActorOnly(ChatServer):
    """The run's shared server: plays every actor turn with one action and counts the requests that are the
    inducer's (its system prompt lists execute_code), which must go to the sleep phase's own server instead."""

    def __init__(self):
        self.actor_requests, self.inducer_requests = 0, 0
        super().__init__(self.answer)

    def answer(self, path: str, raw: bytes) -> tuple[int, bytes]:
        body = json.loads(raw)
        if "execute_code" in (body["messages"][0].get("content") or ""):
            self.inducer_requests += 1
        else:
            self.actor_requests += 1
        return 200, completion(body["model"], "Thought: go.\nAction: go_forward()")


@pytest.mark.workflow
def test_the_sleep_phase_runs_on_inducer_model_on_a_server_of_its_own(tmp_path):
    """`inducer.model` (a model per role): through the real rules, the actor plays on the run's shared
    server while the sleep phase starts a real llama.cpp server of its own for the inducer's model, and
    every inducer request is answered there (recorded under that model), none by the shared server."""
    copy_workflow(tmp_path)
    model = tmp_path / "inducer.gguf"  # another model name for the same small file: a server of its own
    model.symlink_to(models.resolve("smollm2-135m"))
    cfg = {"llm": {"backend": "embedded", "model": "smollm2-135m", "max_tokens": 32, "slots": 2, "tool_calling": "text"},
           "benchmarks": {"babyai": {"env": "babyai", "llm_call_budget": 2}},
           "methods": {"speedrunner": {"method": "speedrunner"}},
           "protocol": {"seeds": [0], "train_rollouts": 1, "sleep_every": 1, "eval_every": 1, "n_test": 1},
           "budgets": {"rollout_wall_s": 120, "inducer_requests": 2},
           "inducer": {"model": str(model), "min_reply_tokens": 64}, "pricing": {}}
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(cfg))
    shared = ActorOnly()
    run = tmp_path / "results/runs/babyai/speedrunner/seed0"
    try:
        snakemake(str(run.relative_to(tmp_path) / "library/v1/manifest.json"), "--cores", "2", "--configfile",
                  "own.yaml", cwd=tmp_path, env={**os.environ, servers.URL_ENV: shared.url})
    finally:
        shared.close()
    assert shared.actor_requests > 0 and shared.inducer_requests == 0
    calls = pd.read_parquet(run / "induce/v1/llm_calls.parquet")
    assert len(calls) == 2 and set(calls.role) == {"inducer"} and set(calls.model) == {str(model)}
    assert (calls.completion_tokens > 0).all()  # a model answered, not the scripted server
    log = (tmp_path / "logs/runs/babyai/speedrunner/seed0/induce_v1.log").read_text()
    assert f"inducer requests on {model}" in log
