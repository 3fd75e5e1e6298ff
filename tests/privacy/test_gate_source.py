"""One gate: no module of pazo but `pazo.run.gate` (and the few listed in ALLOWED, each with its reason)
opens a file for writing, copies, moves, truncates or chmods one, or calls the atomic writers of
`pazo.files.rundir`, so that every file a run, an audit, a sweep or a release leaves goes through the
gate's allow-list (`pazo.run.gate.FILES`). The check reads the package's source (ast), not a run, and
the checkout's tools/ beside it (not installed, but run in the checkout)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo
from conftest import ROOT

PACKAGE = Path(pazo.__file__).parent
#: what is read: the package's modules by their path in it, the checkout's tools/ as `tools/...`
SOURCES = {"": PACKAGE, "tools/": ROOT / "tools"}
#: the modules (a name ending in / : the package's folder) that may write files without the gate,
#: and why (none of them writes into a run's, an audit's, a sweep's or a release's folder)
ALLOWED = {
    "run/gate.py": "the gate itself",
    "files/rundir.py": "the primitives the gate writes with (write_atomic, open_file), the directory's lock and "
                       "the check that it is writable, and Hydra's staged launch record moved into .hydra/",
    "files/cache_files.py": "the data cache, shared by runs, outside any run directory",
    "privacy/sigma_cache.py": "the sigma cache, shared by runs, outside any run directory",
    "commands/start.py": "/dev/null opened as stdout once its reader went away (a broken pipe)",
    "report/": "tables and figures, read from released files, written into the folder the user names",
    "tools/docs/": "the documentation's generated pages, written into docs/ (the checkout's tooling, not "
                   "installed with the package)",
    "bench/": "the benchmarks' result files (timings and accuracies on synthetic or public data)",
}
#: calls that write, copy, move, truncate or chmod a file (by their function's name)
WRITING_CALLS = {
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat"},
    "os": {"open", "rename", "replace", "chmod", "fchmod", "lchmod", "truncate", "ftruncate", "link", "symlink"},
}
WRITING_METHODS = {"write_text", "write_bytes", "chmod", "touch", "symlink_to", "hardlink_to", "savefig"}
PRIMITIVES = {"write_atomic", "write_text_atomic", "save_figure_atomic", "open_file"}


def writes(tree: ast.AST) -> list[str]:
    """The calls in `tree` that write a file: each as 'line: what'."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (what := _writing(node)):
            found.append(f"{node.lineno}: {what}")
    return found


def _writing(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in PRIMITIVES:
            return func.id
        if func.id == "open" and _write_mode(call, 1):
            return "open(..., write mode)"
        return None
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if owner == "os" and func.attr == "open" and _read_only_flags(call):
        return None
    if func.attr in WRITING_CALLS.get(owner, ()) or (owner == "rundir" and func.attr in PRIMITIVES):
        return f"{owner}.{func.attr}"
    if func.attr in WRITING_METHODS and not (func.attr == "savefig" and _to_buffer(call)):
        return f".{func.attr}()"
    if func.attr == "open" and _write_mode(call, 0):
        return ".open(write mode)"
    if func.attr in ("rename", "replace") and len(call.args) == 1 and not call.keywords:
        return f".{func.attr}()"   # Path.rename/replace (str.replace takes two)
    return None


#: os.open's flags that make it a write
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC", "O_EXCL"}


def _read_only_flags(call: ast.Call) -> bool:
    """os.open's flags name O_RDONLY and no flag that writes (flags held in a variable count as a write)."""
    if len(call.args) < 2:
        return False
    names = {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)}
    return "O_RDONLY" in names and not names & WRITE_FLAGS


def _write_mode(call: ast.Call, position: int) -> bool:
    mode = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


def _to_buffer(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Name) and call.args[0].id == "buffer"


def stray_writes() -> dict[str, list[str]]:
    """Every module of the package outside ALLOWED that writes a file, with its writing calls."""
    found = {}
    for prefix, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            name = prefix + path.relative_to(folder).as_posix()
            if not _allowed(name) and (calls := writes(ast.parse(path.read_text(), name))):
                found[name] = calls
    return found


def source_path(name: str) -> Path:
    """The file or folder an entry of ALLOWED names (`tools/...`: the checkout's)."""
    prefix = "tools/" if name.startswith("tools/") else ""
    return SOURCES[prefix] / name.removeprefix(prefix)


def _allowed(name: str) -> bool:
    return any(name == entry or (entry.endswith("/") and name.startswith(entry)) for entry in ALLOWED)


def test_only_the_gate_writes_the_files_of_a_computation():
    assert stray_writes() == {}, "write through pazo.run.gate (or list the module in ALLOWED with its reason)"


def test_every_allowed_module_exists_and_writes():
    """An entry of ALLOWED whose module no longer writes is dropped, so the list stays short."""
    for name in ALLOWED:
        modules = sorted(source_path(name).rglob("*.py")) if name.endswith("/") else [source_path(name)]
        assert any(writes(ast.parse(m.read_text())) for m in modules), f"{name} writes nothing: drop it from ALLOWED"


STRAY = ["Path(run_dir / 'summary.json').write_text(text)", "open(run_dir / 'x.json', 'w')",
         "open(path, mode='a')", "shutil.copy2(src, public / 'model.pt')", "shutil.move(a, b)",
         "os.chmod(path, 0o644)", "path.chmod(0o644)", "write_atomic(path, data)", "rundir.open_file(path)",
         "os.replace(tmp, path)", "staging.rename(public)", "os.open(path, os.O_RDONLY | os.O_CREAT)",
         "os.open(path, flags)", "path.open('wb')", "os.truncate(path, 0)",
         "fig.savefig(run_dir / 'a.png')"]
HARMLESS = ["open(path)", "open(path, 'rb')", "os.open(path, os.O_RDONLY | os.O_NONBLOCK)", "path.read_text()",
            "text.replace('a', 'b')",
            "frame.rename(columns={'a': 'b'})", "fig.savefig(buffer, format='png')", "json.dumps(x)"]


@settings(deadline=None, max_examples=60)
@given(stray=st.sampled_from(STRAY), harmless=st.lists(st.sampled_from(HARMLESS), max_size=4),
       where=st.integers(0, 4))
@example(stray="shutil.copy2(src, public / 'model.pt')", harmless=[], where=0)
def test_a_stray_write_anywhere_in_a_module_is_found(stray, harmless, where):
    """The rule over random module bodies: any writing call among harmless ones is found, and the
    harmless ones alone are not."""
    body = [*harmless]
    lines = [*body[:where], stray, *body[where:]]
    source = "def f(path, run_dir, src, public, a, b, tmp, staging, fig, buffer, data, text, frame, x, flags):\n"
    assert writes(ast.parse(source + "".join(f"    {line}\n" for line in lines)))
    assert not writes(ast.parse(source + "".join(f"    {line}\n" for line in [*body, "pass"])))


@pytest.mark.parametrize("module", ["sweep/launchers.py", "sweep/selection.py", "run/recorder.py", "run/checkpoint.py"])
def test_a_stray_write_added_to_a_writer_fails_the_check(module, monkeypatch):
    """The reported case: a writer that copied a run's folder into a release (mode 0644) fails."""
    source = (PACKAGE / module).read_text() + "\n\ndef leak(run_dir, public):\n    shutil.copytree(run_dir, public)\n"
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == PACKAGE / module
                        else real(self, *a, **k))
    assert module in stray_writes()
