"""The `sample-array` image source of glasses_rag.crag_mm.content: numeric sample data rendered offline, bad recipes
refused."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from glasses_rag.crag_mm.content import Entity
from glasses_rag.crag_mm.content_images import SampleArrayImage, SkimageImage


def recipe(**kw) -> SampleArrayImage:
    return SampleArrayImage(source="sample-array", **kw)


def test_float_image_is_scaled_not_clipped_to_black():
    phantom = recipe(package="skimage", name="shepp_logan_phantom").load()
    a = np.asarray(phantom)
    assert phantom.mode == "RGB" and phantom.size == (400, 400)
    assert a.min() == 0 and a.max() == 255 and (a > 32).mean() > 0.3  # the head, not just its rim
    # the plain skimage source shows the same [0, 1] floats as an all but black picture
    assert np.asarray(SkimageImage(source="skimage", name="shepp_logan_phantom").load()).max() <= 1


def test_matplotlib_raw_scan_and_npz_grid():
    mri = np.asarray(recipe(package="matplotlib", name="s1045.ima.gz", raw_shape=(256, 256)).load())
    assert mri.shape == (256, 256, 3) and mri.max() == 255 and mri.std() > 20
    assert (mri[..., 0] == mri[..., 1]).all()  # gray without a colormap
    dem = np.asarray(
        recipe(package="matplotlib", name="jacksboro_fault_dem.npz", npz_key="elevation", cmap="gist_earth").load()
    )
    assert dem.shape == (344, 403, 3) and not (dem[..., 0] == dem[..., 2]).all()  # coloured by the colormap


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"package": "skimage", "name": "no_such_image"}, "no sample image"),
        ({"package": "skimage", "name": "moon", "raw_shape": (2, 2)}, "for matplotlib sample files"),
        ({"package": "matplotlib", "name": "no_such_file.npz", "npz_key": "x"}, "no sample data file"),
        ({"package": "matplotlib", "name": "jacksboro_fault_dem.npz"}, "needs npz_key"),
        ({"package": "matplotlib", "name": "s1045.ima.gz", "npz_key": "x"}, "needs npz_key"),
        ({"package": "matplotlib", "name": "s1045.ima.gz"}, "raw_shape"),
        ({"package": "skimage", "name": "moon", "cmap": "not_a_cmap"}, "no colormap"),
    ],
)
def test_bad_recipes_are_refused(kw, message):
    with pytest.raises(ValidationError, match=message):
        recipe(**kw)


def test_wrong_raw_shape_fails_at_render_time():
    with pytest.raises(ValueError):
        recipe(package="matplotlib", name="s1045.ima.gz", raw_shape=(100, 100)).load()


def test_entities_accept_the_new_source():
    image = {"source": "sample-array", "package": "skimage", "name": "shepp_logan_phantom"}
    e = Entity.model_validate(
        {"slug": "phantom", "name": "Phantom", "domain": "math and science", "attrs": {}, "image": image}
    )
    assert isinstance(e.image, SampleArrayImage)
