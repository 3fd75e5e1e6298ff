"""The configuration reference, read from configs/: every config file's keys with their defaults and
the comments written beside them, and, for a method, the fields its typed schema adds with theirs:
printed whole or by part by this command, and the docs' generated page.

The comments are read with a line parser (the YAML files are plain block mappings: `key: value  #
comment`, a comment block above a key, a `defaults:` list) and the values with PyYAML."""
from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from pazo.commands.start import command
from pazo import CONFIG_DIR

KEY = re.compile(r"""^(?P<indent>\s*)(?P<key>[^\s#'"\-][^:#]*?|'[^']*'|"[^"]*"):(?:\s+(?P<rest>.*))?$""")
ITEM = re.compile(r"^(?P<indent>\s*)-\s+(?P<rest>.*)$")
#: the groups of the training config, in the order a reader meets them
GROUPS = ("dataset", "model", "method", "privacy", "logger", "experiment", "tuning", "hydra/job_logging")


@dataclass
class Entry:
    key: str                 # dotted path in its file, or a defaults-list entry
    value: object = None
    comment: str = ""
    section: bool = False    # a mapping (its keys follow)


def split_comment(text: str) -> tuple[str, str]:
    """`value  # comment` -> (value, comment), a `#` inside quotes or without a space before it kept."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def parse(text: str) -> tuple[list[str], list[Entry], list[Entry]]:
    """A YAML file's header comment, its defaults-list entries and its keys, each with its comment."""
    data = yaml.safe_load(text) or {}
    header, defaults, entries, pending = [], [], [], []
    stack: list[tuple[int, str]] = []
    seen_key = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            pending = []
            continue
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if not seen_key:
                if not comment.startswith("@package"):
                    header.append(comment)
            else:
                pending.append(comment)
            continue
        seen_key = True
        item = ITEM.match(line)
        if item and stack and stack[-1][1] == "defaults" and len(item["indent"]) >= stack[-1][0]:
            value, comment = split_comment(item["rest"])
            defaults.append(Entry(value, comment=comment or " ".join(pending)))
            pending = []
            continue
        match = KEY.match(line)
        if not match:
            pending = []
            continue
        indent, key = len(match["indent"]), match["key"].strip("'\"")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        stack.append((indent, key))
        rest, comment = split_comment(match["rest"] or "")
        comment = comment or " ".join(pending)
        pending = []
        if path == ["defaults"]:
            continue
        value = lookup(data, path)
        entries.append(Entry(".".join(path), value, comment, section=isinstance(value, dict) and not rest))
    return header, defaults, entries


def lookup(data, path: list[str]):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def yaml_value(value) -> str:
    """A value as it would be written on the command line or in YAML."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def code(text: str) -> str:
    return f"``{text}``" if "`" in text else f"`{text}`"


def schema_fields(cls) -> list[Entry]:
    """A dataclass schema's fields with their defaults and the comments written beside them in its source."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        for line in inspect.getsource(klass).splitlines():
            match = re.match(r"^\s+(\w+)\s*:[^=#]+(?:=[^#]*)?#\s*(.*)$", line)
            if match:
                comments[match[1]] = match[2].strip()
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        out.append(Entry(f.name, default, comments.get(f.name, "")))
    return out


def key_table(entries: list[Entry], prefix: str = "") -> list[str]:
    lines = ["| key | default | comment |", "|---|---|---|"]
    for e in entries:
        if e.section and not e.comment:
            continue
        value = "" if e.section else code(yaml_value(e.value))
        lines.append(f"| {code(prefix + e.key)} | {value} | {escape(e.comment)} |")
    return lines


def defaults_table(defaults: list[Entry]) -> list[str]:
    lines = ["| defaults entry | comment |", "|---|---|"]
    lines += [f"| {code(d.key)} | {escape(d.comment)} |" for d in defaults]
    return lines


def file_section(path: Path, level: str, title: str, prefix: str) -> list[str]:
    text = path.read_text()
    header, defaults, entries = parse(text)
    rel = path.relative_to(CONFIG_DIR.parent).as_posix()
    lines = [f"{level} {title}", "", f"`{rel}`" + (": " + escape(" ".join(header)) if header else ""), ""]
    schema = next((d.key for d in defaults if d.key.endswith("_schema")), None)
    if defaults and not schema:
        lines += [*defaults_table(defaults), ""]
    if entries:
        lines += [*key_table(entries, prefix), ""]
    if schema:
        from pazo.methods.registry import method_info

        info = method_info(schema.removesuffix("_schema"))
        given = {e.key for e in entries}
        rest = [f for f in schema_fields(info.config) if f.key not in given]
        if rest:
            lines += [f"Fields of the schema `{info.config.__name__}` ({info.config.__module__}) this file "
                      "leaves at their defaults:", "", *key_table(rest, prefix), ""]
    return lines


def is_global(path: Path) -> bool:
    return "@package _global_" in path.read_text()


def options(group: str) -> list[Path]:
    return sorted((CONFIG_DIR / group).glob("*.yaml"))


#: what `pazo-report configs <part>` prints besides a group: the two top-level configs and the sweeps
PARTS = ("config", "audit", "sweeps")


def configs_page() -> str:
    lines = ["# Configuration reference", "",
             "Generated from `configs/` by `make docs-pages`: every config file's keys, their "
             "defaults and the comments beside them. On the command line, `key=value` overrides a key "
             "(`privacy.epsilon=0.5`), `group=option` picks a config group's option (`method=dpzero`); "
             "see [the command lines](cli.md).", ""]
    lines += part_section("config") + part_section("audit")
    lines += ["## Config groups", "",
              "Each group's options; a key is written as on the command line (`dataset.public_fraction`). "
              "Files marked `@package _global_` (experiments, tuning) set keys anywhere in the config.", ""]
    for group in GROUPS:
        lines += group_section(group)
    lines += part_section("sweeps")
    return "\n".join(lines).rstrip() + "\n"


def part_of_key(name: str) -> str | None:
    """The part whose file sets the top-level key `name` (`train`: config), for a key given as a part."""
    for part in ("config", "audit"):
        keys = yaml.safe_load((CONFIG_DIR / f"{part}.yaml").read_text()) or {}
        if name in keys and name != "defaults":
            return part
    return None


def part_section(part: str) -> list[str]:
    """The section of the page on `config.yaml`, `audit.yaml` or the sweeps (PARTS)."""
    if part == "config":
        return file_section(CONFIG_DIR / "config.yaml", "##", "The training run: `config.yaml`", "")
    if part == "audit":
        return file_section(CONFIG_DIR / "audit.yaml", "##", "The privacy audit: `audit.yaml`", "")
    lines = ["## Sweeps", "",
             "Sweep specifications for `pazo-sweep <spec>` (`configs/sweeps/`), the per-setting grids "
             "they expand (`configs/sweeps/grids/`), and the launchers (`--launcher`, "
             "`configs/sweeps/launchers/`).", ""]
    for folder, what in (("sweeps", "sweep"), ("sweeps/grids", "grid"), ("sweeps/launchers", "launcher")):
        lines += [f"### {what.capitalize()}s", ""]
        for path in options(folder):
            lines += file_section(path, "####", f"{what} {path.stem}", "")
    return lines


def group_section(group: str) -> list[str]:
    """One config group's options, each file's keys with their defaults and comments."""
    import pazo.methods  # noqa: F401  (registers every method's schema)

    paths = options(group)
    names = ", ".join(f"`{p.stem}`" for p in paths)
    lines = [f"### {group}", "", f"Options: {names}.", ""]
    if group == "tuning":
        return lines + tuning_tables(paths)
    for path in paths:
        prefix = "" if is_global(path) else group.replace("/", ".") + "."
        if group == "hydra/job_logging":
            prefix = "hydra.job_logging."
        lines += file_section(path, "####", f"{group}={path.stem}", prefix)
    return lines


def tuning_tables(paths: list[Path]) -> list[str]:
    """The per-setting method defaults (configs/tuning/<setting>_<method>.yaml), one table per setting."""
    from pazo.methods.registry import method_names

    methods = sorted(method_names(), key=len, reverse=True)
    by_setting: dict[str, list[tuple[str, Path]]] = {}
    for path in paths:
        method = next((m for m in methods if path.stem.endswith("_" + m)), None)
        setting = path.stem.removesuffix("_" + method) if method else path.stem
        by_setting.setdefault(setting, []).append((method or "", path))
    lines = ["Applied on top of a method's own defaults when its dataset and method match "
             "(`optional tuning: ${dataset}_${method}`).", ""]
    for setting, files in by_setting.items():
        lines += [f"#### tuning for {setting}", "", "| method | key | value | comment |", "|---|---|---|---|"]
        for method, path in files:
            _, _, entries = parse(path.read_text())
            for e in entries:
                if not e.section:
                    lines.append(f"| {method} | {code(e.key)} | {code(yaml_value(e.value))} | {escape(e.comment)} |")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    """`pazo-report configs [PART ...]`: the configuration reference on stdout (what the docs' page
    docs/reference/configs.md holds, read from the installed configs/), whole or in parts."""
    from pazo.commands.start import ArgumentParser, summary_of
    from pazo.errors import unknown_choice

    choices = (*PARTS, *GROUPS)
    parser = ArgumentParser(prog="pazo-report configs", description=summary_of(__doc__))
    parser.add_argument("parts", nargs="*", metavar="PART",
                        help=f"a config group or file: {', '.join(choices)} (default: all)")
    args = parser.parse_args(argv)
    wrong = [p for p in args.parts if p not in choices]
    if wrong:
        home = part_of_key(wrong[0])
        parser.error(f"unknown part {wrong[0]!r}: {wrong[0]} is a key of {home}.yaml, in part {home} (pazo-report "
                     f"configs {home})" if home else unknown_choice("part", wrong[0], choices))
    if not args.parts:
        print(configs_page(), end="")
        return 0
    lines = [line for part in args.parts for line in (part_section(part) if part in PARTS else group_section(part))]
    print("\n".join(lines).rstrip())
    return 0


#: `pazo-report configs`, `python -m pazo.report.config_reference`.
cli = command(main)


if __name__ == "__main__":
    cli()
