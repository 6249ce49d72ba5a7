"""Progress on the console: a job's progress lines (episodes done of N) reach stderr, which Snakemake shows,
as well as the job's log; the job's other lines stay in its log."""
import logging
import time
from types import SimpleNamespace

import pytest

from skillrepro import pipeline, progress as progress_module


@pytest.fixture
def job(tmp_path):
    log = tmp_path / "logs" / "rollout_batch0.log"
    log.parent.mkdir()
    wildcards = {"bench": "babyai", "variant": "react", "seed": "0", "k": "0"}
    fake = SimpleNamespace(log=[str(log)], rule="rollout", wildcards=wildcards)
    yield fake, log
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    progress_module.JOB.update(name="", log="")


def test_progress_lines_reach_the_console_and_the_log(job, capfd):
    fake, log_file = job
    log = pipeline.setup_logging(fake)
    log.info("train task=t1 success=True")  # an ordinary line: the log only
    with progress_module.Progress(3, "train episodes", heartbeat_s=0.05) as progress:
        progress.update()
        time.sleep(0.2)  # nothing finishes for a while: the heartbeat says the job still runs
        progress.update(2)
    err = capfd.readouterr().err
    label = "rollout bench=babyai, variant=react, seed=0, k=0"
    assert f"{label}: 3 train episodes to do (log: {log_file})" in err
    assert "1/3 train episodes done" in err and "3/3 train episodes done" in err
    assert "1/3 train episodes done, still running" in err
    assert f"{label}: finished, 3/3 train episodes" in err
    assert "task=t1" not in err
    text = log_file.read_text()
    assert "task=t1" in text and "3/3 train episodes done" in text
    # after close the heartbeat is silent
    time.sleep(0.15)
    assert "still running" not in capfd.readouterr().err
