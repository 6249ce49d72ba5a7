"""One cycle of every learning method on configs/paper.yaml's LLM settings against a local
OpenAI-compatible server that answers like a reasoning model (its thinking counted in the completion tokens,
empty content with finish_reason "length" when the cap is hit): no role's work is lost to its cap. The same
cycle without llm.reasoning_room and the retry (the caps before) loses the work of every medium-effort role."""
from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import load_benchmark
from skillrepro.check import check_config
from skillrepro.config import MethodConfig, llm_config, load_yaml
from skillrepro.llm.client import LLMClient
from skillrepro.methods import get_method, bind
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from repo import ROOT
from sleep_phases import BABYAI, CRAFTER, ctx_for

THINKING = {None: 0, "minimal": 0, "low": 600, "medium": 3000, "high": 6000}  # tokens spent before answering
CHOP = '```python\ndef chop():\n    """Hit what is in front of you."""\n    return do()\n```'
FORWARD = '```python\ndef forward_twice():\n    """Step forward twice."""\n    go_forward()\n    return go_forward()\n```'


def answer(body: dict) -> tuple[str, str, list]:
    """(role as the prompt shows it, content, tool calls) of a reply that had room to answer."""
    system = body["messages"][0]["content"]
    if system.startswith("You judge whether"):
        return "critic", "Reasoning: it did.\nSuccess: yes\nCritique: none", []
    if system.startswith("You are the curriculum"):
        return "curriculum", "Reasoning: trees first.\nTask: Collect wood", []
    if system.startswith("You write reusable Python functions"):
        return "skill_writer", CHOP if "Crafter" in system else FORWARD, []
    if system.startswith("You maintain the notes"):
        return "optimizer", "<notes>\nRead the mission twice.\n</notes>", []
    if system.startswith("You maintain a skill library"):
        return "inducer", "", [{"id": "c1", "type": "function",
                                "function": {"name": "finish", "arguments": json.dumps({"summary": "done"})}}]
    name = "noop" if "Crafter" in system else "turn_left"
    return "actor", "", [{"id": "a1", "type": "function", "function": {"name": name, "arguments": "{}"}}]


@pytest.fixture(scope="module")
def reasoner():
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            role, content, calls = answer(body)
            effort, cap = body.get("reasoning_effort"), body["max_completion_tokens"]
            thinking = THINKING[effort]
            lost = cap < thinking + 50  # the reply needs its thinking and ~50 tokens of answer
            seen.append({"role": role, "effort": effort, "cap": cap, "lost": lost})
            message = {"role": "assistant", "content": "" if lost else content}
            if calls and not lost:
                message["tool_calls"] = calls
            data = json.dumps({"id": "r", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "message": message,
                                            "finish_reason": "length" if lost else ("tool_calls" if calls else "stop")}],
                               "usage": {"prompt_tokens": len(json.dumps(body["messages"])) // 4,
                                         "completion_tokens": cap if lost else thinking + 50,
                                         "completion_tokens_details": {"reasoning_tokens": min(cap, thinking)}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def paper_llm(url: str, **changes):
    """configs/paper.yaml's llm section (GPT-5.4-mini: caps, efforts, reasoning room), served at `url`."""
    config = check_config(load_yaml(ROOT / "configs/paper.yaml"), check_files=False, billing=False)
    return replace(llm_config(config), base_url=url, **changes)


def one_cycle(tmp: Path, babyai_run: dict, llm) -> dict[str, Library]:
    """A Voyager rollout batch on Crafter (curriculum + actor) and every method's sleep phase after a batch."""
    client = LLMClient(llm, llm.base_url)
    root = tmp / "crafter"
    Library(0, parse_functions('def hit_twice():\n    """Hit twice."""\n    do()\n    return do()\n')).write(
        root / "library" / "v0")
    tasks = load_benchmark(CRAFTER).sample_tasks("train", 1, 42)
    run_batch(bench=replace(CRAFTER, llm_call_budget=2), llm=llm, library_dir=root / "library" / "v0",
              task_ids=tasks, spec=EpisodeSpec("crafter/voyager/seed0", "crafter", "voyager", "voyager", 0, "train", 0, 0),
              out_dir=root / "train" / "batch0", method=bind(MethodConfig("voyager", "voyager", {"retrieval": "tfidf"})),
              client=client)
    libraries = {}
    for variant, method, where, bench in (("voyager", "voyager", root, CRAFTER), ("opo", "opo", None, BABYAI),
                                          ("asi", "asi", None, BABYAI), ("speedrunner", "speedrunner", None, BABYAI)):
        where = where or babyai_run["root"]
        options = {"retrieval": "tfidf"} if method == "voyager" else {}
        ctx = ctx_for(where, variant, method, options, bench=bench, tag=f"_{tmp.name}_{variant}")
        ctx = replace(ctx, llm=llm, trajectory_tokens=None)
        libraries[variant] = get_method(method).induce(ctx, client)
    return libraries


def test_no_role_loses_its_work_to_its_cap_on_the_paper_settings(run, reasoner, tmp_path):
    url, seen = reasoner
    seen.clear()
    libraries = one_cycle(tmp_path, run, paper_llm(url))
    roles = {s["role"]: (s["effort"], s["cap"]) for s in seen}
    assert roles == {"actor": ("low", 1024 + 2048), "curriculum": ("medium", 256 + 8192),
                     "critic": ("medium", 256 + 8192), "skill_writer": ("medium", 1024 + 8192),
                     "optimizer": ("medium", 1024 + 8192), "inducer": ("medium", 1024 + 8192)}
    assert not any(s["lost"] for s in seen)
    # the work is there: Voyager's critic said yes and its writer's skill was added; OPO's notes; ASI's skill
    assert "chop" in {f.name for f in libraries["voyager"].functions}
    assert libraries["voyager"].meta["completed_goals"] == ["Collect wood"]
    assert libraries["opo"].notes == "Read the mission twice."
    assert "forward_twice" in {f.name for f in libraries["asi"].functions}


def test_without_the_room_and_the_retry_every_sleep_phase_role_loses_its_work(run, reasoner, tmp_path):
    """The negative control: no reasoning room and no retry (llm.reasoning_room {}, llm.cap_retry_factor 1)."""
    url, seen = reasoner
    seen.clear()
    libraries = one_cycle(tmp_path, run, paper_llm(url, reasoning_room=(), cap_retry_factor=1))
    lost = {s["role"] for s in seen if s["lost"]}
    # every medium-effort role (caps of 256 and 1,024 under 3,000 tokens of reasoning; ASI's inducer is shown as
    # skill_writer here); the actor's 600 tokens of low reasoning fit its 1,024
    assert lost == {"curriculum", "critic", "skill_writer", "optimizer", "inducer"}
    # an empty critic reply is no verdict: no skill, and the goal is not counted as failed
    assert [f.name for f in libraries["voyager"].functions] == [f.name for f in Library.load(
        tmp_path / "crafter" / "library" / "v0").functions]
    assert libraries["voyager"].meta["failed_goals"] == []
    assert not re.search(r"chop", json.dumps(libraries["voyager"].meta))
