"""labkit: rebuild, run and profile five landmark ML-systems designs.

Layers (dependencies point down only):
    labkit.core      bench harness, dataset registry, memory budget, metrics, direct I/O
    labkit.<system>  spmm (Flash-LLM), graph (AliGraph), disk (CaliEX),
                     dataworkers (GoldMiner), recsys (PICASSO)
    labkit.ui        widgets and the utilisation dashboard (observe systems, never imported by them)
    labkit.records   bench records and BENCHMARKS.md; labkit.catalog lists the systems
    labkit.cli       the `labkit` command
"""

__version__ = "0.1.0"

from labkit.core.hooks import add_dataset_discoverer  # noqa: E402


def _import_system_datasets() -> None:
    # Lazily: importing the catalogue (and through it the harness) is not free, and most imports of
    # labkit never read the dataset registry.
    from labkit.catalog import import_datasets
    import_datasets()


add_dataset_discoverer(_import_system_datasets)
