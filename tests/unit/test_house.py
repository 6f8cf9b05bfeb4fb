"""scripts/house.py: the package's shape as anyone re-runs it — the layer order read from the import
contract (not a copy of it), no import circle in spx, and the rooms/floors/arrows arithmetic."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
HOUSE = REPO / "scripts" / "house.py"


def house() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house", HOUSE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_house_reads_the_layers_of_the_import_contract_and_finds_no_circle() -> None:
    out = subprocess.run([sys.executable, str(HOUSE)], capture_output=True, text=True, check=True, cwd=REPO).stdout
    report = json.loads(out)
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers" and not c.get("containers"))
    assert report["layers"] == layers and "spx.serving" in report["layers"]
    assert report["import_circles"] == [] and report["imports_up_the_layers"] == []
    rooms = report["rooms"]
    assert rooms["package"] == "spx.controller" and rooms["circles"] == []
    assert rooms["rooms"] < rooms["modules"]  # the decision step and the builders are one room each
    assert rooms["floors"] >= 3 and rooms["arrows"] >= rooms["rooms"] - 1


def test_rooms_floors_and_arrows_of_a_small_package() -> None:
    h = house()
    edges = {
        "p.top": {"p.sub.a", "p.mid"},
        "p.mid": {"p.sub.b", "q.elsewhere"},
        "p.sub.a": {"p.sub.b"},
        "p.sub.b": set(),
        "p.x": {"p.y"},
        "p.y": {"p.x"},  # a circle: one floor
    }
    figures = h.rooms_figures("p", edges, REPO / "operator")
    assert figures["rooms"] == 5  # top, mid, sub, x, y
    assert figures["arrows"] == 5  # top→sub, top→mid, mid→sub, x→y, y→x (sub→sub and p→q not counted)
    assert figures["floors"] == 3  # top → mid → sub
    assert figures["circles"] == [["p.x", "p.y"]]
    assert h.room_of("p.sub.a", "p") == "p.sub" and h.room_of("q.a", "p") is None
