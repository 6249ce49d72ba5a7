"""Files a user can share: what the atomic writers leave behind has the mode the user's umask gives a new
file (0644 under umask 022), not the 0600 of the temporary file it was written through."""
import os
import stat

import pytest

from skillrepro import store
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.skills import Library


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    before = os.umask(request.param)
    yield request.param
    os.umask(before)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_tables_records_figures_and_libraries_follow_the_umask(tmp_path, umask):
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    assert store.shared_mode() == file_mode
    table = store.write_text(tmp_path / "tables" / "main.csv", "variant,score\nreact,0.5\n")
    records = store.write_records(tmp_path / "runs" / "episodes.parquet", [], store.Episode)
    figure = tmp_path / "figures" / "figure2.png"
    figures.empty_figure(figure, "Figure 2", "any run", "test.yaml")
    library = Library(0).write(tmp_path / "runs" / "library" / "v0")
    for path in (table, records, figure, library / "manifest.json", library / "skills.py"):
        assert mode(path) == file_mode, (path, oct(mode(path)))
    assert mode(library) == dir_mode
    assert figure.read_bytes()[:4] == b"\x89PNG"  # drawn through a .tmp name, still a PNG
    # nothing temporary is left beside the outputs
    assert not [p for p in tmp_path.rglob(".*") if p.name.endswith(".tmp") or p.name.startswith(".v0.")]


def test_a_failed_write_leaves_no_file(tmp_path):
    with pytest.raises(RuntimeError):
        with store.atomic_path(tmp_path / "t.csv") as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
