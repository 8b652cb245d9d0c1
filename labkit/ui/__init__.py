"""Widgets that observe labkit systems: slider-driven plots, the utilisation dashboard, tables.

Systems never import this package; notebooks and the CLI do.
"""

from labkit.core.metrics import ResultTable
from labkit.ui.dashboard import Dashboard
from labkit.ui.widgets import SliderState, slider_plot

__all__ = ["Dashboard", "ResultTable", "SliderState", "slider_plot"]
