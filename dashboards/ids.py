"""The ids of the page's components, by where they are: the names the layouts give and the callbacks
(and the tests' browser, and the stylesheet) use.  A module names a component through here."""

from __future__ import annotations

# the page: the runs table and what stands above and under it
VERDICT = "verdict"
PROGRESS = "progress"
POLL = "poll"  # the table fills in while runs are analyzed
RUN_DEFAULT = "run-default"  # the (run, GPU) the per-run tabs opened on, until the user picks another
RUNS = "runs"
TABLE_NOTE = "table-note"
PROVENANCE = "provenance"
WARM = "warm"  # plotly.js loads after the first view
PLOTLY_WARM = "plotly-warm"
ERRORS = "errors"
TABS = "tabs"


def opened(tab: str) -> str:
    """The store that changes when *tab* is opened (``tab_gate``)."""
    return f"opened-{tab}"


def tab(name: str) -> str:
    """The tab *name* itself, when a callback changes its label."""
    return f"{name}-tab"


# Policies
POLICY_BARS = "policy-bars"
POLICY_KERNELS = "policy-kernels"
POLICY_KERNELS_TABLE = "policy-kernels-table"

# Findings
FINDINGS_PANEL = "findings-panel"
FINDING_OPEN = "finding-open"  # the type of a finding's button (a pattern-matching id)
FINDING_EVIDENCE = "finding-evidence"  # the type of a finding's evidence list, filled when first unfolded
FINDING_EVIDENCE_OPEN = "finding-evidence-open"  # the type of its "evidence" line, whose clicks unfold it

# Policy trade, and the plans under it
TRADE_X = "trade-x"
TRADE_FRONTIER = "trade-frontier"
TRADE_FRONTIER_NOTE = "trade-frontier-note"
TRADE_TABLE_BOX = "trade-table-box"
TRADE_TABLE = "trade-table"
PVM_RUN = "pvm-run"
PVM_GRAPH = "pvm-graph"
PVM_FLAGS = "pvm-flags"
PLAN_CHOICE = "plan-choice"
PLAN_GRAPH = "plan-graph"
PLAN_TABLE_BOX = "plan-table-box"
PLAN_NOTE = "plan-note"
PLAN_TABLE = "plan-table"
PLAN_TUNE_TABLE = "plan-tune-table"


def plan_predicted_table(key: str) -> str:
    """The table of a plan's predictions (``predictions``) or calibrated predictions (``calibrated``)."""
    return f"plan-{key}-table"


# What-if
WHATIF_TO = "whatif-to"
WHATIF_VALUE = "whatif-value"
WHATIF_FROM = "whatif-from"
WHATIF_HOST = "whatif-host"
WHATIF_NOTE = "whatif-note"
WHATIF_GRAPH = "whatif-graph"
WHATIF_POLL = "whatif-poll"

# Per layer
LAYER_RUN = "layer-run"
LAYER_GRAPH = "layer-graph"
LAYER_HINT = "layer-hint"
LAYER_KERNELS = "layer-kernels"
LAYER_KERNELS_STATUS = "layer-kernels-status"
LAYER_KERNELS_TABLE = "layer-kernels-table"
LAYER_DETAILS = "layer-details"
LAYER_DETAIL_BOX = "layer-detail-box"
LAYER_SUMMARY = "layer-summary"
LAYER_COPIES = "layer-copies"

# Timeline
TIMELINE_RUN = "timeline-run"
TIMELINE_STEP = "timeline-step"
TIMELINE_GRAPH = "timeline-graph"
TIMELINE_NOTE = "timeline-note"
TIMELINE_FOCUS = "timeline-focus"  # what a finding's button asks to mark

# Ranks
RANK_CONTROLS = "rank-controls"
RANK_POLICY = "rank-policy"
RANK_HEATMAP = "rank-heatmap"
RANK_FINDINGS = "rank-findings"

# Copy streams
STREAMS_RUN = "streams-run"
LINK_PRESET = "link-preset"
LINK_GBPS = "link-gbps"
LINK_NOTE = "link-note"
STREAMS_GRAPH = "streams-graph"
