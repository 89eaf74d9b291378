"""The layers of src/trainprof point one way, read from the source with ``ast``.

Every import counts, those inside functions too; only those under ``if TYPE_CHECKING:`` do not
(they never run). The rules follow the pipeline: capture -> trace -> analysis ->
diagnose -> report, with commands on top (docs/architecture.md).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "trainprof"

#: (importer, imported, why): no module under the first may import one under the second.
RULES = [
    ("trainprof.capture", "trainprof.report", "capture never prints a report"),
    ("trainprof.capture", "trainprof.history", "capture never stores a run"),
    ("trainprof.history", "trainprof.capture", "the store does not know the recorder"),
    ("trainprof.report", "trainprof.trace.load", "renderers do not load traces"),
    ("trainprof.report", "trainprof.pipeline", "renderers do not run the pipeline"),
    ("trainprof.report", "trainprof.commands", "renderers do not run commands"),
    ("trainprof.analysis", "trainprof.diagnose", "facts do not depend on verdicts"),
    ("trainprof.analysis", "trainprof.report", "facts never print"),
    ("trainprof.analysis", "trainprof.commands", "facts do not run commands"),
    ("trainprof.trace", "trainprof.analysis", "reading knows nothing of analysis"),
]
#: The only module outside commands/ that may import it: the command line, which calls it.
COMMAND_CALLERS = {"trainprof.cli"}


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package under ``root``."""
    names = {}
    for path in (root / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may bring in (``from a import b``: a.b and a)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        parent = here[: len(here) - (node.level - 1)]
        base = ".".join([*parent, base] if base else parent)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere but under TYPE_CHECKING."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for orelse in child.orelse:  # the else branch does run
                    visit(ast.Module(body=[orelse], type_ignores=[]))
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                names = _imported(child, module, is_package)
                if isinstance(child, ast.ImportFrom):  # a submodule if there is one, else base
                    names = [n for n in names[:-1] if n in known] or names[-1:]
                found.update(n for n in names if n in known and n != module)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    names = module_names(root)
    return {m: imports_of(p, m, set(names)) for m, p in names.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other (strongly connected, more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def breaches(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that crosses a layer the wrong way."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            for importer, imported, why in RULES:
                if _under(module, importer) and _under(target, imported):
                    out.append(f"{module} -> {target}: {why}")
            if (_under(target, "trainprof.commands") and not _under(module, "trainprof.commands")
                    and module not in COMMAND_CALLERS):
                out.append(f"{module} -> {target}: only the command line calls commands")
    return out


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph(SRC)) == []


def test_every_import_points_down_the_layers():
    assert breaches(import_graph(SRC)) == []


def test_the_commands_exist_and_the_command_line_reaches_them():
    graph = import_graph(SRC)
    commands = {m for m in graph if m.startswith("trainprof.commands.")}
    for name in ("analyze", "report", "compare", "annotate", "run", "memory", "history",
                 "bench"):
        assert f"trainprof.commands.{name}" in commands, name


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of src/trainprof to break on purpose."""
    shutil.copytree(SRC / PACKAGE, tmp_path / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__", "*.json", "templates"))
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_checker_catches_a_layer_breach_even_inside_a_function(package_copy):
    _append(package_copy / PACKAGE / "capture" / "writer.py",
            "\n\ndef _print_it():\n    from trainprof.report.terminal.report import print_analysis\n")
    _append(package_copy / PACKAGE / "report" / "json.py",
            "\n\nfrom ..trace import load as _load\n")  # a relative import is resolved too
    found = breaches(import_graph(package_copy))
    assert found == [
        "trainprof.capture.writer -> trainprof.report.terminal.report: capture never prints a report",
        "trainprof.report.json -> trainprof.trace.load: renderers do not load traces",
    ]


def test_the_checker_catches_a_command_imported_from_below(package_copy):
    _append(package_copy / PACKAGE / "analysis" / "overview" / "steps.py",
            "\nimport trainprof.commands.analyze\n")
    found = breaches(import_graph(package_copy))
    assert "trainprof.analysis.overview.steps -> trainprof.commands.analyze: facts do not run commands" \
        in found
    assert ("trainprof.analysis.overview.steps -> trainprof.commands.analyze: only the command line "
            "calls commands") in found


def test_the_checker_catches_a_cycle_but_not_a_type_checking_import(package_copy):
    stats = package_copy / PACKAGE / "stats.py"
    _append(stats, "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from trainprof.formatting import size\n")
    assert cycles(import_graph(package_copy)) == []  # formatting does not import stats: fine
    _append(package_copy / PACKAGE / "formatting.py",
            "\n\ndef _late():\n    from trainprof import stats\n")
    assert cycles(import_graph(package_copy)) == []  # stats -> formatting is TYPE_CHECKING only
    _append(stats, "\nimport trainprof.formatting\n")
    assert cycles(import_graph(package_copy)) == [["trainprof.formatting", "trainprof.stats"]]
