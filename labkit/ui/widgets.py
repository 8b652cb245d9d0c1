"""Slider-driven plots whose observer logic is plain Python (testable without a browser)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from labkit.core.errors import LabkitError, bad_value


@dataclass
class SliderState:
    """What a slider_plot has done: current control values, last update result, update count."""

    controls: dict
    update: Callable[[Any, dict], Any]
    fig: Any
    values: dict = field(default_factory=dict)
    result: Any = None
    updates: int = 0
    error: str | None = None

    def refresh(self) -> Any:
        """Re-read the controls and run the update inside one batched figure update."""
        self.values = {k: w.value for k, w in self.controls.items()}
        try:
            with self.fig.batch_update():
                self.result = self.update(self.fig, dict(self.values))
            self.error = None
        except SHOWN_ERRORS as exc:
            # Bad combinations of slider values are shown, not raised into the widget callback
            # (where ipywidgets would log them out of sight and leave a stale figure).
            self.error = _message(exc)
            _set_title_note(self.fig, f"error: {self.error}")
        self.updates += 1
        return self.result


#: What a slider update may raise for a bad combination of values: the project's own errors
#: (LabkitError: BudgetExceeded, which is also a MemoryError, StoreError, DatasetError, ...),
#: bad values (ValueError), or memory running out. Anything else (a KeyError, an IndexError) is a
#: bug in the callback and raises as usual.
SHOWN_ERRORS = (ValueError, LabkitError, MemoryError)


def slider_range(arg: str, triple: Any, lo: int = 0, hi: int | None = None, *, unit: str = "integers",
                 clamp: bool = False) -> tuple[int, int, int]:
    """Return a slider's ``(min, max, value)`` as ints if they are integers with lo <= min <= max (<= hi)
    and min <= value <= max, else raise naming `arg` (before ipywidgets refuses it with a TraitError).

    With `clamp`, a value outside [min, max] is moved to the nearer end instead of refused.
    """
    import numbers
    ok = (isinstance(triple, (tuple, list)) and len(triple) == 3
          and all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in triple))
    if ok:
        mn, mx, value = (int(x) for x in triple)
        ok = lo <= mn <= mx and (hi is None or mx <= hi) and (clamp or mn <= value <= mx)
    if not ok:
        order = f"{lo} <= min <= " + ("max" if clamp else "value <= max") + ("" if hi is None else f" <= {hi}")
        raise bad_value(arg, triple, f"(min, max, value) {unit} with {order}"
                        + (" (a value outside [min, max] starts at the nearer end)" if clamp else ""))
    return mn, mx, min(max(value, mn), mx)


def _message(exc: BaseException) -> str:
    """One line: the message, prefixed by the error's type unless it is a ValueError or LabkitError."""
    text = " ".join(str(exc).split())
    if isinstance(exc, (ValueError, LabkitError)) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _set_title_note(fig: Any, text: str) -> None:
    try:
        fig.layout.title = text
    except Exception:  # pragma: no cover
        pass


def slider_plot(controls: dict, update: Callable[[Any, dict], Any], fig: Any, *,
                title: str | None = None, continuous: bool = False) -> tuple[Any, Any, SliderState]:
    """Return ``(view, fig, state)``: `controls` above `fig`, re-drawn by `update(fig, values)`.

    `update` mutates the figure (it runs inside ``fig.batch_update()``) and may return anything,
    kept in ``state.result``. It runs once now and again whenever a control's value changes;
    tests drive it by setting ``controls[name].value`` and reading `fig` and `state`.
    """
    import ipywidgets as W

    if not controls:
        raise ValueError("controls={} is not accepted; expected at least one widget")
    for k, w in controls.items():
        if not hasattr(w, "value") or not hasattr(w, "observe"):
            raise ValueError(f"controls[{k!r}]={w!r} is not accepted; expected an ipywidgets value widget")
        if not continuous and hasattr(w, "continuous_update"):
            w.continuous_update = False
        if not getattr(w, "description", ""):
            w.description = k
    state = SliderState(controls, update, fig)
    for w in controls.values():
        w.observe(lambda change: state.refresh(), names="value")
    state.refresh()
    children = []
    if title:
        children.append(W.HTML(f"<b>{title}</b>"))
    children += [W.HBox(list(controls.values()), layout=W.Layout(flex_flow="row wrap")), fig]
    return W.VBox(children), fig, state
