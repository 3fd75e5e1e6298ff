"""An outside package written to disk in the form `pip install` leaves it: its modules beside a
`<name>-<version>.dist-info` folder whose `entry_points.txt` names them in the `pazo.plugins`
group. Putting the folder on a process's path (PYTHONPATH, `sys.path`) installs it, no network."""
from __future__ import annotations

from pathlib import Path


def write_package(root: Path, modules: dict[str, str], entry_points: dict[str, str],
                  dist: str = "my_pazo_plugin", version: str = "0.1") -> Path:
    """`modules`: module name -> source; `entry_points`: entry-point name -> module. Returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = ["[pazo.plugins]", *(f"{name} = {module}" for name, module in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text("")
    return root
