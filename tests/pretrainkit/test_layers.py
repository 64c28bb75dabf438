"""The imports between the source folders point one way (issue 48, part 3).

- Layers: the core (`pretrainkit/` and its subfolders, but the console `pretrainkit/cli.py`) imports
  none of `dataprep`, `shards`, `mixtures`, `train`; `shards` imports only the core; `mixtures` imports
  `shards` and the core; `dataprep` imports neither `mixtures` nor `train`.
- No circle between folders, at any level: between top folders (`dataprep` and `train`), between
  subfolders anywhere (`dataprep/dedup` and `dataprep/paragraphs`, `pretrainkit/remote` and
  `train/checkpoint`), and between a package's own modules (`train/config.py` is folder `train`) and
  its subfolders (`train/loop`).
- A folder's `cli.py` / `__main__.py` may import anything below it (its folder and subfolders; for the
  console, every package): those imports count for neither check. What else it imports counts.

The graph is read from the source with `ast`, not by importing it: every `import` and `from ... import`
counts, those inside functions too, but those under `if TYPE_CHECKING:` (never run). Each module
belongs to the folder that holds its file; an imported name is resolved as Python does, through
the package path of `pretrainkit` (`pretrainkit/`, then the checkout root, where `dataprep/` ... `train/` are).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = "pretrainkit"
PACKAGES = (CORE, "dataprep", "shards", "mixtures", "train")
ENTRY_POINTS = ("cli.py", "__main__.py")  # a folder's commands: they may import anything below them
# The top folders each layer may not import.
FORBIDDEN = {
    CORE: {"dataprep", "shards", "mixtures", "train"},
    "shards": {"dataprep", "mixtures", "train"},
    "mixtures": {"dataprep", "train"},
    "dataprep": {"mixtures", "train"},
    "train": set(),
}


@dataclass(frozen=True)
class Import:
    file: str  # the importing file, relative to the root
    line: int
    name: str  # the dotted name as imported (`pretrainkit.shards.reader.ShardSet`)
    source: str  # the importing file's folder
    target: str  # the imported module's folder

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: import {self.name}"


@dataclass(frozen=True)
class Violation:
    key: tuple[str, str] | frozenset[str]  # a layer break's (source, target) folders, or a circle's folders
    lines: tuple[str, ...]  # what it is, then the imports that make it

    def __str__(self) -> str:
        return "\n    ".join(self.lines)


def module_file(root: Path, dotted: str) -> Path | None:
    """The file of the module that a `pretrainkit.` name is, or lies in (`pretrainkit.shards.ShardSet`:
    shards/__init__.py); None for any other name."""
    parts = dotted.split(".")
    if parts[0] != CORE:
        return None
    for end in range(len(parts), 0, -1):
        for base in (root / CORE, root):  # the package path of pretrainkit
            path = base.joinpath(*parts[1:end])
            if end > 1 and path.with_suffix(".py").is_file():
                return path.with_suffix(".py")
            if (path / "__init__.py").is_file():
                return path / "__init__.py"
    return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == CORE else [CORE, *parts])


def imported_names(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in `tree` but those under `if TYPE_CHECKING:`; relative
    imports resolved against `package`."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def folder_imports(root: Path) -> list[Import]:
    """Every import of one package folder's module by another folder's file."""
    imports = []
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            name = module_name(root, path)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            source = path.parent.relative_to(root).as_posix()
            for line, dotted in imported_names(ast.parse(path.read_text(encoding="utf-8"), str(path)), package):
                target_file = module_file(root, dotted)
                if target_file is None:
                    continue
                target = target_file.parent.relative_to(root).as_posix()
                if target != source:
                    imports.append(Import(path.relative_to(root).as_posix(), line, dotted, source, target))
    return imports


def checked(imports: list[Import]) -> list[Import]:
    """The imports but those of a folder's cli.py / __main__.py of its own folder or below it (for the
    console, `pretrainkit/cli.py`, every package: `pretrainkit.dataprep` lies below `pretrainkit`)."""
    return [imp for imp in imports if not (Path(imp.file).name in ENTRY_POINTS and _below(imp.target, imp.source))]


def _below(folder: str, above: str) -> bool:
    inside, outside = (f if f.split("/")[0] == CORE else f"{CORE}/{f}" for f in (folder, above))
    return inside == outside or inside.startswith(outside + "/")


def layer_breaks(imports: list[Import]) -> list[Violation]:
    by_edge: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for imp in imports:
        if imp.target.split("/")[0] in FORBIDDEN[imp.source.split("/")[0]]:
            by_edge[(imp.source, imp.target)].append(imp)
    return [
        Violation(edge, (f"layer break: {edge[0]} imports {edge[1]}", *map(str, found)))
        for edge, found in sorted(by_edge.items())
    ]


def circles(imports: list[Import]) -> list[Violation]:
    """The circles between folders at each depth (a folder deeper than it counted as its ancestor there)."""
    depth = max(len(f.split("/")) for imp in imports for f in (imp.source, imp.target))
    found: dict[frozenset[str], Violation] = {}
    for level in range(1, depth + 1):
        edges: dict[tuple[str, str], list[Import]] = defaultdict(list)
        for imp in imports:
            a, b = ("/".join(f.split("/")[:level]) for f in (imp.source, imp.target))
            if a != b:
                edges[(a, b)].append(imp)
        for component in _strongly_connected({a: [b for x, b in edges if x == a] for a, _ in edges}):
            inside = sorted((a, b) for a, b in edges if a in component and b in component)
            lines = [f"circle between {', '.join(sorted(component))}:"]
            lines += [f"{a} -> {b}: {edges[(a, b)][0]}" for a, b in inside]  # the first import of each edge
            found.setdefault(frozenset(component), Violation(frozenset(component), tuple(lines)))
    return list(found.values())


def _strongly_connected(graph: dict[str, list[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, []):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def violations(root: Path) -> list[Violation]:
    imports = checked(folder_imports(root))
    return layer_breaks(imports) + circles(imports)


def test_imports_point_one_way():
    found = [str(v) for v in violations(ROOT)]
    assert not found, "imports that break the layers or close a circle (see this file's docstring):\n" + "\n".join(
        found
    )


def write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    for folder in path.relative_to(root).parents[:-1]:
        (root / folder / "__init__.py").touch()


def test_the_checker_finds_layer_breaks_and_circles(tmp_path):
    write(tmp_path, "pretrainkit/errors.py")
    write(tmp_path, "pretrainkit/cli.py", "import pretrainkit.train.cli\n")  # the console joins everything
    write(tmp_path, "pretrainkit/remote/urls.py", "from pretrainkit.shards import reader\n")
    write(tmp_path, "shards/reader.py", "from pretrainkit import errors\n")
    write(tmp_path, "dataprep/dedup/index.py", "def f():\n    from pretrainkit.dataprep.paragraphs.scan import g\n")
    write(tmp_path, "dataprep/paragraphs/scan.py", "from ..dedup import index\n")
    write(tmp_path, "dataprep/extract/cli.py", "from pretrainkit.dataprep.filter import rules\n")  # beside it
    write(tmp_path, "dataprep/filter/rules.py", "import pretrainkit.dataprep.extract.html\n")
    write(tmp_path, "dataprep/extract/html.py")
    write(
        tmp_path, "mixtures/mixture.py", "import typing\nif typing.TYPE_CHECKING:\n    import pretrainkit.train.run\n"
    )
    write(tmp_path, "train/cli.py", "import pretrainkit.train.loop.run\n")  # below it
    write(tmp_path, "train/config.py")
    write(
        tmp_path,
        "train/loop/run.py",
        "from pretrainkit.train import config\nfrom pretrainkit.mixtures import mixture\n",
    )

    found = {v.key: str(v) for v in violations(tmp_path)}

    assert set(found) == {
        ("pretrainkit/remote", "shards"),
        frozenset({"pretrainkit", "shards"}),  # the same import, seen between top folders
        frozenset({"dataprep/dedup", "dataprep/paragraphs"}),
        frozenset({"dataprep/extract", "dataprep/filter"}),
    }
    assert "pretrainkit/remote/urls.py:1: import pretrainkit.shards.reader" in found[("pretrainkit/remote", "shards")]
    circle = found[frozenset({"dataprep/dedup", "dataprep/paragraphs"})]
    assert "dataprep/dedup/index.py:2: import pretrainkit.dataprep.paragraphs.scan.g" in circle
    assert "dataprep/paragraphs/scan.py:1: import pretrainkit.dataprep.dedup.index" in circle
