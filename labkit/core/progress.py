"""Progress bars for long work (tqdm.auto: a widget in Jupyter, a line on a terminal), all opt-in.

Library code takes a ``progress`` flag that defaults to off, so benches and tests stay quiet and
pay nothing; notebooks and the CLI turn it on.
"""

from __future__ import annotations

from typing import Any


def progress_bar(total: int | None, desc: str, enabled: bool = True, **kw: Any):
    """Return a tqdm.auto bar; with `enabled` False a disabled one (every call is a no-op).

    It stays on screen when done unless ``leave=False`` is passed; other keywords go to tqdm.
    """
    from tqdm.auto import tqdm
    kw.setdefault("leave", True)
    return tqdm(total=total, desc=desc, disable=not enabled, **kw)


class StageBar:
    """One bar over named stages: ``next()`` finishes the current stage and names the next."""

    def __init__(self, title: str, stages: tuple[str, ...], enabled: bool = True) -> None:
        self.title, self.stages, self.i = title, stages, 0
        self.bar = progress_bar(len(stages), f"{title}: {stages[0]}", enabled)

    def next(self) -> None:
        self.i += 1
        self.bar.update(1)
        if self.i < len(self.stages):
            self.bar.set_description(f"{self.title}: {self.stages[self.i]}")

    def close(self) -> None:
        self.bar.close()
