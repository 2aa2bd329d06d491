"""Components on their own: lazy table model (100,000 rows), viewer y-range, settings, keymap, entry point."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QModelIndex, Qt

from speco3.gui.archive_model import COL, PAGE, ArchiveTableModel, Filters
from speco3.gui.keymap import DEFAULT_KEYS, Keymap
from speco3.gui.lines import display_range, mask_runs, running_median, vac_to_air
from speco3.gui.settings import AppSettings
from speco3.spectra.model import Spectrum, SpectrumMeta

pytestmark = pytest.mark.gui


class ListIndex:
    """An index stand-in over a Python list, counting queries (the SQL index is tested in tests/spectra)."""

    def __init__(self, n):
        self.rows = [SimpleNamespace(key=f"f{i:06d}.fits#0", path=f"/a/f{i:06d}.fits", index=0, name=f"f{i:06d}.fits",
                                     file_name=f"f{i:06d}.fits", survey="LAMOST", cls="STAR" if i % 10 else "QSO",
                                     subclass="", redshift=i * 1e-5, snr=float(i % 50), object_id=str(i), error=None)
                     for i in range(n)]
        self.queries = []

    def _match(self, survey=None, cls=None, **_):
        return [r for r in self.rows if (cls is None or r.cls == cls)]

    def count(self, **kw):
        return len(self._match(**kw))

    def query(self, limit=None, offset=0, sort="file_name", descending=False, **kw):
        self.queries.append((limit, offset, sort))
        rows = self._match(**kw)
        if sort != "file_name":
            rows = sorted(rows, key=lambda r: (getattr(r, sort), r.key), reverse=descending)
        return rows[offset: offset + limit if limit is not None else None]


def test_lazy_paging_over_100k_rows(qtbot):
    index = ListIndex(100_000)
    model = ArchiveTableModel()
    t0 = time.perf_counter()
    model.set_index(index)
    opened = time.perf_counter() - t0
    assert model.rowCount() == PAGE and model.total_hint() == 100_000
    assert model.canFetchMore(QModelIndex())
    assert index.queries == [(PAGE, 0, "file_name")] and opened < 1.0
    model.fetchMore(QModelIndex())
    assert model.rowCount() == 2 * PAGE and index.queries[-1] == (PAGE, PAGE, "file_name")
    assert model.data(model.index(300, 0)) == "f000300.fits"
    assert model.data(model.index(300, COL["redshift"])) == "0.00300"
    # a view scrolled to the end asks for more pages only as needed
    from PySide6.QtWidgets import QTableView

    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(model)
    view.resize(600, 400)
    view.show()
    view.scrollToBottom()
    qtbot.wait(50)
    assert 2 * PAGE <= model.rowCount() < 20 * PAGE
    # sorting goes to the index; filters are passed through
    model.sort(COL["snr"], Qt.SortOrder.DescendingOrder)
    assert index.queries[-1] == (PAGE, 0, "snr") and model.entry(0).snr == 49.0
    model.set_filters(Filters(cls="QSO"))
    assert model.total_hint() == 10_000 and all(model.entry(r).cls == "QSO" for r in range(model.rowCount()))
    assert model.row_of("f000990.fits#0") is not None


def test_verdict_state_filter_pages_through_the_index():
    index = ListIndex(2000)
    decided = {f"f{i:06d}.fits#0" for i in (5, 1500, 1999)}
    model = ArchiveTableModel(state_fn=lambda e: (None, "YES" if e.key in decided else None))
    model.set_index(index)
    model.set_filters(Filters(state="decided"))
    model.fetch_all()
    assert [model.entry(r).key for r in range(model.rowCount())] == sorted(decided)
    assert model.data(model.index(0, COL["decision"])) == "YES"
    model.set_filters(Filters(state="undecided"))
    assert model.rowCount() == PAGE - 1  # the first page minus the decided f000005


def test_next_is_refused_at_the_last_row_when_the_pages_left_hold_none(tmp_path):
    """Under a verdict-state filter with pages left, Next stayed enabled on the last row read and then said "end of
    the queue": showing the last row read reads on, so `move_refusal` knows (a page with a match moves on to it)."""
    from speco3.vetting.session import VettingSession

    class Settings:
        auto_advance = True

        def vetter_name(self) -> str:
            return "Ana"

    index = ListIndex(2000)
    decided = {f"f{i:06d}.fits#0" for i in (5, 7)}  # both on the first page
    model = ArchiveTableModel(state_fn=lambda e: (None, "YES" if e.key in decided else None))
    model.set_index(index)
    model.set_filters(Filters(state="decided"))
    assert model.rowCount() == 2 and model.has_more()
    (tmp_path / "archive").mkdir()
    s = VettingSession(Settings(), lambda _e: _noisy_spectrum())
    assert s.open_archive(tmp_path / "archive", tmp_path / "store.sqlite").opened
    s.set_queue(model)
    assert s.go_to(0) and s.move_refusal(1) is None
    assert s.go_to(1)  # the last row read: the pages left are read, none matches
    assert not model.has_more() and model.rowCount() == 2
    assert s.move_refusal(1) == "end of the queue"
    decided.add("f001500.fits#0")  # a match on a later page
    model.set_filters(Filters(state="any"))
    model.set_filters(Filters(state="decided"))
    assert model.rowCount() == 2 and model.has_more()
    assert s.go_to(1) and model.rowCount() == 3 and s.move_refusal(1) is None
    assert s.step(1) and s.entry.key == "f001500.fits#0" and s.move_refusal(1) == "end of the queue"
    s.close()


def _noisy_spectrum():
    rng = np.random.default_rng(3)
    w = np.linspace(3700, 9100, 3909)
    flux = 100 + rng.normal(0, 2, w.size)
    flux[:60] += rng.normal(0, 3000, 60)  # a terrible blue edge
    flux[2000] = 1e6  # a cosmic ray, not masked
    flux[1000:1010] += 150  # a real emission line, ten pixels wide
    return Spectrum(w, flux, np.full(w.size, 0.25), meta=SpectrumMeta(redshift=0.0))


def test_display_range_ignores_edges_and_spikes_but_keeps_lines():
    s = _noisy_spectrum()
    lo, hi = display_range(s.flux)
    assert 60 < lo < 100 and 250 < hi < 300


def test_viewer_y_range_follows_the_visible_window(qtbot):
    from speco3.gui.viewer import SpectrumViewer

    v = SpectrumViewer()
    qtbot.addWidget(v)
    v.show()
    v.set_spectrum(_noisy_spectrum())
    lo, hi = v.y_range()
    assert lo > 50 and hi < 300
    v.show_window(7000, 7200, "observed")
    lo2, hi2 = v.y_range()
    assert hi2 < 130  # no line in this window: tight range around the continuum
    assert v.highlight.getRegion() == pytest.approx((7000, 7200))


def test_running_median_equals_nanmedian_of_each_window():
    import warnings

    rng = np.random.default_rng(7)
    for n in (8, 500):
        for frac in (0.0, 0.3, 0.95, 1.0):
            v = rng.normal(size=n)
            v[rng.random(n) < frac] = np.nan
            v[1], v[2] = np.inf, -np.inf
            windows = np.lib.stride_tricks.sliding_window_view(np.pad(v, 3, mode="edge"), 7)
            with warnings.catch_warnings():  # all-NaN windows
                warnings.simplefilter("ignore", RuntimeWarning)
                ref = np.nanmedian(windows, axis=1)
            assert np.array_equal(running_median(v, 7), ref, equal_nan=True), (n, frac)


def test_running_median_of_finite_values_equals_median_of_each_window():
    """All-finite input takes the partial-sort path: the same medians, edges padded with the end values."""
    rng = np.random.default_rng(11)
    for n, width in ((8, 7), (501, 7), (2000, 15)):
        v = rng.normal(size=n)
        v[n // 2] = 40.0  # a spike the median removes
        half = width // 2
        ref = np.median(np.lib.stride_tricks.sliding_window_view(np.pad(v, half, mode="edge"), width), axis=1)
        assert np.array_equal(running_median(v, width), ref), (n, width)


def test_viewer_switch_keeps_the_plot_size_and_draws_masks_as_one_item(qtbot):
    """A switch must not resize the plot (a taller header would: two paints per switch); masks are one bar item
    whose bars span the visible y-range, telluric bands likewise."""
    from speco3.gui.viewer import SpectrumViewer

    v = SpectrumViewer()
    qtbot.addWidget(v)
    v.resize(700, 400)
    v.show()
    qtbot.waitExposed(v)
    plain = _noisy_spectrum()
    long_meta = SpectrumMeta(redshift=0.1, survey="A SURVEY WITH A LONG NAME", data_release="DR99", cls="QSO",
                             subclass="BROADLINE AGN STARBURST", snr=12.3, redshift_source="a long pipeline name")
    masked = Spectrum(plain.wavelength, plain.flux, plain.ivar, mask=np.isin(np.arange(3909), np.r_[100:120, 3000:3050]),
                      meta=long_meta)
    v.set_spectrum(plain)
    qtbot.wait(50)
    size = v.plot.size()
    v.set_spectrum(masked)
    qtbot.wait(50)
    assert v.plot.size() == size
    bars = v.mask_bars.opts
    assert len(bars["x0"]) == 2 and bars["x0"][0] < plain.wavelength[100] < bars["x1"][0]
    assert (bars["y0"][0], bars["y1"][0]) == pytest.approx(v.y_range())
    v.show_window(7000, 7200, "observed")
    assert (v.mask_bars.opts["y0"][0], v.mask_bars.opts["y1"][0]) == pytest.approx(v.y_range())
    assert len(v.telluric_bars.opts["x0"]) == 5


def test_vacuum_air_and_mask_runs():
    assert vac_to_air(6564.61) == pytest.approx(6562.80, abs=0.02)
    mask = np.zeros(100, bool)
    mask[[3, 4, 5, 7, 50]] = True
    assert mask_runs(mask) == [(3, 8), (50, 51)]


def test_settings_roundtrip_and_bad_file(tmp_path):
    s = AppSettings(vetter="MJ", n_threads=4, n_gpu_layers=0, image_max_tokens=512, keymap={"next": "J"})
    path = s.save()
    again = AppSettings.load()
    assert again == s and path.parent.name == "config"
    es = again.engine_settings()
    assert (es.n_threads, es.n_gpu_layers, es.image_max_tokens, es.n_ctx) == (4, 0, 512, 16384)
    path.write_text(json.dumps({"vetter": 3, "n_ctx": -5, "auto_advance": False}))
    odd = AppSettings.load()
    assert odd.vetter == "" and odd.n_ctx == 16384 and odd.auto_advance is False
    path.write_text("{not json")
    assert AppSettings.load() == AppSettings()
    assert path.with_name("desktop.json.bad").is_file()


def test_keymap_overrides_conflicts_and_cheat_sheet():
    km = Keymap({"next": "J", "bogus": "K", "previous": ""})
    assert km.keys["next"] == "J" and km.keys["previous"] == DEFAULT_KEYS["previous"]
    assert km.overrides() == {"next": "J"}
    assert Keymap({"next": "Y"}).conflicts() == [("Y", "decide_yes", "next")]
    assert "Next spectrum" in km.cheat_sheet_html() and "<code>J</code>" in km.cheat_sheet_html()


def test_custom_keymap_drives_the_window(qtbot, make_window, demo_archive, open_and_wait):
    settings = AppSettings(vetter="kb", keymap={"decide_yes": "J", "next": "K"})
    w = make_window(settings=settings)
    open_and_wait(w, demo_archive)
    qtbot.keyClick(w.archive.table, Qt.Key.Key_K)
    assert w.vetting.row == 1
    qtbot.keyClick(w.archive.table, Qt.Key.Key_Y)  # no longer bound
    assert w.vetting.store.decisions("cv") == []
    qtbot.keyClick(w.archive.table, Qt.Key.Key_J)
    assert [d.decision for d in w.vetting.store.decisions("cv")] == ["YES"]
    assert "<code>J</code>" in w.decision.cheat.text()


def test_entry_point_arguments(capsys, tmp_path):
    from speco3.gui.app import main

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and "spec-o3-desktop 0.1.0" in capsys.readouterr().out
    assert main([str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_rows_of_a_multi_spectrum_file_stay_distinguishable(qtbot, make_window, open_and_wait, tmp_path, spectra_dir):
    """LAMOST MRS files hold 16 spectra under one long name: the table elides the middle, so each row still shows
    its ``#N``, and the tooltip names the file and the spectrum."""
    import shutil

    from PySide6.QtGui import QFontMetrics

    folder = tmp_path / "mrs"
    folder.mkdir()
    shutil.copy(spectra_dir / "lamost" / "med-58408-TD230151N343645T01_sp01-015.fits", folder)
    w = make_window()
    open_and_wait(w, folder)
    table, model = w.archive.table, w.archive.table.model()
    width = table.columnWidth(COL["name"]) - 8  # the cell's text margins
    shown = {}
    for row in range(model.rowCount()):
        text = model.data(model.index(row, COL["name"]))
        assert QFontMetrics(table.font()).horizontalAdvance(text) > width  # the name really is cut
        shown[text] = QFontMetrics(table.font()).elidedText(text, table.textElideMode(), width)
    assert len(shown) == 16 and len(set(shown.values())) == 16
    # and as painted: the name cells of rows with the same background differ (the word-wrapped cells did not)
    table.resize(900, 600)
    table.setColumnWidth(COL["name"], 260)
    qtbot.wait(50)
    shot = table.viewport().grab().toImage()
    cells = []
    for row in range(2, 16, 2):  # even rows share a background; row 0 is current (selected)
        rect = table.visualRect(model.index(row, COL["name"]))
        cell = shot.copy(rect)
        cells.append(bytes(cell.constBits())[: cell.sizeInBytes()])
    assert len(set(cells)) == len(cells)
    tip = model.data(model.index(1, COL["name"]), Qt.ItemDataRole.ToolTipRole)
    name = model.data(model.index(1, COL["name"]))
    assert tip.endswith("med-58408-TD230151N343645T01_sp01-015.fits #" + name.split("#")[1])


def test_engine_status_names_the_model_not_its_settings():
    from speco3.engine.base import EngineSettings
    from speco3.engine.chatapi import ServerConfig
    from speco3.engine.choice import InstalledModel, ModelServer

    es = EngineSettings(flash_attn=True, use_mmap=None)
    assert InstalledModel("tiny-q8_0").engine_key(es).label == "tiny-q8_0"
    served = ModelServer.of(ServerConfig("http://gpu:8080/v1", model="spec-o3-7b"))
    assert served.engine_key(es).label == "spec-o3-7b on http://gpu:8080"
    assert ModelServer.of(ServerConfig("http://gpu:8080")).engine_key(es).label \
        == "the served model on http://gpu:8080"
    assert served.engine_key(es) == ModelServer.of(ServerConfig("http://gpu:8080", "spec-o3-7b")).engine_key(es)
    assert served.engine_key(es) != served.engine_key(EngineSettings(flash_attn=False))  # reopened on a change


def test_prescreen_status_names_which_spectrum_of_a_file_it_follows(qtbot, make_window):
    w = make_window()
    entry = SimpleNamespace(name="med-58408-TD230151N343645T01_sp01-015.fits#12",
                            file_name="med-58408-TD230151N343645T01_sp01-015.fits")
    w.agent._jobs[9999] = (entry, None)
    w.agent._follow(9999, "/archive/med-58408-TD230151N343645T01_sp01-015.fits#12", 2)
    assert w.agent.panel.status.text().endswith("the estimate follows med-58408-TD230151N343645T01_sp01-015.fits#12")


def test_the_remembered_model_is_a_typed_choice_saved_and_restored(tmp_path):
    """The settings remember the model chosen (`AppSettings.remember_model`) and give it back typed after a save and
    load: an `InstalledModel`; the model server while one is set; the scripted demo where it is offered (else the
    installed model chosen before)."""
    from speco3.engine.chatapi import ServerConfig
    from speco3.engine.choice import DEMO, InstalledModel, ModelServer
    from speco3.gui.settings import AppSettings

    settings = AppSettings()
    assert settings.remembered_model() is None
    settings.remember_model(InstalledModel("tiny-q8_0"))
    settings.save(tmp_path / "settings.json")
    again = AppSettings.load(tmp_path / "settings.json")
    assert again.remembered_model() == InstalledModel("tiny-q8_0")
    again.server_url, again.server_model = "http://gpu:8080/v1", "spec-o3-7b"
    server = again.server_choice()
    assert server == ModelServer.of(ServerConfig("http://gpu:8080/v1", "spec-o3-7b"))
    again.remember_model(ModelServer.of(ServerConfig("http://old:8080")))
    again.save(tmp_path / "settings.json")
    again = AppSettings.load(tmp_path / "settings.json")
    assert again.remembered_model(server) == server  # the server set now
    assert again.remembered_model(None) == InstalledModel("tiny-q8_0")  # none set: the model chosen before
    again.remember_model(DEMO)
    assert again.remembered_model(server, demo=True) == DEMO
    assert again.remembered_model(server, demo=False) == InstalledModel("tiny-q8_0")  # not the demo archive
    again.remember_model(None)
    assert again.remembered_model(server, demo=True) is None
