"""Self-contained HTML pages: inlined styles and scripts, and a Content-Security-Policy that
lets nothing be fetched from anywhere.

Each inline script is allowed by its SHA-256 hash, so the policy needs neither
'unsafe-inline' nor any source address for scripts; `default-src 'none'` and
`connect-src 'none'` stop every request a script or stylesheet could make. Styles may be
inline because plotly.js adds its own <style> elements at run time; images and fonts may
only be data: or blob: URLs. Data for the page travels in <script type="application/json">
blocks, which browsers never execute.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=None)
def asset_text(name: str) -> str:
    """A file from harness/report/assets/."""
    return resources.files("harness.report").joinpath("assets", name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the plotly package (no network involved)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def script_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def content_security_policy(scripts: list[str]) -> str:
    script_src = " ".join(script_hash(s) for s in scripts) if scripts else "'none'"
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {script_src}",
            "style-src 'unsafe-inline'",
            "img-src data: blob:",
            "font-src data:",
            "connect-src 'none'",
            "media-src 'none'",
            "object-src 'none'",
            "frame-src 'none'",
            "worker-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


def json_block(element_id: str, value: Any, **attributes: str) -> str:
    """A <script type="application/json"> element. '<' is escaped so that no text in the data
    can close the element early."""
    text = json.dumps(value, separators=(",", ":"), default=str).replace("<", "\\u003c")
    extra = "".join(f' {name.replace("_", "-")}="{val}"' for name, val in attributes.items())
    return f'<script type="application/json" id="{element_id}"{extra}>{text}</script>'


def _safe_script(source: str) -> str:
    if "</script" in source.lower():
        # An inline script cannot contain its own end tag; escaping the slash keeps the
        # JavaScript meaning (inside strings) and the hash is taken of what is written.
        source = source.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    return source


def render_page(*, title: str, body: str, scripts: list[str], head_extra: str = "") -> str:
    """A complete HTML document; `scripts` run in order at the end of <body>."""
    safe_scripts = [_safe_script(s) for s in scripts]
    script_tags = "\n".join(f"<script>{s}</script>" for s in safe_scripts)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy(safe_scripts)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{title}</title>\n<style>{asset_text('report.css')}</style>\n{head_extra}</head>\n"
        f"<body>\n{body}\n{script_tags}\n</body>\n</html>\n"
    )
