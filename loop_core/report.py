"""A self-contained HTML triage report of a captures folder (no network assets).

Counts by class, the top dedup groups, the OOM predicted-vs-actual delta, the
review queue, the pack's shadow rules and the trust funnel, with charts drawn as
inline SVG. All text from bundles is HTML-escaped, and what a capture wrote is scrubbed as an issue's
text is (``dedup.sanitize``).
"""

from __future__ import annotations

import html
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .engine import Engine
from .pipeline import Processed, process_bundle
from .batch import discover_bundles
from .trackers import ReviewQueue, review_count, review_error
from .trust import ConsensusIndex, trust_of
from .bundle import Bundle, path_text
from .dedup import sanitize
from .terminal import shell_word
from .verdict import FailureClass

__all__ = ["TriageData", "collect_triage", "render_html"]

CLASS_COLOURS = {
    "genuine-oom": "#d1495b",
    "overlay-arch-drift": "#edae49",
    "kernel-unsupported": "#00798c",
    "quant-unsupported": "#6a4c93",
    "benign-cold-start": "#8ac926",
    "unknown": "#8d99ae",
}
STAGES = ("raw", "candidate", "validated", "tier1")


@dataclass(slots=True)
class TriageData:
    captures: str
    pack: str
    rules_version: str
    bundles: int = 0
    unreadable: list[str] = field(default_factory=list)
    by_class: Counter[str] = field(default_factory=Counter)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    deltas: list[dict[str, Any]] = field(default_factory=list)
    review: list[dict[str, Any]] = field(default_factory=list)
    review_problems: list[str] = field(default_factory=list)  # queue files that could not be read
    funnel: Counter[str] = field(default_factory=Counter)
    successes: int = 0
    # The pack's shadow rules (evaluated, never deciding): id -> (class, bundles it matched).
    shadow: dict[str, list[Any]] = field(default_factory=dict)


def collect_triage(captures: Path, engine: Engine, catalog: Catalog | None = None) -> TriageData:
    """Classify everything under ``captures`` (nothing is filed) and gather the report's numbers."""
    data = TriageData(str(captures), engine.pack.name, engine.pack.version)
    anchors: list[Bundle] = []
    data.shadow = {rule.id: [rule.failure_class.value, 0] for rule in engine.pack.shadow_rules}
    for path in discover_bundles([captures]):
        item: Processed = process_bundle(path, engine)
        data.bundles += 1
        if item.error is not None:
            data.unreadable.append(item.error)
            continue
        verdict = item.verdict
        assert verdict is not None
        for rule_id in verdict.shadow_matches:
            if rule_id in data.shadow:
                data.shadow[rule_id][1] += 1
        if item.anchor is not None:
            anchors.append(item.anchor)
        if not item.failure:
            data.successes += 1
            continue
        cls = verdict.failure_class.value
        data.by_class[cls] += 1
        if item.draft is not None:
            group = data.groups.setdefault(item.draft.dedup_hash, {
                "hash": item.draft.dedup_hash, "class": cls, "title": item.draft.title, "count": 0})
            group["count"] += 1
        if verdict.failure_class is FailureClass.GENUINE_OOM and verdict.tier1_inputs:
            inputs = verdict.tier1_inputs
            label = f"{_public(item.draft.key.model_id if item.draft else path.parent.name)} @ {path_text(path.name)}"
            data.deltas.append({"bundle": path.name, "label": label,
                                "delta": verdict.delta_mib, "actual": inputs.get("gpu_worker_reported_mib"),
                                "routed": verdict.route_as_kv_calc_bug})
    data.review = ReviewQueue(captures).items(data.review_problems)
    index = ConsensusIndex.of(anchors)
    for anchor in anchors:
        result = trust_of(engine.pm, anchor, catalog=catalog or Catalog(), priors=index, consensus_n=2)
        for stage in STAGES[: result.stage.rank + 1]:
            data.funnel[stage] += 1  # a funnel: reaching a stage means passing every earlier one
    return data


def _e(value: Any) -> str:
    """``value`` HTML-escaped, a folder name that is not UTF-8 included. A character that is
    not printable (a control, a bidi mark: a folder name may hold them, and reach the page in
    the unreadable list or a chart label) is written as its escape, as the terminal output
    writes it, so it can neither reorder what the page shows nor hide in it."""
    text = path_text(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return html.escape(text, quote=True)


def _public(value: Any) -> str:
    """Text a capture wrote, as an issue would show it: a report is meant to be passed
    around, so secrets, home directories, controls and bidi marks go as they do there."""
    return sanitize("" if value is None else value, inline=True)


def _count(entry: Any) -> str:
    """How many occurrences a review-queue entry holds ("?" for a file edited into another shape)."""
    held = review_count(entry)
    return "?" if held is None else str(held)


# Rows of the review queue and of the unreadable list shown, and bars of the OOM chart: a
# report over a large corpus stays a page to read (the cards count everything).
SHOWN_ROWS = 100
SHOWN_DELTAS = 50


def _bar_chart(items: list[tuple[str, int, str]], width: int = 520) -> str:
    if not items:
        return '<p class="empty">nothing to show</p>'
    top = max(n for _label, n, _c in items) or 1
    row, label_w = 26, 170
    height = row * len(items) + 8
    parts = [f'<svg role="img" width="100%" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, n, colour) in enumerate(items):
        y = 4 + i * row
        w = max(2, int((width - label_w - 50) * n / top))
        parts.append(f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end" font-size="13">{_e(label)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w}" height="{row - 8}" fill="{colour}" rx="3"/>')
        parts.append(f'<text x="{label_w + w + 6}" y="{y + 16}" font-size="13">{n}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _delta_chart(deltas: list[dict[str, Any]], width: int = 1000) -> str:
    points = [d for d in deltas if isinstance(d.get("delta"), int)]
    if not points:
        return ('<p class="empty">no OOM with both a predicted total and a measured peak '
                f'({len(deltas)} OOM bundle(s) without a usable delta)</p>')
    note = ""
    if len(points) > SHOWN_DELTAS:  # the furthest from their prediction, in the order found
        kept = {id(d) for d in sorted(points, key=lambda d: -abs(d["delta"]))[:SHOWN_DELTAS]}
        note = (f'<p class="sub">the {SHOWN_DELTAS} furthest from their prediction, of {len(points)} '
                'OOM bundles with a delta</p>')
        points = [d for d in points if id(d) in kept]
    span = max(abs(d["delta"]) for d in points) or 1
    row, label_w, pad = 26, 420, 90
    height = row * len(points) + 34
    mid = label_w + (width - label_w) // 2
    half = (width - label_w) // 2 - pad
    parts = [f'<svg role="img" width="100%" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{mid}" y1="0" x2="{mid}" y2="{height - 24}" stroke="#444"/>',
             f'<text x="{mid}" y="{height - 6}" text-anchor="middle" font-size="13">'
             f'measured − predicted (MiB): right of the line used more than predicted</text>']
    for i, d in enumerate(points):
        y = 4 + i * row
        w = max(1, int(half * abs(d["delta"]) / span))
        x = mid if d["delta"] >= 0 else mid - w
        colour = "#d1495b" if d["delta"] >= 0 else "#00798c"
        parts.append(f'<text x="{label_w - 10}" y="{y + 14}" text-anchor="end" font-size="13">'
                     f'{_e(d["label"][:60])}</text>')
        parts.append(f'<rect x="{x}" y="{y + 2}" width="{w}" height="{row - 10}" fill="{colour}" rx="2"/>')
        tx, anchor = (x + w + 5, "start") if d["delta"] >= 0 else (x - 5, "end")
        parts.append(f'<text x="{tx}" y="{y + 14}" text-anchor="{anchor}" font-size="12">{d["delta"]:+d}</text>')
    parts.append("</svg>")
    parts.append(note)
    return "".join(parts)


def render_html(data: TriageData) -> str:
    """The whole report as one HTML document: inline CSS and SVG, no scripts, no external assets."""
    classes = [(cls, data.by_class.get(cls, 0), CLASS_COLOURS[cls]) for cls in CLASS_COLOURS]
    funnel = [(stage, data.funnel.get(stage, 0), "#00798c") for stage in STAGES]
    groups = sorted(data.groups.values(), key=lambda g: (-g["count"], g["hash"]))[:20]
    group_rows = "".join(
        f'<tr><td class="num">{g["count"]}</td><td><span class="pill" style="background:'
        f'{CLASS_COLOURS[g["class"]]}">{_e(g["class"])}</span></td><td><code>{_e(g["hash"])}</code></td>'
        f'<td>{_e(g["title"])}</td></tr>' for g in groups) or '<tr><td colspan="4">no fileable failures</td></tr>'
    review_rows = "".join(
        f'<tr><td class="num">{_count(r)}</td><td><code>{_e(r.get("dedup_hash"))}</code></td>'
        f'<td>{_e(_public(r.get("model_slug"))[:120])}</td>'
        f'<td><code>{_e(_public(review_error(r))[:160])}'
        f'</code></td></tr>' for r in data.review[:SHOWN_ROWS]) or '<tr><td colspan="4">the review queue is empty</td></tr>'
    if len(data.review) > SHOWN_ROWS:
        review_rows += (f'<tr><td colspan="4">… and {len(data.review) - SHOWN_ROWS} more entries: '
                        f'<code>loop-rules review list {_e(shell_word(data.captures))}</code> lists them all</td></tr>')
    review_rows += "".join(f'<tr><td colspan="4">skipped: <code>{_e(p)}</code></td></tr>'
                           for p in data.review_problems)
    unreadable = "".join(f"<li><code>{_e(u)}</code></li>" for u in data.unreadable[:SHOWN_ROWS])
    if len(data.unreadable) > SHOWN_ROWS:
        unreadable += (f"<li>… and {len(data.unreadable) - SHOWN_ROWS} more: <code>loop-rules classify "
                       f"{_e(shell_word(data.captures))}</code> names each</li>")
    shadow_rows = "".join(
        f'<tr><td class="num">{n}</td><td><code>{_e(rule_id)}</code></td><td><span class="pill" style="background:'
        f'{CLASS_COLOURS[cls]}">{_e(cls)}</span></td></tr>' for rule_id, (cls, n) in sorted(data.shadow.items()))
    shadow = (f'<section><h2>Shadow rules</h2><p class="sub">Evaluated on every bundle, never deciding: how many '
              f'each matches (successes and bundles an earlier matcher decides included).</p><table><tr><th class="num">bundles</th><th>rule</th>'
              f'<th>class</th></tr>{shadow_rows}</table></section>' if data.shadow else "")
    failures = sum(data.by_class.values())
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>loop-rules triage report</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d232a; background: #fbfbfa; padding: 0 1rem; }}
h1 {{ margin-bottom: .2rem; }} .sub {{ color: #5c6670; margin-top: 0; }}
.cards {{ display: flex; gap: 1rem; flex-wrap: wrap; margin: 1.2rem 0; }}
.card {{ background: #fff; border: 1px solid #dde1e4; border-radius: 8px; padding: .8rem 1.1rem; min-width: 130px; }}
.card b {{ display: block; font-size: 1.8rem; }}
section {{ background: #fff; border: 1px solid #dde1e4; border-radius: 8px; padding: 1rem 1.2rem; margin: 1rem 0; }}
.grid {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: .92rem; }}
td, th {{ border-bottom: 1px solid #eceff1; padding: .35rem .5rem; text-align: left; vertical-align: top; }}
.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.pill {{ color: #fff; border-radius: 10px; padding: 1px 8px; font-size: .8rem; white-space: nowrap; }}
.empty {{ color: #5c6670; font-style: italic; }} code {{ font-size: .85rem; word-break: break-all; }}
</style></head><body>
<h1>loop-rules triage report</h1>
<p class="sub">{_e(data.captures)} · pack <code>{_e(data.pack)}</code> (rules_version
<code>{_e(data.rules_version)}</code>) · {stamp}</p>
<div class="cards">
<div class="card"><b>{data.bundles}</b>bundles</div>
<div class="card"><b>{failures}</b>failures</div>
<div class="card"><b>{len(data.groups)}</b>distinct issues</div>
<div class="card"><b>{len(data.review)}</b>awaiting review</div>
<div class="card"><b>{data.successes}</b>successes</div>
<div class="card"><b>{len(data.unreadable)}</b>unreadable</div>
</div>
<div class="grid">
<section><h2>Failures by class</h2>{_bar_chart(classes)}</section>
<section><h2>Trust funnel</h2>{_bar_chart(funnel)}</section>
</div>
<section><h2>Top dedup groups</h2><table><tr><th class="num">bundles</th><th>class</th><th>dedup</th>
<th>issue</th></tr>{group_rows}</table></section>
<section><h2>OOM: measured vs predicted</h2>{_delta_chart(data.deltas)}</section>
<section><h2>Review queue</h2><table><tr><th class="num">count</th><th>dedup</th><th>model</th>
<th>final error</th></tr>{review_rows}</table></section>
{shadow}
{f'<section><h2>Unreadable bundles</h2><ul>{unreadable}</ul></section>' if unreadable else ''}
</body></html>
"""
