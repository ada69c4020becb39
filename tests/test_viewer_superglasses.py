"""The viewer on a SuperGlasses run: the images come from the run's SuperGlasses data, and the header shows the
SuperGlasses report (accuracy overall and by slice), not CRAG-MM's metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sg_support import FixtureWeb, article, organic, small_dataset, use_fixture_web

from glasses_rag.frontends.viewer import build_html, load_images


@pytest.fixture(scope="module")
def sg_run(tmp_path_factory) -> Path:
    from glasses_rag.frontends import run as cli

    tmp = tmp_path_factory.mktemp("sg")
    data = small_dataset(tmp / "data")
    with FixtureWeb(image_dir=tmp / "img") as web, pytest.MonkeyPatch.context() as mp:
        web.pages["f9"] = (
            "text/html",
            article("Falcon 9", ["Falcon 9 is a rocket made by SpaceX.", "It first flew in 2010."]),
        )
        web.web["Falcon 9 makes"] = organic(("Falcon 9", web.page_url("f9"), "Falcon 9 is a rocket made by SpaceX."))
        use_fixture_web(mp, web, tmp / "cache", tmp / "img")
        assert (
            cli.main(
                [
                    "--benchmark",
                    "superglasses",
                    "--data",
                    str(data),
                    "--out",
                    str(tmp / "runs"),
                    "--run-id",
                    "sg",
                    "--no-progress",
                    "--no-plot",
                    "--budget",
                    "60",
                    "--tokenizer",
                    "approx",
                ]
            )
            == 0
        )
        from glasses_rag.web.open_web import reset_open_web

        reset_open_web()
    return tmp / "runs" / "sg"


def test_the_viewer_finds_superglasses_images_in_the_run_data(sg_run):
    run = json.loads((sg_run / "run.json").read_text())
    assert run["benchmark"] == "superglasses"
    page = build_html(sg_run)
    assert "not found in" not in page and "could not be read" not in page
    # sg-0000, sg-0001 (image 1) and sg-0002 (image 2) have pictures; sg-0003's image_id is in no images file
    thumbs = re.findall(r"\.img-(\d+)\{background-image:url\(data:image/jpeg;base64,", page)
    assert len(thumbs) == 3
    images, note = load_images(run["data"], ["sg-0000", "sg-0002"], benchmark="superglasses")
    assert note is None and images["sg-0000"].size == (64, 48)
    assert load_images(run["data"], ["sg-0000"])[0]  # the layout alone says SuperGlasses too


def test_the_viewer_shows_the_superglasses_report_not_crag_metrics(sg_run):
    page = build_html(sg_run)
    header = page.split('<nav class="controls"', 1)[0]
    rep = json.loads((sg_run / "superglasses_report.json").read_text())
    assert "SuperGlasses accuracy" in header and "accuracy by slice" in header and rep["judge"] in header
    assert f"<td class='num'>{rep['overall']['n']}</td>" in header
    assert "egocentric" not in header and "KDD" not in header and "truthfulness" not in header
    assert "superglasses" in header  # the benchmark is named in the run fields
