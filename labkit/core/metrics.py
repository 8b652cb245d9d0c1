"""Recording a notebook's (or a run's) key metrics so tests can assert on them."""

from __future__ import annotations

import html
import math
import numbers
from typing import Any

from labkit.core.atomic import atomic_write_json


def _clean(v: Any, key: str) -> Any:
    if isinstance(v, dict):
        return {str(k): _clean(x, f"{key}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x, f"{key}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"metrics[{key!r}]={f} is not accepted; expected a finite number")
        return f
    raise ValueError(f"metrics[{key!r}] has type {type(v).__name__}; expected a number, string, "
                     "bool, list or dict")


def record_metrics(metrics: dict, path: str | None = None) -> dict:
    """Validate `metrics` (finite numbers, JSON types) and write them to `path` atomically if given.

    `path` is the run's own output (a notebook's METRICS_OUT, a fresh temporary file under
    papermill): re-running the notebook or the cell replaces it, in one step, with the file's
    permission bits kept, so a reader sees the previous metrics or the new ones, never half.
    """
    clean = {str(k): _clean(v, str(k)) for k, v in metrics.items()}
    if path:
        atomic_write_json(path, clean)
    return clean


def markdown_table_html(md: str) -> str:
    """Render the harness's Markdown (headings, pipe tables, bullets, **bold**, `code`) as simple HTML."""
    import re

    def _inline_html(text: str) -> str:
        parts = text.split("`")
        if len(parts) % 2 == 0:  # an unmatched backtick stays a literal one
            parts[-2:] = ["`".join(parts[-2:])]
        return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else
                       re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(p)) for i, p in enumerate(parts))

    out, in_table = [], False
    for line in md.splitlines():
        s = line.strip()
        if s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
                out.append("<tr>" + "".join(f"<th>{_inline_html(c)}</th>" for c in cells) + "</tr>")
            else:
                out.append("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if s.startswith("#"):
            out.append(f"<h4>{_inline_html(s.lstrip('#').strip())}</h4>")
        elif s:
            out.append(f"<p>{_inline_html(s)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out)


class ResultTable:
    """Rows of results shown as an HTML table in Jupyter and as plain text elsewhere."""

    def __init__(self, rows: list[dict] | None = None, title: str = "") -> None:
        self.rows = list(rows or [])
        self.title = title

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def columns(self) -> list[str]:
        cols: list[str] = []
        for r in self.rows:
            cols += [c for c in r if c not in cols]
        return cols

    @staticmethod
    def _fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    def _repr_html_(self) -> str:
        cols = self.columns()
        head = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        th = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(self._fmt(r.get(c, '')))}</td>" for c in cols)
                      + "</tr>" for r in self.rows)
        return f"<table>{head}<tr>{th}</tr>{trs}</table>"

    def __repr__(self) -> str:
        cols = self.columns()
        lines = [self.title] if self.title else []
        lines.append("  ".join(cols))
        lines += ["  ".join(self._fmt(r.get(c, "")) for c in cols) for r in self.rows]
        return "\n".join(lines)

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows)
