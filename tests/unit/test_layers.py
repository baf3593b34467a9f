"""The import layers of docs/design.md, enforced: dependencies point down, and siblings keep to themselves.

Read from the source with ``ast`` (every import, also those inside functions): a module may import its
own package, or a package of a lower layer. Within a layer, only the bottom layer's modules may import
each other (``rundir`` uses ``errors``); bench, gates and quality never import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

SRC = ROOT / "src" / "inferencekit"

# Top to bottom (docs/design.md, "Layers"; docs/architecture.md). ``registry`` and ``options`` are the face's
# vocabulary: only the face and commands/ may use them.
LAYERS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"commands"},
    {"options"},
    {"registry"},
    {"verify"},
    {"bench", "gates", "quality"},
    {"cheats", "data"},
    {"api"},
    {"report"},
    {"engines", "evidence"},
    {"rundir", "stats", "sequential", "errors", "shapes", "redact", "extras", "inferencekit"},
]
BOTTOM = LAYERS[-1]


def unit_of(module: str) -> str:
    """The layer unit of ``inferencekit.x.y`` (``x``), ``inferencekit`` itself for the package's face."""
    parts = [p for p in module.split(".") if p != "__init__"]
    return parts[1] if len(parts) > 1 else "inferencekit"


def layer_of(unit: str) -> int:
    return next(i for i, group in enumerate(LAYERS) if unit in group)


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every inferencekit import of one file (relative imports resolved)."""
    rel = path.relative_to(SRC.parent).with_suffix("")
    here = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    pkg = here if rel.name == "__init__" else here.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "inferencekit"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] == "inferencekit":
                out.append((node.lineno, base))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        me = unit_of(".".join(rel.parts))
        for line, target in imports(path):
            other = unit_of(target)
            if other == me:
                continue
            mine, theirs = layer_of(me), layer_of(other)
            if theirs < mine or (theirs == mine and mine != len(LAYERS) - 1):
                found.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {target} ({other} is "
                             f"{'above it' if theirs < mine else 'its sibling'})")
    return found


def test_every_package_is_in_a_layer():
    units = {unit_of(".".join(p.relative_to(SRC.parent).with_suffix("").parts)) for p in SRC.rglob("*.py")}
    placed = set().union(*LAYERS)
    assert units <= placed, f"not in LAYERS: {sorted(units - placed)}"


def test_imports_point_down_and_siblings_keep_apart():
    assert violations() == []


@pytest.mark.parametrize(("module", "source", "expected"), [
    ("gates/x.py", "from inferencekit.commands import bench\n",
     "gates imports inferencekit.commands (commands is above it)"),
    ("bench/x.py", "from inferencekit.registry import Arg\n",
     "bench imports inferencekit.registry (registry is above it)"),
    ("api/x.py", "def f():\n    from inferencekit.gates.check import check_run_dir\n",
     "api imports inferencekit.gates.check"),
    ("report/x.py", "import inferencekit.api.client\n", "report imports inferencekit.api.client (api is above it)"),
    ("quality/x.py", "from inferencekit.bench import plan\n",
     "quality imports inferencekit.bench (bench is its sibling)"),
    ("rundir.py", "from inferencekit.errors import OpError\n", None),
    ("gates/judges/x.py", "from ..result import Gate\n", None),
    ("bench/x.py", "from ..gates import GATES\n", "bench imports inferencekit.gates (gates is its sibling)"),
])
def test_the_check_catches_what_it_should(tmp_path, monkeypatch, module, source, expected):
    fake = tmp_path / "src" / "inferencekit"
    (fake / module).parent.mkdir(parents=True, exist_ok=True)
    (fake / module).write_text(source)
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", fake)
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    found = violations()
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def module_graph() -> dict[str, set[str]]:
    """Module → the inferencekit modules it imports (inside functions too). ``from pkg import name`` names the
    module ``pkg.name`` when that is a file, else ``pkg`` itself (its ``__init__``)."""
    files = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        out = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                rel = path.relative_to(SRC.parent).with_suffix("")
                pkg = ".".join(rel.parts[:-1])
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                    if target in files and target != mod:
                        out.add(target)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in files and a.name != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import loop once, as the modules along it (depth-first search, back edges)."""
    found, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def test_no_module_imports_itself_round_a_loop():
    # the layer rule above skips imports inside one package; a loop there is caught here
    assert cycles(module_graph()) == []


def test_the_loop_check_finds_a_loop_inside_one_package():
    graph = {"inferencekit.gates.a": {"inferencekit.gates.b"}, "inferencekit.gates.b": {"inferencekit.gates.c"},
             "inferencekit.gates.c": {"inferencekit.gates.a"}, "inferencekit.stats": set()}
    assert cycles(graph) == [["inferencekit.gates.a", "inferencekit.gates.b", "inferencekit.gates.c",
                              "inferencekit.gates.a"]]


# rundir.py owns the run-dir layout (docs/architecture.md): other modules name its folders through RunDir's
# paths and readers, never by joining the folder names onto ``run.path`` themselves.
LAYOUT_FOLDERS = ("inputs", "outputs", "probes", "quality", "appliance", "evidence", "superseded")


def hand_built_paths(text: str) -> list[int]:
    """Lines of ``text`` that join a run-dir folder name onto ``run.path`` (``run.path / "quality"``)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                and isinstance(node.left, ast.Attribute) and node.left.attr == "path"
                and isinstance(node.right, ast.Constant) and node.right.value in LAYOUT_FOLDERS):
            out.append(node.lineno)
    return out


def test_only_rundir_builds_run_dir_paths():
    found = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py")) if p.name != "rundir.py"
             for line in hand_built_paths(p.read_text())]
    assert found == []


def test_the_layout_check_sees_a_hand_built_path():
    assert hand_built_paths('x = run.path / "quality" / label\ny = run.quality_dir(label)\n') == [1]
    assert hand_built_paths('z = self.path / "evidence"\n') == [1]
    assert hand_built_paths('w = run.path / "run.json"\n') == []
