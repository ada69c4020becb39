"""The front ends' HTML pages (the trace viewer, the run diff) from Jinja2 templates with autoescape: every value a
template shows (trace text, web text, run.json, a report) is escaped by the engine, none by hand. The templates, the
style sheets and the scripts are package data (`glasses_rag/frontends/templates/`).

Each page is one self-contained file (inline CSS and JS, images as data URLs) with a Content-Security-Policy that lets
only its own script run, pinned by hash, so an injected inline script or handler would be refused by the browser too.

    html = render_page("viewer.html.j2", title="Run x", script="viewer.js", styles=["viewer.css"], style="", ...)
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
from importlib.resources import files
from typing import Any

import jinja2
from markupsafe import Markup

TEMPLATES = files("glasses_rag.frontends") / "templates"


def fmt_num(v: Any, digits: int = 3) -> str:
    """A metric as the tables show it: ints as they are, floats to `digits` places, anything else as text."""
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("glasses_rag.frontends", "templates"),
        autoescape=True,  # every template, whatever its name
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(num=fmt_num, ms=ms)
    return env


@functools.cache
def asset(name: str) -> str:
    """A static file of the templates folder (a style sheet, a script), as text."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


def content_security_policy(script: str) -> str:
    """Only inline data, inline style and this one script (by its SHA-256) are allowed."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
        "base-uri 'none'; form-action 'none'"
    )


def render_page(template: str, *, title: str, script: str, styles: list[str], style: str = "", **context: Any) -> str:
    """The page `template` (which extends page.html.j2) as a string.

    Args:
        title: the document's title.
        script: the page's script file (the one script the CSP allows).
        styles: its style sheet files; `style`: generated rules (image data URLs, base64 only) after them.
        context: what the template shows (escaped by the engine).
    """
    code = asset(script)
    return (
        environment()
        .get_template(template)
        .render(
            title=title,
            csp=content_security_policy(code),
            css=Markup("\n".join(asset(s) for s in styles)),  # noqa: S704 - the package's own files
            style=Markup(style),  # noqa: S704 - `.img-N{background-image:url(data:image/jpeg;base64,...)}` rules
            script=Markup(code),  # noqa: S704 - the package's own file, pinned by its hash
            **context,
        )
    )
