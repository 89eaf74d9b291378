"""The section of docs/rules.md behind a finding's ``docs`` reference, as HTML for the report.

The report works offline and is one file, so a link to the docs would point nowhere on the
reader's machine: the section (why the rule fires, its threshold, how the saving is estimated)
is put inside the report instead. docs/rules.md ships in the package as ``templates/rules.md``
(a link to the one copy in docs/).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADING = re.compile(r"^## +(?P<anchor>[a-z0-9-]+) *$", re.MULTILINE)


@cache
def _sections() -> dict[str, str]:
    """Each ``## anchor`` section of docs/rules.md by its anchor ({} when it is not shipped)."""
    try:
        text = resources.files("trainprof.report").joinpath("templates/rules.md").read_text(
            encoding="utf-8")
    except (OSError, ModuleNotFoundError):
        return {}
    heads = list(_HEADING.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return {h["anchor"]: text[h.end():end].strip() for h, end in zip(heads, ends, strict=True)}


def rule_section(reference: str) -> str | None:
    """The Markdown of the section ``docs/rules.md#anchor`` names; None when unknown."""
    _, _, anchor = reference.partition("#")
    return _sections().get(anchor) or None


def rule_section_html(reference: str) -> str | None:
    """That section as HTML (raw HTML in it is escaped, not passed through)."""
    section = rule_section(reference)
    if section is None:
        return None
    from markdown_it import MarkdownIt  # rich's own Markdown parser: no new dependency

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(section)
