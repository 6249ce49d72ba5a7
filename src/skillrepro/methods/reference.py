"""Reference: a fixed, hand-written library that no sleep phase changes (the positive control).

Library v0 is the library the project ships for the benchmark's env (src/skillrepro/resources/reference/
<env>/), or the folder `options.library` names; every sleep phase carries it forward unchanged, as ReAct's
does. The actor calls its skills through the same sandbox and tool path as induced skills, so a run of this
method shows whether the skill path, the metrics and the figures can see a skill working.

A library folder holds `skills.py` (top-level functions; names starting with an underscore stay private,
callable from the others) and optionally `notes.md` (text put in the actor's prompt).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from skillrepro.config import BenchmarkConfig, ConfigError
from skillrepro.methods import InduceContext, register
from skillrepro.skills import Library

SHIPPED = Path(__file__).resolve().parents[1] / "resources" / "reference"


def shipped_envs() -> tuple[str, ...]:
    """The benchmark envs the project ships a reference library for."""
    return tuple(sorted(p.name for p in SHIPPED.iterdir() if (p / "skills.py").is_file()))


@dataclass(frozen=True)
class Options:
    library: str | None = None  # a library folder (skills.py, optional notes.md); null: the shipped one for the env

    @property
    def any_benchmark(self) -> bool:
        """A user's library may be meant for any benchmark; the shipped ones exist for some envs only."""
        return self.library is not None

    def check(self) -> None:
        if self.library is not None:
            try:
                Library.from_folder(self.library)
            except ValueError as e:
                raise ValueError(f"library: {e}") from None


def folder_for(bench: BenchmarkConfig, options: Options) -> Path:
    if options.library is not None:
        return Path(options.library)
    folder = SHIPPED / bench.env
    if not (folder / "skills.py").is_file():
        raise ConfigError(f"method reference ships no library for env {bench.env!r} (only for "
                          f"{', '.join(shipped_envs())}); set the variant's options.library to a folder")
    return folder


def initial(bench: BenchmarkConfig, options: Options) -> Library:
    """Library v0: the reference library, whole."""
    folder = folder_for(bench, options)
    return replace(Library.from_folder(folder), meta={"method": "reference", "library": str(folder)})


def induce(ctx: InduceContext, client=None) -> Library:
    return ctx.library.next_version(meta={"method": "reference", "cycle": ctx.cycle,
                                           "library": ctx.library.meta.get("library", "")})


register("reference", Options, induce, initial=initial, envs=shipped_envs(), sleeps=False)
