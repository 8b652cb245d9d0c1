"""labkit: rebuild, run and profile five landmark ML-systems designs.

Layers (dependencies point down only):
    labkit.core      bench harness, dataset registry, memory budget, metrics, direct I/O
    labkit.<system>  spmm (Flash-LLM), graph (AliGraph), disk (CaliEX),
                     dataworkers (GoldMiner), recsys (PICASSO)
    labkit.ui        widgets and the utilisation dashboard (observe systems, never imported by them)
    labkit.cli       the `labkit` command
"""

__version__ = "0.1.0"
