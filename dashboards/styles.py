"""What of the dashboard's styles must stay Python (DataTable cells, plotly colours), read from the one
stylesheet, ``assets/dashboard.css``: its ``:root`` custom properties are the only definition of each value.
Everything else is a CSS class there, set with ``className=`` on the components."""

from __future__ import annotations

import re
from pathlib import Path

STYLESHEET = Path(__file__).resolve().parent / "assets" / "dashboard.css"


def css_values(text: str) -> dict[str, str]:
    """The custom properties (``--name: value;``) of the stylesheet's ``:root`` block, comments dropped."""
    root = re.search(r":root\s*\{(.*?)\}", re.sub(r"/\*.*?\*/", "", text, flags=re.S), re.S)
    pairs = re.findall(r"(--[\w-]+)\s*:\s*([^;]+);", root.group(1) if root else "")
    return {k: v.strip() for k, v in pairs}


VALUES = css_values(STYLESHEET.read_text(encoding="utf-8"))
FONT_FAMILY = VALUES["--font"]
MUTED_COLOR = VALUES["--muted"]  # plotly's notes and captions, as the page's muted text
ERROR_COLOR = VALUES["--error"]
SMALL = VALUES["--small"]
SAME_STEP_BACKGROUND = VALUES["--same-step-background"]
FAINT_COLOR = VALUES["--faint"]

# DataTable styles (Dash applies them inline to its cells)
CELL = {"textAlign": "left", "fontSize": SMALL, "padding": "3px 6px", "fontFamily": FONT_FAMILY}
HEADER = {"fontWeight": "bold"}
HEADER_WRAP = {"fontWeight": "bold", "whiteSpace": "normal", "height": "auto"}  # long column names on two lines
