"""A first run builds the demo dataset without the `datasets` library's progress bars on the terminal."""

from __future__ import annotations

import datasets

from glasses_rag.crag_mm.demo import ensure_demo


def test_building_the_demo_prints_no_progress_bars(tmp_path, capfd):
    datasets.enable_progress_bars()
    ensure_demo(tmp_path / "demo", force=True)
    out, err = capfd.readouterr()
    assert "Creating parquet" not in err + out and "%|" not in err
    assert not datasets.are_progress_bars_disabled()  # the library's own setting is left as it was
