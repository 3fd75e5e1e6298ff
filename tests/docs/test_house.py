"""The drawing of the house (docs/reference/house.md, `tools.docs.house`) follows the package: every
module of every import-linter layer is drawn on its floor, a module added to a layer appears, and a
step of the run's path that the package no longer defines stops the generation, naming it."""
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import ROOT
from tools.docs.house import RUN_PATH, house_page, layers

NAME = st.from_regex(r"[a-z][a-z_]{1,8}", fullmatch=True)


def fake_package(root, floors):
    """A package folder holding each module of `floors` (`pkg.x`: x.py; `pkg.d`: a folder d/ with a.py)."""
    package = root / "pkg"
    package.mkdir(exist_ok=True)
    for layer in floors:
        for module in layer:
            name = module.split(".")[1]
            if name.startswith("d"):
                (package / name).mkdir(exist_ok=True)
                (package / name / "a.py").write_text("")
            else:
                (package / f"{name}.py").write_text("def f():\n    pass\n")
    return package


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAME, min_size=1, max_size=8, unique=True), cuts=st.lists(st.booleans(), min_size=8, max_size=8))
@example(names=["train", "dmethods", "errors"], cuts=[True] * 8)
def test_every_module_of_every_layer_is_drawn_on_its_floor(names, cuts, tmp_path):
    floors, layer = [], []
    for name, cut in zip(names, cuts):
        layer.append(f"pkg.{name}")
        if cut:
            floors.append(layer)
            layer = []
    floors += [layer] if layer else []
    page = house_page(floors, path=[], package=fake_package(tmp_path, floors))
    drawing = page.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    for index, modules in enumerate(floors):
        floor = [line for line in drawing if line.startswith(f"floor {len(floors) - index:2d}  ")]
        start = drawing.index(floor[0])
        block = "\n".join(drawing[start:start + len(modules) * 3])
        for module in modules:
            name = module.split(".")[1]
            assert (f"pkg/{name}/ (a)" if name.startswith("d") else f"pkg/{name}.py") in block


def test_a_step_of_the_run_the_package_no_longer_defines_stops_the_page():
    with pytest.raises(ValueError, match=r"pazo\.run\.loop\.no_such_loop"):
        house_page(path=[*RUN_PATH, ("pazo.run.loop", "no_such_loop", "gone")])
    with pytest.raises(ValueError, match="which the package does not have"):
        house_page([*layers(), ["pazo.no_such_room"]], path=[])


def test_the_committed_drawing_is_the_package_today():
    assert (ROOT / "docs" / "reference" / "house.md").read_text() == house_page(), "run `make docs-pages`"
