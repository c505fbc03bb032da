"""The dashboard's shared inline styles, each defined once (every view imports them from here)."""

from __future__ import annotations

FONT_FAMILY = "Helvetica, Arial, sans-serif"
TEXT_COLOR = "#222"
MUTED_COLOR = "#555"  # notes, hints and captions under the charts
ERROR_COLOR = "#B04000"

PAGE = {"fontFamily": FONT_FAMILY, "margin": "12px 20px", "color": TEXT_COLOR}
MUTED = {"color": MUTED_COLOR, "fontSize": "13px", "margin": "4px 0"}
CONTROL = {"display": "flex", "gap": "8px", "alignItems": "center", "margin": "8px 0"}
CELL = {"textAlign": "left", "fontSize": "13px", "padding": "3px 6px", "fontFamily": FONT_FAMILY}
HEADER = {"fontWeight": "bold"}
ERROR_CARD = {
    "border": "1px solid #D55E00",
    "background": "#FFF4EC",
    "padding": "8px",
    "margin": "6px 0",
    "borderRadius": "4px",
}
