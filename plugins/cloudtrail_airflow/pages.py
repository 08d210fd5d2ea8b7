"""The frame every page of the lake's app shares (plugins/cloudtrail_airflow/lake_view.py, gate_view.py): its style,
the security headers that let a page load nothing from another origin and run no script, and the HTML pieces. Every
value a caller puts into a cell or a title is escaped by the caller (cells) or here (titles, headings)."""

from __future__ import annotations

import base64
import hashlib
import time
from html import escape
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse

STYLE = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #1a202c; font-size: 14px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } tr.stale td, tr.failed td { background: #fde8e8; }
code, pre { font-size: 12px; background: #f5f5f5; padding: 1px 4px; } pre { white-space: pre-wrap; max-width: 1100px; }
.muted { color: #718096; } .bar { fill: #4a90d9; } .late { fill: #e07b39; } .problem { background: #fde8e8; padding: 6px; }
"""
# The one inline style is allowed by its hash; nothing else inline, nothing from another origin, no script.
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'self'; script-src 'none'; style-src 'sha256-{STYLE_HASH}'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def href(request: Request, *parts: str) -> str:
    """A link to one of this app's pages, each part of its path percent-encoded, ready for an attribute."""
    path = "/".join(quote(part, safe="") for part in parts)
    return escape(f"{request.scope.get('root_path', '')}/{path}", quote=True)


def page(title: str, body: str, started: float, status_code: int = 200) -> HTMLResponse:
    took = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><h1>{escape(title)}</h1>{body}<p class='muted' id='took'>rendered in {took:.0f} ms</p></body></html>",
        status_code=status_code,
    )


def section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{escape(title)}</h2>{body}</section>"


def table(head: list[str], rows: list[list[str]], classes: list[str] | None = None, numeric: frozenset[int] = frozenset()) -> str:
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        f"<tr class='{(classes or [''] * len(rows))[i]}'>"
        + "".join(f"<td class='n'>{cell}</td>" if j in numeric else f"<td>{cell}</td>" for j, cell in enumerate(row))
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table><tr>{header}</tr>{body}</table>"
