"""What notebook text may quote (issue 29): no number that a bench record can change.

A measured speedup, rate or crossover belongs in a code cell that reads the record or measures
live. The papers' own figures may be quoted in a sentence that says they are the paper's, and so
may a bound the text derives (the byte bound, "at best") and a model's stated inputs.
"""

from __future__ import annotations

import re

#: a speedup ("2.1x"; "7168 x 7168" is a shape), a decimal that is not a size, a rate, or where dense wins
MEASURED = re.compile(r"\b\d+(?:\.\d+)?[x\u00d7](?![\w])"
                      r"|\b\d+\.\d+\b(?!\s*(?:GiB|MiB|KiB|GB\b|MB\b|billion|million))"
                      r"|\b\d+(?:\.\d+)?\s*(?:GB/s|tok(?:en)?s/s|ms)\b"
                      r"|\b(?:ahead|wins?|overtakes?|crossover)\b[^.;]*?\bN\s*=\s*\d+")
#: what makes a sentence the paper's (or a derived bound) rather than this lab's measurement
ATTRIBUTED = re.compile(r"\bpapers?\b|\breports?\b|\bA100\b|\bbyte bound\b|\bat best\b|\bSIGMOD\b|\bICDE\b"
                        r"|\bVLDB\b|\bOSDI\b|\bSOSP\b|\bEuroSys\b|\bFlash-LLM\b"
                        # a model's stated inputs (a distribution's parameters) are choices, not measurements
                        r"|\blognormal\b|\bPoisson\b", re.I)


def unattributed_numbers(text: str) -> list[str]:
    """The sentences of `text` that quote a measurable number without saying it is the paper's or a bound."""
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"(?<![\d.])1(?:\.0+)?[x\u00d7](?!\w)|(?<![\d.])1\.0+\b", "parity", text)   # "holds 1.0x": no speedup, not a measurement
    sentences = re.split(r"(?<=[.!?:])\s+(?=[A-Z*`(])", text)
    return [s for s in sentences if MEASURED.search(s) and not ATTRIBUTED.search(s)]
