"""Teacher-forced scorers on the real SmolLM2-135M GGUF: the CPU scorer against a direct reference
forward pass, the token span it scores, and the vLLM request/response handling against a fake server."""
from __future__ import annotations

import http.server
import json
import logging
import threading

import pytest
import torch  # the `scorer` extra

from skillrepro.llm.models import resolve
from skillrepro.llm.scorer import (
    ChatSequencer, ScoringError, ScoringSequence, TransformersScorer, VLLMScorer, load_gguf_tokenizer,
    score_conversations,
)
from skillrepro.progress import PROGRESS_LOGGER, Progress

pytestmark = pytest.mark.own_process  # the models it loads stay out of the suite's process

SYSTEM = "You are an agent in a grid world. Call one function per turn."


def conv(turns: int, system: str = SYSTEM) -> list[dict]:
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Mission: pick up the red ball."}]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": f"Thought: the ball is {t + 1} steps ahead.\nAction: go_forward()"})
        msgs.append({"role": "user", "content": f"Observation: you moved; the red ball is {t} steps ahead."})
    return msgs[:-1]  # ends with the actor's reply, as a recorded episode does


@pytest.fixture(scope="module")
def gguf():
    return resolve("smollm2-135m")


@pytest.fixture(scope="module")
def tokenizer(gguf):
    return load_gguf_tokenizer(gguf)


@pytest.fixture(scope="module")
def cpu_scorer(gguf):
    # batch_tokens large enough that sequences of different lengths share a padded batch.
    return TransformersScorer(gguf, batch_tokens=100_000, threads=2)


def test_a_shipped_model_loads_from_its_converted_folder_as_from_the_gguf(gguf, cpu_scorer):
    """The scorer, the GRPO policy and the blend read a shipped GGUF through a Hugging Face folder made
    from it once (a GGUF's metadata takes ~25 s to parse on 2 cores): same weights, vocabulary and chat
    template as the GGUF read directly."""
    from skillrepro.llm.scorer import _read_gguf

    st = gguf.stat()
    assert (gguf.parent / "hf" / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}" / "model.safetensors").is_file()
    direct_lm, direct_tok = _read_gguf(gguf)
    lm, tok = cpu_scorer.lm, cpu_scorer.tokenizer
    assert tok.apply_chat_template(conv(2), tokenize=False) == direct_tok.apply_chat_template(conv(2), tokenize=False)
    text = direct_tok.apply_chat_template(conv(2), tokenize=False)
    assert tok(text)["input_ids"] == direct_tok(text)["input_ids"] and len(tok) == len(direct_tok)
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(lm(ids).logits, direct_lm(ids).logits)
    assert not getattr(lm, "is_quantized", False)  # the Trainer trains it (grpo.load_policy)


def test_scored_tokens_are_exactly_the_actor_replies(tokenizer):
    msgs = conv(3)
    seq = ChatSequencer(tokenizer).build(msgs)
    text = tokenizer.decode([seq.token_ids[p] for p in seq.scored])
    assert text == "".join(m["content"] for m in msgs if m["role"] == "assistant")
    # Nothing of the system prompt or the observations is scored.
    assert "Observation" not in text and "grid world" not in text


def test_conversation_without_actor_turn_is_refused(tokenizer):
    with pytest.raises(ScoringError, match="no assistant message"):
        ChatSequencer(tokenizer).build(conv(0)[:2])


def reference_mean_logprob(scorer: TransformersScorer, msgs: list[dict]) -> float:
    """Independent of the scorer's span logic: token positions from separately tokenised pieces, and the
    model's own full logits for the one sequence, no padding, no batching."""
    tok = scorer.tokenizer
    full_ids = tok(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)["input_ids"]
    positions = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        head = tok(tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)["input_ids"]
        body = tok(m["content"], add_special_tokens=False)["input_ids"]
        assert full_ids[len(head):len(head) + len(body)] == body
        positions += range(len(head), len(head) + len(body))
    with torch.inference_mode():
        logits = scorer.lm(input_ids=torch.tensor([full_ids])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    return float(sum(lp[p - 1, full_ids[p]] for p in positions) / len(positions))


def test_cpu_scorer_matches_reference_forward_pass(cpu_scorer):
    convs = [conv(1), conv(4), conv(2, system=SYSTEM + "\nNotes:\n# Skill: walk-straight\nGo forward.")]
    scores = score_conversations(cpu_scorer, convs)
    for c, s in zip(convs, scores):
        ref = reference_mean_logprob(cpu_scorer, c)
        assert s.mean_logprob == pytest.approx(ref, abs=1e-4)
        assert s.mean_logprob < 0 and s.n_tokens > 0
    # A skill in the system prompt changes the scores of the same actor tokens.
    plain, skilled = score_conversations(cpu_scorer, [conv(2), convs[2]])
    assert plain.n_tokens == skilled.n_tokens and plain.sum_logprob != skilled.sum_logprob


def test_cpu_scorer_batching_does_not_change_scores(gguf, cpu_scorer):
    convs = [conv(1), conv(3), conv(2)]
    together_done, alone_done = [], []  # the sequences each forward pass scored (the job's progress)
    together = score_conversations(cpu_scorer, convs, together_done.append)
    cpu_scorer.batch_tokens = 1  # one sequence per forward pass
    try:
        alone = score_conversations(cpu_scorer, convs, alone_done.append)
    finally:
        cpu_scorer.batch_tokens = 100_000
    assert together_done == [3] and alone_done == [1, 1, 1]
    for a, b in zip(together, alone):
        assert a.sum_logprob == pytest.approx(b.sum_logprob, abs=1e-3)


class _FakeVLLM(http.server.BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        ids = body["prompt"]
        # Position p gets log-prob -0.01 * p for its own token, plus one other candidate token.
        plp = [None] + [{str(t): {"logprob": -0.01 * p, "rank": 1, "decoded_token": "x"},
                         "999999": {"logprob": -9.0, "rank": 2, "decoded_token": "y"}}
                        for p, t in enumerate(ids) if p > 0]
        data = json.dumps({"choices": [{"text": "", "prompt_logprobs": plp}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_vllm_scorer_requests_and_parsing_against_fake_server(tokenizer):
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        scorer = VLLMScorer(f"http://127.0.0.1:{server.server_port}/v1", "HuggingFaceTB/SmolLM2-135M-Instruct",
                            tokenizer)
        msgs = conv(2)
        (score,) = score_conversations(scorer, [msgs])
    finally:
        server.shutdown()
    (req,) = _FakeVLLM.requests
    seq = ChatSequencer(tokenizer).build(msgs)  # the same sequence the CPU scorer would read
    assert req["path"] == "/v1/completions"
    assert req["body"]["prompt"] == list(seq.token_ids)
    assert req["body"]["max_tokens"] == 1 and req["body"]["prompt_logprobs"] >= 0
    assert score.n_tokens == len(seq.scored) and score.n_forward_tokens == len(seq.token_ids)
    assert score.sum_logprob == pytest.approx(sum(-0.01 * p for p in seq.scored))


def _scored_on_fake_vllm(tokenizer, caplog, conversations):
    """score_conversations against _FakeVLLM under a Progress of every conversation: (scores, the progress lines,
    the number of requests the server got)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeVLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        scorer = VLLMScorer(f"http://127.0.0.1:{server.server_port}/v1", "HuggingFaceTB/SmolLM2-135M-Instruct",
                            tokenizer)
        with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
            with Progress(len(conversations), "scored trajectories", label="score") as progress:
                scores = score_conversations(scorer, conversations, progress.update)
        lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
        return scores, lines, len(_FakeVLLM.requests)
    finally:
        server.shutdown()
        _FakeVLLM.requests.clear()


def test_scoring_reports_scored_trajectories_on_the_console(tokenizer, caplog):
    """scaffold_score's progress: each scored (Scout, context) pair is a line on logger skillrepro.progress."""
    scores, lines, _ = _scored_on_fake_vllm(tokenizer, caplog, [conv(1), conv(2), conv(3)])
    assert len(scores) == 3
    assert lines[0] == "score: 3 scored trajectories to do"
    assert [x.split(" done")[0] for x in lines[1:4]] == [f"score: {k}/3 scored trajectories" for k in (1, 2, 3)]
    assert lines[-1].startswith("score: finished, 3/3 scored trajectories")


def test_a_repeated_conversation_is_scored_once(tokenizer, caplog):
    """Two identical contexts for one Scout (a Generator that wrote the same card twice): one request, the same
    score for both, forward tokens counted once; the progress still counts every pair."""
    (first, other, again), lines, requests = _scored_on_fake_vllm(tokenizer, caplog, [conv(2), conv(1), conv(2)])
    assert requests == 2
    assert (again.n_tokens, again.sum_logprob) == (first.n_tokens, first.sum_logprob) != (other.n_tokens, other.sum_logprob)
    assert first.n_forward_tokens > 0 and again.n_forward_tokens == 0
    assert lines[-1].startswith("score: finished, 3/3 scored trajectories")


def test_vllm_parse_rejects_short_or_missing_logprobs():
    seq = ScoringSequence((5, 6, 7), (1, 2))
    with pytest.raises(ScoringError, match="2 prompt log-probs for 3"):
        VLLMScorer.parse({"choices": [{"prompt_logprobs": [None, {}]}]}, seq)
    with pytest.raises(ScoringError, match="token 7 at position 2"):
        VLLMScorer.parse({"choices": [{"prompt_logprobs": [None, {"6": {"logprob": -1}}, {"8": {"logprob": -1}}]}]}, seq)
