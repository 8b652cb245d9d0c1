"""labkit doctor: what it checks."""


def test_doctor_checks_every_pinned_runtime_dependency():
    import re
    import tomllib
    from pathlib import Path

    from labkit import doctor
    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["dependencies"]
    import_name = {"torch-geometric": "torch_geometric", "pillow": "PIL", "ipython": "IPython"}
    for dep in deps:
        dist = re.split(r"[=<>!~ ;\[]", dep, maxsplit=1)[0]
        assert import_name.get(dist, dist) in doctor._PACKAGES, dist
