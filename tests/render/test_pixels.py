"""Rendered pixels straight to the model's image: the same pixels as through the PNG, without encoding one."""

from __future__ import annotations

import dataclasses
import io
import pickle

import numpy as np
import pytest
from PIL import Image

from speco3.evaluate.similarity import render_similarity
from speco3.imaging import PreparedImage, prepare_image
from speco3.render import render_view
from speco3.spectra.view import View

pytestmark = pytest.mark.gui

LAMOST = "spec-60591-LN042429N340750BM01_sp01-001.fits.gz"


@pytest.fixture(scope="module")
def views(lamost_spectrum):
    spec = lamost_spectrum(LAMOST)
    return [View(spec), View(spec, wavelength_range=(6500, 6600)), View(spec, wavelength_range=(9990, 9995))]


def _decoded(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as img:
        return np.asarray(img.convert("RGB"))


def test_rgb_is_the_png_pixels(views):
    for view in views:
        img = render_view(view)
        assert img.rgb.shape == (img.height, img.width, 3) and img.rgb.dtype == np.uint8
        assert not img.rgb.flags.writeable
        assert np.array_equal(img.rgb, _decoded(img.png)), view.wavelength_range


def test_model_image_from_pixels_equals_the_png_path(views):
    """prepare_image(rendered) gives what prepare_image(rendered.png) gave: same size, digest and PNG bytes."""
    for view in views:
        img = render_view(view)
        direct, via_png = prepare_image(img), prepare_image(img.png)
        assert direct == via_png
        assert (direct.width, direct.height, direct.grid, direct.sha256) == (
            via_png.width, via_png.height, via_png.grid, via_png.sha256)
        assert direct.png == via_png.png
        assert direct.rgb_bytes() == via_png.rgb_bytes() == _decoded(direct.png).tobytes()


def test_no_png_is_encoded_for_the_model(views):
    """The evaluation and vetting loops hand the rendered image to prepare_image: no PNG round trip."""
    img = render_view(views[0])
    prepared = prepare_image(img, max_tokens=300)
    assert "png" not in vars(img)  # the render's PNG was never encoded
    assert prepared.encoded is None  # nor the model image's, until someone asks for it
    rgb = prepared.rgb_bytes()
    assert prepared.png.startswith(b"\x89PNG\r\n\x1a\n") and prepared.encoded is not None
    assert prepared.pixels is None  # once encoded, it keeps only the PNG (traces and views kept in memory)
    assert prepared.rgb_bytes() == rgb


def test_prepared_image_is_read_only_and_copies_keep_the_pixels(views):
    prepared = prepare_image(render_view(views[1]))
    with pytest.raises(AttributeError):
        prepared.width = 1
    again = pickle.loads(pickle.dumps(prepared))
    assert again == prepared and again.rgb_bytes() == prepared.rgb_bytes()
    lying = dataclasses.replace(prepared, grid=(1, 1))  # what the engine tests do to fake a wrong grid
    assert lying.grid == (1, 1) and lying.png == prepared.png and lying != prepared
    with pytest.raises(ValueError):
        PreparedImage()


def test_damaged_or_mislabelled_png_is_a_value_error():
    with pytest.raises(ValueError, match="cannot be decoded"):
        PreparedImage(png=b"\x89PNG\r\n\x1a\nbroken", width=28, height=28, grid=(1, 1), sha256="x").rgb_bytes()
    buf = io.BytesIO()
    Image.new("RGB", (56, 28), "white").save(buf, format="PNG")
    with pytest.raises(ValueError, match="claims 28x28"):
        PreparedImage(png=buf.getvalue(), width=28, height=28, grid=(1, 1), sha256="x").rgb_bytes()


def test_similarity_from_pixels_equals_from_png(views):
    full = render_view(views[0])
    shipped = render_view(views[1]).png
    assert render_similarity(full, shipped) == render_similarity(full.png, shipped)
    assert render_similarity(full, full.png)["render_similarity"] == 1.0
