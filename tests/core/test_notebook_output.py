"""run_notebook's executed copy: never the committed notebook, never an existing file unless asked."""

import json
import os

import pytest

from labkit.core.notebooks import run_notebook


def _notebook(path, body="x = 1"):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    params = nbformat.v4.new_code_cell('PROFILE = "ci"\nMETRICS_OUT = None')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body),
                nbformat.v4.new_code_cell("from labkit.core.metrics import record_metrics\n"
                                          "record_metrics({'x': x}, METRICS_OUT)")]
    nbformat.write(nb, str(path))
    return path


def test_output_must_not_be_the_notebook_or_an_existing_file(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    committed = nb.read_bytes()
    with pytest.raises(ValueError, match=r"^output='.*nb\.ipynb' is not accepted; expected a path other than"):
        run_notebook(nb, output=nb)
    with pytest.raises(ValueError, match="output="):
        run_notebook(nb, output=tmp_path / "." / "nb.ipynb", overwrite=True)  # the same file, spelled otherwise
    os.link(nb, tmp_path / "hard.ipynb")
    with pytest.raises(ValueError, match="output="):
        run_notebook(nb, output=tmp_path / "hard.ipynb", overwrite=True)
    prev = tmp_path / "out.ipynb"
    prev.write_text("an earlier run, kept")
    with pytest.raises(FileExistsError, match=r"^output='.*out\.ipynb' already exists; pass overwrite=True"):
        run_notebook(nb, output=prev)
    assert prev.read_text() == "an earlier run, kept" and nb.read_bytes() == committed


@pytest.mark.notebook
def test_output_is_written_in_one_step(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    out = tmp_path / "out" / "run.ipynb"
    out.parent.mkdir()
    assert run_notebook(nb, output=out, timeout=120) == {"x": 1}
    executed = json.loads(out.read_text())
    assert any(c.get("outputs") is not None and c.get("execution_count") for c in executed["cells"])
    assert [p.name for p in out.parent.iterdir()] == ["run.ipynb"]  # no temporary file left beside it
    with pytest.raises(FileExistsError):
        run_notebook(nb, output=out, timeout=120)
    os.chmod(out, 0o640)
    assert run_notebook(nb, output=out, timeout=120, overwrite=True) == {"x": 1}
    assert out.stat().st_mode & 0o777 == 0o640
    # A failed run still leaves its executed copy (with the traceback) at output, whole.
    bad = _notebook(tmp_path / "bad.ipynb", body="raise RuntimeError('boom in cell')")
    failed = tmp_path / "out" / "failed.ipynb"
    from papermill.exceptions import PapermillExecutionError
    with pytest.raises(PapermillExecutionError, match="RuntimeError: boom in cell") as err:
        run_notebook(bad, output=failed, timeout=120)
    assert (err.value.ename, err.value.evalue) == ("RuntimeError", "boom in cell")
    assert "boom in cell" in failed.read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["failed.ipynb", "run.ipynb"]
