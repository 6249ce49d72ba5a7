"""Files given to the CLI: not UTF-8, or with very long lines, stop with a message naming file and line
that never echoes the line in full, and without reading the whole line into memory."""
import resource
import subprocess
import sys

import pytest

from skillrepro.cli import main
from skillrepro.store import MAX_LINE_BYTES, InputFileError, read_lines


def test_utf8_lines_are_read(tmp_path):
    f = tmp_path / "calls.txt"
    f.write_text("move_north()\r\n# café\n\nmove_south()")
    assert read_lines(f) == ["move_north()", "# café", "", "move_south()"]


def test_a_file_that_is_not_utf8_names_file_line_and_byte(tmp_path):
    f = tmp_path / "calls.txt"
    f.write_bytes(b"move_north()\n# caf\xe9 in latin-1\n")
    with pytest.raises(InputFileError, match=r"calls.txt:2: not UTF-8 text \(byte 0xe9 at column 6\)"):
        read_lines(f, "calls file")


def test_a_long_line_stops_without_being_read_or_echoed(tmp_path):
    f = tmp_path / "skills.py"
    with open(f, "wb") as out:
        out.write(b"def f():\n    return 1\n")
        out.write(b"x = '" + b"a" * (8 * MAX_LINE_BYTES) + b"'\n")
    with pytest.raises(InputFileError, match=f"skills.py:3: line longer than {MAX_LINE_BYTES} bytes") as err:
        read_lines(f, "skills file")
    assert len(str(err.value)) < 300


def test_replay_reports_a_latin1_calls_file_before_starting_the_env(tmp_path, capsys):
    f = tmp_path / "calls.txt"
    f.write_bytes(b"go_forward()\npick_up('bo\xeete')\n")
    assert main(["env", "replay", "babyai", "--task", "1", "--calls", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:2: not UTF-8 text" in err


def test_replay_echoes_a_long_bad_line_shortened(tmp_path, capsys):
    f = tmp_path / "calls.txt"
    f.write_text("go_forward(" + "1 +" * 5000 + ")\n")
    assert main(["env", "replay", "babyai", "--task", "1", "--calls", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:1:" in err and "more characters" in err and len(err) < 500


def test_callgraph_names_file_and_line_of_a_bad_skills_file(tmp_path):
    bad = tmp_path / "skills.py"
    bad.write_bytes(b"def f():\n    return '\xff'\n")
    out = subprocess.run([sys.executable, "-m", "skillrepro.cli", "callgraph", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and f"{bad}:2: not UTF-8 text" in out.stderr
    bad.write_text("def f(:\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "skillrepro.cli", "callgraph", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and f"{bad}:1:" in out.stderr


def test_a_gigabyte_line_uses_little_memory(tmp_path):
    """A sparse 1 GiB file of one line: refused after reading one line's worth of bytes."""
    f = tmp_path / "calls.txt"
    with open(f, "wb") as out:
        out.truncate(1 << 30)  # a single line of zero bytes, nothing on disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InputFileError, match="line longer than"):
        read_lines(f, "calls file")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB



_PROBE = """
import sys
import skillrepro.cli as cli
try:
    cli.main(sys.argv[1:]) if sys.argv[1:] else None
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith(("skillrepro", "pyarrow", "numpy"))), file=sys.stderr)
"""


def test_the_cli_imports_only_the_chosen_commands_module():
    """`import skillrepro.cli` and `skillrepro --help` load no area of the package (perf/cli_import.py times
    it: every command used to pay ~0.3 s for all of them); a command loads its own module."""
    from skillrepro.cli import COMMANDS

    def run(*argv):
        out = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True)
        return out.stdout, eval(out.stderr.strip().splitlines()[-1])

    assert run()[1] == ["skillrepro", "skillrepro.cli"]
    listing, loaded = run("--help")
    assert loaded == ["skillrepro", "skillrepro.cli"] and all(name in listing for name in COMMANDS)
    assert "what skills do to an LLM agent" in listing and "snakemake --cores 8 results/tables/main.csv" in listing
    usage, loaded = run("callgraph", "--help")
    assert "skillrepro.skills.callgraph" in loaded and "skillrepro.studies.kvcache.cli" not in loaded
    assert "version folder" in usage  # the command's own parser, not the listing's stub


def test_a_command_error_is_one_line_and_debug_shows_its_traceback(tmp_path):
    command = [sys.executable, "-m", "skillrepro.cli", "cost", "estimate", "--configfile", str(tmp_path / "none.yaml")]
    out = subprocess.run(command, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"skillrepro cost: config file {tmp_path / 'none.yaml'} does not exist "
                                               "(skillrepro --debug ... for the traceback)"]
    out = subprocess.run([*command[:3], "--debug", *command[3:]], capture_output=True, text=True)
    assert out.returncode == 1 and "Traceback" in out.stderr and "ConfigError" in out.stderr
