"""C++ names (kernels, template instances) as a person reads them in a table, in every report.

``short_name`` drops what every kernel shares (``void``, PyTorch's ``at::native::``, the
parameter list) and, for the huge CUTLASS 3 / CuTe template names (a FlashAttention 3 kernel
runs to a thousand characters), leads with the class that says what the kernel is:
``cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<…>>>`` reads
``FlashAttnBwdSm90<CollectiveMainloopBwdSm90<…>, CollectiveEpilogueBwd<…>, …> in
device_kernel``. ``distinct_names`` shortens a column's names so that no two different names
read alike. ``file_line`` writes a Python frame (a call site) as the reports show it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import msgspec
from msgspec import field

from trainprof.trace.demangle import readable_name
from trainprof.trace.model import split_frame

#: Namespaces that say nothing about a kernel (nearly every PyTorch kernel is in them).
SILENT_NAMESPACES = ("at::native::", "(anonymous namespace)::")
#: A name longer than this (after the parameter list is dropped) has its template arguments
#: folded: shorter names (``vectorized_elementwise_kernel<4, AddFunctor<float>, …>``) read whole.
LONG_NAME_CHARS = 96
#: The longest a folded name's template arguments may make it: they are shown as many levels
#: deep as fit (a PyTorch elementwise kernel keeps its functor), deeper ones read ``<…>``.
FOLDED_CHARS = 120
#: Template arguments shown at the first level of a folded name that does not fit even one
#: level deep; the rest read ``…``.
SHOWN_ARGUMENTS = 2
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+")


def short_name(name: str) -> str:
    """A kernel or C++ name without ``void``, PyTorch's silent namespaces and its trailing
    parameter list; a long template name folded to the class that says what it is."""
    text = readable_name(name.strip()).removeprefix("void ").strip()
    for namespace in SILENT_NAMESPACES:
        text = text.replace(namespace, "")
    text = _without_parameters(text).strip()
    if len(text) > LONG_NAME_CHARS and "<" in text:
        text = _folded(text)
    return text or name


def _without_parameters(text: str) -> str:
    """``f<T>(int, float)`` without its parameter list (templates stay)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i]
    return text


class _Node(msgspec.Struct):
    """A template name: ``head`` (qualified) and its arguments."""

    head: str
    args: list[_Node] = field(default_factory=list)
    templated: bool = False
    closed: bool = False  # its ``>`` is read: what follows (``::{lambda()#1}``) is dropped

    @property
    def base(self) -> str:
        """The head without its namespaces."""
        return self.head.rsplit("::", 1)[-1].strip()


_PARENTHESES = re.compile(r"\([^()]*\)")


def _parse(text: str) -> _Node:
    """``a::b<c<d>, 3>`` as a tree of names and arguments (parenthesised parts, casts and
    function types, left out; unbalanced text: one leaf)."""
    while _PARENTHESES.search(text):
        text = _PARENTHESES.sub("", text)
    stack = [_Node("")]
    for piece in re.split(r"([<>,])", text):
        if piece == "<":
            child = _Node("")
            stack[-1].templated = True
            stack[-1].args.append(child)
            stack.append(child)
        elif piece in (",", ">") and len(stack) < 2:
            return _Node(text)
        elif piece == ",":
            sibling = _Node("")
            stack[-2].args.append(sibling)
            stack[-1] = sibling
        elif piece == ">":
            stack.pop()
            stack[-1].closed = True
        elif not stack[-1].closed:
            stack[-1].head += piece
    return stack[0] if len(stack) == 1 else _Node(text)


def _folded(text: str) -> str:
    """A long template name led by its core: single wrappers (``device_kernel<X<…>>``) are
    unwrapped and named after it; its arguments are shown as deep as ``FOLDED_CHARS``
    allows (deeper ones ``Name<…>``), and past the first ``SHOWN_ARGUMENTS`` at the first
    level as ``…`` when even that is too long."""
    node = _parse(text)
    wrappers = []
    while len(node.args) == 1 and node.args[0].templated:
        wrappers.append(node.base)
        node = node.args[0]
    for depth in (4, 3, 2, 1):
        core = _rendered(node, depth)
        if len(core) <= FOLDED_CHARS:
            break
    else:
        shown = [_rendered(a, 0) for a in node.args[:SHOWN_ARGUMENTS]]
        shown += ["…"] * (len(node.args) > SHOWN_ARGUMENTS)
        core = node.base + (f"<{', '.join(shown)}>" if node.templated else "")
    return core + (f" in {wrappers[0]}" if wrappers else "")


def _rendered(node: _Node, depth: int) -> str:
    """``node`` without namespaces, its arguments ``depth`` levels deep (then ``<…>``)."""
    if not node.templated:
        return node.base
    if depth <= 0:
        return node.base + "<…>"
    return node.base + "<" + ", ".join(_rendered(a, depth - 1) for a in node.args) + ">"


def distinct_names(names: Sequence[str], width: int | None = None) -> list[str]:
    """``short_name`` of each, cut to ``width`` with … where given, and no two different names
    alike: names that would read the same get the first word where they differ (``· 128``),
    or failing that a number (``#2``)."""
    shown = [_cut(short_name(n), width) for n in names]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(shown):
        groups[label].append(i)
    for rows in groups.values():
        different = list(dict.fromkeys(names[i] for i in rows))
        if len(different) < 2:
            continue
        marks = _telling_words(different)
        for i in rows:
            mark = f" · {marks[names[i]]}"
            shown[i] = _cut(short_name(names[i]), None if width is None else width - len(mark))
            shown[i] += mark
    return shown


def _telling_words(names: list[str]) -> dict[str, str]:
    """For each name, the word at the first position where the names' words differ; a number
    (``#1``, ``#2``...) where those words do not tell them apart."""
    words = [_TOKEN.findall(n) for n in names]
    for at in range(max(len(w) for w in words)):
        seen = [w[at] if at < len(w) else "" for w in words]
        if len(set(seen)) > 1:
            if len(set(seen)) == len(seen) and all(seen):
                return dict(zip(names, seen, strict=True))
            break
    return {n: f"#{i}" for i, n in enumerate(names, 1)}


def _cut(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: max(width - 1, 1)] + "…"


def file_line(frame: str) -> str:
    """``path/to/train.py(42): step`` as ``train.py:42 step``."""
    parts = split_frame(frame)
    if parts is None:
        return frame
    path, line, function = parts
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{base}:{line} {function}"
