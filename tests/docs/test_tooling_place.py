"""The documentation's own tooling lives in the checkout's tools/docs/, not in the package a user
installs: `pip install .` ships `pazo*` only (pyproject.toml's packages.find), no module of pazo is
the docs' tooling or imports it, and the Makefile's targets run it from the checkout."""
import ast
import tomllib

from setuptools import find_packages

from conftest import ROOT
from tools import docs


def shipped_packages() -> list[str]:
    """The packages a non-editable `pip install .` would ship, by pyproject.toml's own rule."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))


def imported_modules(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_the_docs_tooling_is_not_shipped():
    shipped = shipped_packages()
    assert "pazo" in shipped and "pazo.report" in shipped
    assert not [p for p in shipped if p == "tools" or p.startswith("tools.")], shipped


def test_no_module_of_the_package_is_or_imports_the_docs_tooling():
    package = ROOT / "pazo"
    assert not sorted(package.rglob("docs_*.py"))
    users = [str(p.relative_to(package)) for p in package.rglob("*.py")
             if any(m == "tools" or m.startswith("tools.") for m in imported_modules(p))]
    assert users == [], users


def test_every_docs_command_names_a_module_of_the_tooling():
    for module, _ in docs.COMMANDS.values():
        assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module
    makefile = (ROOT / "Makefile").read_text()
    assert "-m tools.docs pages --check" in makefile and "-m tools.docs run" in makefile
