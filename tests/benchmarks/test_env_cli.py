"""`skillrepro env tasks|replay`, run through the real CLI entry point on real envs."""
from __future__ import annotations

import json
import re

import pytest

from skillrepro.cli import main
from skillrepro.benchmarks.cli import CallsFileError, parse_call, parse_options
from skillrepro.benchmarks.crafter import CrafterBenchmark


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_tasks_prints_the_sampler_draw(capsys):
    rc, out, _ = _run(capsys, "env", "tasks", "crafter", "--split", "test", "--limit", "3")
    assert rc == 0
    assert out.split() == CrafterBenchmark().sample_tasks("test", 30, 42)[:3]
    rc, out, _ = _run(capsys, "env", "tasks", "crafter", "--split", "train", "--seed", "7")
    assert out.split() == CrafterBenchmark().sample_tasks("train", 200, 7)


def test_tasks_scienceworld_with_family_option(capsys):
    rc, out, _ = _run(capsys, "env", "tasks", "scienceworld", "--split", "test", "--option", "family=classification")
    ids = out.split()
    assert rc == 0 and len(ids) == 30
    assert all(i.split(":")[0] in ("find-living-thing", "find-non-living-thing", "find-plant", "find-animal")
               for i in ids)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["env", "tasks", "crafter", "--split", "test", "--option", "zombie_frequency=-1"], "zombie_frequency"),
        (["env", "tasks", "minecraft", "--split", "test"], "unknown benchmark env 'minecraft'"),
        (["env", "tasks", "scienceworld", "--split", "test", "--option", "family=chemistry"], "'chemistry'"),
        (["env", "tasks", "crafter", "--split", "test", "--option", "zombie_frequency"], "key=value"),
    ],
)
def test_tasks_bad_input_stops_with_a_message(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and needle in err and out == ""


def test_replay_crafter_prints_observations_and_a_json_summary(capsys, tmp_path):
    calls = tmp_path / "calls.txt"
    calls.write_text("# walk and hit\nmove_north()\n\ndo()\nget_current_observation()\njump()\nnoop()\n")
    rc, out, _ = _run(capsys, "env", "replay", "crafter", "--task", "123", "--calls", str(calls))
    assert rc == 0
    # reset and get_current_observation(); the three actions return None (D.2/D.3)
    assert out.count("<<OBSERVATION_BEGIN>>") == 2 and out.count("\nNone\n") == 3
    assert ">>> jump()" in out and "ActionError: unknown action 'jump'" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary == {"score": 0.0, "success": False, "done": False, "steps": 3}


def test_replay_scienceworld_gold_path_written_as_python_calls_succeeds(capsys, tmp_path):
    from skillrepro.benchmarks.scienceworld import gold_path, parse_command

    task_id = "power-component:2"
    lines = []
    for command in gold_path(task_id):
        name, args = parse_command(command)
        lines.append(f"{name}({', '.join(repr(a) for a in args)})")
    assert any(line.startswith("connect(") for line in lines)
    calls = tmp_path / "gold.txt"
    calls.write_text("\n".join(lines) + "\nsubmit_answer()\n")
    rc, out, _ = _run(capsys, "env", "replay", "scienceworld", "--task", task_id, "--calls", str(calls))
    assert rc == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["success"] is True and summary["score"] == 1.0 and summary["done"] is True
    assert summary["steps"] >= 5


def test_replay_keyword_arguments(capsys, tmp_path):
    calls = tmp_path / "calls.txt"
    calls.write_text('look_at(obj="red box")\nconnect(terminal_b="x", terminal_a="y")\n')
    rc, out, _ = _run(capsys, "env", "replay", "scienceworld", "--task", "find-plant:1", "--calls", str(calls),
                      "--option", "family=classification")
    assert rc == 0
    assert ">>> look_at(obj=\"red box\")" in out and "red box" in out.split(">>> look_at")[1]
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 2


@pytest.mark.parametrize(
    "line,needle",
    [
        ("__import__('os').system('touch /tmp/pwned')", "expected one call like name(arg, ...)"),
        ("go(open('/etc/passwd').read())", "arguments must be literals"),
        ("go(kitchen)", "arguments must be literals"),
        ("go('kitchen'", "not Python call syntax"),
        ("x = 1", "not Python call syntax"),
        ("go(**opts)", "literals"),
    ],
)
def test_calls_are_parsed_never_evaluated(line, needle):
    with pytest.raises(CallsFileError, match=re.escape(needle)):
        parse_call(line, 3, "calls.txt")


def test_replay_bad_calls_file_stops_before_the_env_starts(capsys, tmp_path):
    calls = tmp_path / "calls.txt"
    calls.write_text("move_north()\nmove_north(\n")
    rc, out, err = _run(capsys, "env", "replay", "crafter", "--task", "1", "--calls", str(calls))
    assert rc == 2 and f"{calls}:2" in err and out == ""
    rc, out, err = _run(capsys, "env", "replay", "crafter", "--task", "1", "--calls", str(tmp_path / "none.txt"))
    assert rc == 2 and "none.txt" in err
    good = tmp_path / "good.txt"
    good.write_text("noop()\n")
    rc, out, err = _run(capsys, "env", "replay", "crafter", "--task", "forest", "--calls", str(good))
    assert rc == 2 and "'forest'" in err and out == ""


def test_parse_options_types_values():
    assert parse_options(["zombie_frequency=0", "family=electricity", "room_each_step=false"]) == {
        "zombie_frequency": 0, "family": "electricity", "room_each_step": False}
