"""The PICASSO technique explorer times the baseline and the chosen setting side by side."""

import types

import pytest

pytest.importorskip("ipywidgets")


class _FakeModel:
    """A RecModel stand-in: each train_step logs (name, batch index) and takes a scripted time."""

    log: list = []
    clock = [0.0]
    step_s = {"base": [1.0], "model": [1.0]}

    def __init__(self, kind, specs, packing=False, interleave=0, cache=0.0, seed=0):
        self.name = "model" if (packing or interleave or cache) else "base"
        self.calls = 0
        self.hit_rate = 0.5
        self.embeddings = types.SimpleNamespace(n_lookups=3)
        self.techniques = types.SimpleNamespace(label="packing")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def warm_cache(self, batches):
        pass

    def train_step(self, b):
        times = self.step_s[self.name]
        _FakeModel.clock[0] += times[min(self.calls, len(times) - 1)]
        self.calls += 1
        _FakeModel.log.append(self.name)
        return 0.0


@pytest.fixture
def fake(monkeypatch):
    import labkit.recsys.model as model
    _FakeModel.log = []
    _FakeModel.clock = [0.0]
    monkeypatch.setattr(model, "RecModel", _FakeModel)
    monkeypatch.setattr(model, "count_ops", lambda fn: (fn(), {"ops": 10})[1])
    import labkit.ui.recsys as ui
    monkeypatch.setattr(ui.time, "perf_counter", lambda: _FakeModel.clock[0])
    return _FakeModel


def test_steps_alternate_and_the_speedup_is_the_median_step_ratio(fake):
    from labkit.ui.recsys import technique_explorer
    # Baseline steps: warm, then 4 s, 4 s, 40 s (a burst of load elsewhere), 4 s, 4 s; packed: 1 s each.
    fake.step_s = {"base": [9.0, 4.0, 4.0, 40.0, 4.0, 4.0], "model": [9.0, 1.0]}
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=100, steps=5)
    timed = fake.log[2:12]     # after one warm step each, before count_ops' two steps
    assert fake.log[:2] == ["base", "model"]
    assert timed == ["base", "model", "model", "base"] * 2 + ["base", "model"]  # side by side, order rotated
    r = state.result
    assert r["speedup"] == pytest.approx(4.0)      # the median ratio; total time would have said 11.2x
    assert r["baseline_samples_s"] == pytest.approx(64 / 4.0) and r["samples_s"] == pytest.approx(64.0)
    assert fig.layout.title.text.startswith("packing vs per-field: 4.00x [") and "of 5 side-by-side steps" in \
        fig.layout.title.text
    assert r["speedup_lo"] > 1 and r["within_noise"] is False


def test_a_speedup_whose_interval_holds_one_reads_within_noise(fake):
    from labkit.ui.recsys import technique_explorer
    fake.step_s = {"base": [1.0, 1.0, 0.5, 2.0, 1.0, 0.5], "model": [1.0]}
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=100, steps=5)
    assert state.result["within_noise"] is True and "within noise" in fig.layout.title.text


def test_cache_size_slider_is_greyed_out_while_caching_is_off(fake):
    from labkit.ui.recsys import technique_explorer
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=100, steps=1)
    assert state.controls["cache %"].disabled is True
    state.controls["caching"].value = True
    assert state.controls["cache %"].disabled is False and state.error is None
    state.controls["caching"].value = False
    assert state.controls["cache %"].disabled is True


def _drawn(fig) -> list:
    """The traces a browser draws: what the front end reads when it creates a view of `fig`."""
    return fig._widget_data


def _has_data(traces) -> bool:
    def filled(v):
        return v is not None and len(v) > 0
    return any(filled(t.get("y")) and filled(t.get("x")) for t in traces)


def _assert_drawn_with_data(fig):
    assert len(fig.data) >= 1 and _has_data([t.to_plotly_json() for t in fig.data])
    # The browser's copy holds the same numbers as the Python figure: nothing left at a placeholder.
    assert _has_data(_drawn(fig))
    assert [list(t.get("y")) for t in _drawn(fig)] == [list(t.y) for t in fig.data]
    assert _drawn(fig) and fig._widget_layout.get("title") == fig.layout.title.to_plotly_json()


def test_every_technique_explorer_figure_has_data_before_and_after_each_change(fake):
    from labkit.ui.recsys import technique_explorer
    fake.step_s = {"base": [2.0], "model": [1.0]}
    view, fig, state = technique_explorer(fields=(2, 8, 4), batch=(64, 256, 64), rows=100, steps=3)
    assert fig in view.children
    _assert_drawn_with_data(fig)
    for name, value in [("fields", 6), ("batch", 128), ("caching", True), ("cache %", 20), ("packing", False),
                        ("interleave", True), ("caching", False)]:
        state.controls[name].value = value
        assert state.error is None, name
        _assert_drawn_with_data(fig)


def test_every_cache_curve_figure_has_data_before_and_after_each_change():
    from labkit.ui.recsys import cache_demo
    view, fig, state = cache_demo(6, 500, 64, count_batches=3, measure_batches=2)
    try:
        _assert_drawn_with_data(fig)
        assert len(fig.data[0].y) == 7 and all(0 < h <= 1 for h in fig.data[0].y)  # the measured curve
        for pct in (1, 20, 50):
            state.controls["cache %"].value = pct
            assert state.error is None
            _assert_drawn_with_data(fig)
            assert list(_drawn(fig)[1]["x"]) == [pct]
    finally:
        state.close()
