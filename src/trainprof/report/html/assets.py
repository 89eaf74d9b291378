"""Our own CSS and JavaScript, inlined into the pages trainprof writes (the HTML report, the
history page): read once, refused if they could end their element early."""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import resources

from markupsafe import Markup

#: Where the assets are, in the trainprof.report package.
TEMPLATES = "templates"


@cache
def asset(name: str) -> Markup:
    """Our own CSS or JS file, inlined; refused if it could end its element early."""
    text = (resources.files("trainprof.report") / TEMPLATES / name).read_text("utf-8")
    if "</" in text:
        raise ValueError(f"{name} must not contain '</' (it is inlined into the page)")
    return Markup(text)


@cache
def script_hash(name: str) -> str:
    """The CSP source that lets our one inline script run, and nothing else."""
    digest = hashlib.sha256(str(asset(name)).encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")
