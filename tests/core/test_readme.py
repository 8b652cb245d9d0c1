"""README and DEVELOPING.md against the real command line and Makefile: nothing documented that does not exist."""

import re
from pathlib import Path

from labkit import cli

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> dict[str, set[str]]:
    """`labkit CMD [ACTION]` -> the long options it accepts (without --help)."""
    out: dict[str, set[str]] = {}

    def walk(parser, prefix):
        flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
        out[prefix] = flags
        for a in parser._actions:
            if hasattr(a, "choices") and isinstance(a.choices, dict):
                for name, sub in a.choices.items():
                    walk(sub, f"{prefix} {name}")

    walk(cli.build_parser(), "labkit")
    return out


def _readme_command_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## The `labkit` command", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [ln.split("#", 1)[0].strip() for ln in block.strip().splitlines()]


def test_readme_command_lines_match_the_parser():
    cmds = _commands()
    documented: dict[str, set[str]] = {}
    for line in _readme_command_lines():
        words = line.split()
        if words[1] == "COMMAND":
            continue
        # the longest known command that the line starts with: `labkit data make`, not `labkit data`
        name = max((c for c in cmds if line == c or line.startswith(c + " ")), key=len)
        flags = set(re.findall(r"--[a-z][a-z-]*", line)) - {"--help"}
        assert flags <= cmds[name] | {"--version"}, (line, flags - cmds[name])
        documented.setdefault(name, set()).update(flags)
    for name, flags in cmds.items():
        if name in ("labkit", "labkit data", "labkit course"):
            continue  # the top level and the `data` and `course` groups take no options of their own
        assert name in documented, f"README does not show `{name}`"
        assert flags <= documented[name], f"README's `{name}` line lacks {sorted(flags - documented[name])}"


def test_make_targets_named_in_the_docs_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    for doc in ("README.md", "docs/DEVELOPING.md"):
        for t in re.findall(r"`make ([a-z][a-z-]*)", (ROOT / doc).read_text()):
            assert t in targets, f"{doc} names `make {t}`, which the Makefile lacks"


def test_make_help_lists_every_target_and_says_how_to_pass_pytest_options():
    import subprocess
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = {ln.split("\t")[0] for ln in out.splitlines()}
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert set(phony) <= listed, set(phony) - listed
    assert "PYTEST_ARGS" in out
