"""The layers of src/trainprof point one way, read from the source with ``ast``.

Every import counts, those inside functions too; only those under ``if TYPE_CHECKING:`` do not
(they never run). Importing a module also runs each enclosing package's ``__init__``, and a
module name given literally to ``importlib.import_module`` is an import too. A layer is broken
when a module reaches a forbidden one directly or through any chain of imports (the same rules
and the same reading as ``../shared/tools/check_imports.py``). The rules follow the pipeline:
capture -> trace -> analysis -> diagnose -> report, with commands on top
(docs/architecture.md).
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections import deque
from collections.abc import Callable
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
#: The only module outside commands/ that may import it: the command line, which calls it (a
#: chain of imports through it, such as ``python -m trainprof``'s, is the command line's).
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
            elif _literal_import_module(child):
                assert isinstance(child, ast.Call)
                name = child.args[0].value  # type: ignore[attr-defined]
                if name in known and name != module:
                    found.add(name)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    # importing a module inside a package runs each enclosing package's __init__ first
    for target in list(found):
        parts = target.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in known and parent != module and not module.startswith(parent + "."):
                found.add(parent)
    return found


def _literal_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("trainprof.x")`` (or ``import_module(...)``), a literal name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    return called == "import_module" and isinstance(first, ast.Constant) \
        and isinstance(first.value, str)


def import_graph(root: Path) -> dict[str, set[str]]:
    names = module_names(root)
    return {m: imports_of(p, m, set(names)) for m, p in names.items()}


@functools.cache
def source_graph() -> dict[str, set[str]]:
    """src/trainprof's import graph, read once per test run."""
    return import_graph(SRC)


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


def _chain(graph: dict[str, set[str]], start: str, forbidden: Callable[[str], bool],
           stop: frozenset[str] = frozenset()) -> list[str] | None:
    """The shortest chain of imports from ``start`` to a module ``forbidden`` names, or None;
    the chains do not go on through the modules in ``stop``."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here != start and here in stop:
            continue
        if reached := [t for t in graph[here] if forbidden(t)]:
            chain = [max(reached, key=len), here]  # the module itself rather than its package
            while (back := came_from[chain[-1]]) is not None:
                chain.append(back)
            return chain[::-1]
        for target in sorted(graph[here]):
            if target not in came_from:
                came_from[target] = here
                queue.append(target)
    return None


def breaches(graph: dict[str, set[str]]) -> list[str]:
    """One line per module that reaches across a layer the wrong way, with the shortest chain
    of imports that does."""
    out = []
    for module in sorted(graph):
        for importer, imported, why in RULES:
            if _under(module, importer):
                chain = _chain(graph, module, lambda m, imported=imported: _under(m, imported))
                if chain:
                    out.append(f"{' -> '.join(chain)}: {why}")
        if not _under(module, "trainprof.commands") and module not in COMMAND_CALLERS:
            chain = _chain(graph, module, lambda m: _under(m, "trainprof.commands"),
                           stop=frozenset(COMMAND_CALLERS))
            if chain:
                out.append(f"{' -> '.join(chain)}: only the command line calls commands")
    return out


def test_the_package_has_no_import_cycle():
    assert cycles(source_graph()) == []


def test_every_import_points_down_the_layers():
    assert breaches(source_graph()) == []


def test_the_commands_exist_and_the_command_line_reaches_them():
    graph = source_graph()
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
    # the two modules themselves, and (a few of) the modules that reach them
    assert {
        "trainprof.capture.writer -> trainprof.report.terminal.report: capture never prints a report",
        "trainprof.capture.profiler -> trainprof.capture.writer -> "
        "trainprof.report.terminal.report: capture never prints a report",
        "trainprof.report.json -> trainprof.trace.load: renderers do not load traces",
        "trainprof.report.html.report -> trainprof.report.json -> trainprof.trace.load: renderers "
        "do not load traces",
    } <= set(found)
    assert all(line.endswith(("capture never prints a report", "renderers do not load traces"))
               for line in found), found


def test_the_checker_follows_chains_packages_and_import_module(package_copy):
    """A breach two modules away, one through a package's ``__init__`` and one through
    ``importlib.import_module`` with a literal name are all found."""
    _append(package_copy / PACKAGE / "trace" / "kernel_class.py",
            "\n\ndef _helper():\n    import trainprof.formatting\n")
    _append(package_copy / PACKAGE / "formatting.py",
            "\n\ndef _later():\n    import importlib\n"
            "    return importlib.import_module('trainprof.analysis.intervals')\n")
    (package_copy / PACKAGE / "sql" / "__init__.py").write_text("import trainprof.pipeline\n")
    _append(package_copy / PACKAGE / "report" / "labels.py", "\nimport trainprof.sql.extras\n")
    found = breaches(import_graph(package_copy))
    assert ("trainprof.trace.kernel_class -> trainprof.formatting -> trainprof.analysis.intervals: "
            "reading knows nothing of analysis") in found
    assert ("trainprof.report.labels -> trainprof.sql -> trainprof.pipeline: renderers do not "
            "run the pipeline") in found


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
