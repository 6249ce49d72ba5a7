"""The deviations from the papers (docs/deviations.md) name real config keys:
a renamed or removed key breaks this test.

Key-extraction rule (kept simple on purpose):
- the section is docs/deviations.md from its title "# Deviations from the papers" to the next "## " heading (none:
  its subsections are "### "), i.e. the whole file;
- every `backticked` span there is read from its start: a dotted path whose first segment is a top-level
  config section (`llm`, `actor`, `kvcache`, `scaffold`, ...) and which has at least one more segment is a
  config key; whatever follows the path (`: value`, ` + s`) is ignored. Segments are names, `<placeholder>`s
  (any key of a map, e.g. `scaffold.executor.<benchmark>.top_p`) or `[...]` (an item of a list, e.g.
  `kvcache.models[<name>].llm.model`). Anything else in backticks (file names, method options, values, Python
  paths such as `skillrepro.methods.common.render_traces`) is not a config key and is not checked, so name a
  config key by its full path for this test to cover it.
- a key exists when it can be walked in the merged schema: src/skillrepro/schemas/config.schema.yaml with each
  src/skillrepro/schemas/<section>.schema.yaml in place of its `<section>` property (as skillrepro.config checks them). A
  name is a declared property, or any key of a map (`additionalProperties` with a schema: benchmark and
  variant names); a free-form object (no declared properties: benchmark and method `options`, a model's
  `llm` overrides) is checked by its own code and ends the walk.
"""
from __future__ import annotations

import re

import yaml

from skillrepro.config import SCHEMAS
from repo import ROOT

DEVIATIONS = ROOT / "docs" / "deviations.md"
HEADING = "# Deviations from the papers"
SEGMENT = re.compile(r"\.([A-Za-z_][\w-]*|<[^>`]+>)|(\[[^\]`]*\])")
HEAD = re.compile(r"[A-Za-z_][\w-]*")


def merged_schema() -> dict:
    schema = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    for path in sorted(SCHEMAS.glob("*.schema.yaml")):
        if path.name != "config.schema.yaml":  # a study's own sections (skillrepro.config.study_schemas)
            schema["properties"].update(yaml.safe_load(path.read_text())["properties"])
    return schema


def deviations_section(text: str) -> str:
    assert text.startswith(HEADING + "\n"), f"{DEVIATIONS} no longer starts with {HEADING!r}"
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:] if end < 0 else text[start:end]


def config_keys(section: str, top_level: set[str]) -> list[list[str]]:
    """The config keys the section names, each as its segments (see the module docstring)."""
    keys = []
    for span in re.findall(r"`([^`\n]+)`", section):
        head = HEAD.match(span)
        if not head or head.group(0) not in top_level:
            continue
        segments, pos = [head.group(0)], head.end()
        while m := SEGMENT.match(span, pos):
            segments.append(m.group(1) or m.group(2))
            pos = m.end()
        if len(segments) > 1:
            keys.append(segments)
    return keys


def dotted(segments: list[str]) -> str:
    return "".join(s if s.startswith("[") or i == 0 else "." + s for i, s in enumerate(segments))


def _free_form(node: dict) -> bool:
    return "properties" not in node and not isinstance(node.get("additionalProperties"), dict) \
        and node.get("additionalProperties", True) is not False and "items" not in node


def resolve(schema: dict, segments: list[str]) -> str:
    """'' if the key exists in the schema, else why not."""
    node = schema
    for i, seg in enumerate(segments):
        where = dotted(segments[:i]) or "the config"
        if seg.startswith("["):
            if not isinstance(node.get("items"), dict):
                return f"{where} is not a list"
            node = node["items"]
        elif seg in node.get("properties", {}):
            node = node["properties"][seg]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]  # a map: any name, or a <placeholder>
        elif _free_form(node) and not seg.startswith("<"):
            return ""  # checked by its own code (benchmark or method options, a model's llm overrides)
        else:
            return f"{where} has no key {seg!r}"
    return ""


def test_every_config_key_in_the_deviations_section_exists():
    schema = merged_schema()
    keys = config_keys(deviations_section(DEVIATIONS.read_text()), set(schema["properties"]))
    names = {dotted(k) for k in keys}
    # the extraction itself works (a broken rule would otherwise pass on nothing)
    assert {"actor.restate_skills", "scaffold.training.baseline", "kvcache.bank"} <= names, sorted(names)
    problems = [f"`{dotted(k)}`: {why}" for k in keys if (why := resolve(schema, k))]
    assert not problems, "docs/deviations.md names keys the schemas lack:\n" + "\n".join(problems)


def test_the_rule_catches_a_renamed_key_and_reads_paths_as_documented():
    schema = merged_schema()
    text = ("`actor.restate_skill` `scaffold.training.basline: true` `kvcache.models[<name>].llm.model` "
            "`scaffold.executor.<benchmark>.top_p` `protocol.task_seed + s` `benchmarks.babyai.llm_call_budget` "
            "`skillrepro.methods.common.render_traces` `config.yaml` `kvcache_blend_samples.csv` `inducer`")
    keys = config_keys(text, set(schema["properties"]))
    assert [dotted(k) for k in keys] == [
        "actor.restate_skill", "scaffold.training.basline", "kvcache.models[<name>].llm.model",
        "scaffold.executor.<benchmark>.top_p", "protocol.task_seed", "benchmarks.babyai.llm_call_budget"]
    verdicts = [resolve(schema, k) for k in keys]
    assert "no key 'restate_skill'" in verdicts[0] and "no key 'basline'" in verdicts[1]
    assert verdicts[2:] == ["", "", "", ""]
    assert "no key 'nope'" in resolve(schema, ["llm", "nope"])  # a closed section refuses an unknown name


def test_every_method_option_is_named_in_the_deviations():
    """Each option of each registered method (a named setting: an ablation, a deviation or a replaced prompt) is
    named in the section, in backticks (`name` or `name: value`), so that a new option says what it changes."""
    import dataclasses

    from skillrepro.methods import get_method, registry

    section = deviations_section(DEVIATIONS.read_text())
    missing = [f"{name}.{f.name}" for name in sorted(registry())
               if dataclasses.is_dataclass(options := get_method(name).parse_options({}, name))
               for f in dataclasses.fields(options) if f"`{f.name}`" not in section and f"`{f.name}:" not in section]
    assert not missing, f"method options docs/deviations.md does not name: {missing}"
