"""``spec-o3 models …`` and ``spec-o3 convert`` end to end through `speco3.cli.main`."""

from __future__ import annotations

import json

import pytest
from test_model_store import _flip_data_byte

from speco3.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_on_an_empty_store_shows_the_catalog(capsys):
    code, out, _ = run(capsys, "models", "list")
    assert code == 0
    assert "spec-o3-7b" in out and "Maxwell-Jia/spec-o3-3b" in out and "not installed" in out
    assert "spec-o3 models import TEXT.gguf MMPROJ.gguf" in out
    code, out, _ = run(capsys, "models", "list", "--json")
    data = json.loads(out)
    assert [m["name"] for m in data["catalog"]] == ["spec-o3-7b", "spec-o3-3b"] and data["installed"] == []


def test_import_list_verify_default_remove(capsys, gguf_pair, monkeypatch):
    text, proj = gguf_pair
    code, out, err = run(capsys, "models", "import", str(text), str(proj), "--name", "tiny", "--default")
    assert code == 0 and "installed tiny (F32, hidden size 64" in out
    assert "sha256" in err, "progress goes to stderr"
    code, out, _ = run(capsys, "models", "list")
    assert "*tiny" in out and "imported from" in out
    code, out, _ = run(capsys, "models", "verify")
    assert code == 0 and "tiny: OK" in out and "sha256 checked" in out
    code, out, _ = run(capsys, "models", "default")
    assert code == 0 and out.strip() == "tiny"
    from speco3_models.store import ModelStore

    _flip_data_byte(ModelStore().get("tiny").text_path)
    code, out, _ = run(capsys, "models", "verify", "tiny")
    assert code == 1 and "tiny: FAILED" in out and "sha256 differs" in out
    code, out, _ = run(capsys, "models", "verify", "tiny", "--quick")
    assert code == 0
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, _, err = run(capsys, "models", "remove", "tiny")
    assert code == 1 and "--yes" in err
    code, out, _ = run(capsys, "models", "remove", "tiny", "--yes")
    assert code == 0 and "removed tiny" in out
    code, out, _ = run(capsys, "models", "default")
    assert code == 1 and "no model installed" in out


def test_remove_asks_on_a_terminal(capsys, gguf_pair, monkeypatch):
    run(capsys, "models", "import", *map(str, gguf_pair), "--name", "tiny")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    code, out, _ = run(capsys, "models", "remove", "tiny")
    assert code == 1 and "kept" in out
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert run(capsys, "models", "remove", "tiny")[0] == 0


def test_errors_are_one_plain_line(capsys, gguf_pair, tmp_path):
    text, proj = gguf_pair
    code, _, err = run(capsys, "models", "import", str(proj), str(text))
    assert code == 1 and err.startswith("error: ") and "vision projector, not the text model" in err
    code, _, err = run(capsys, "models", "pull", "spec-o3-7b")
    assert code == 1 and "offline" in err and "spec-o3 models import" in err and "Traceback" not in err
    code, _, err = run(capsys, "models", "verify", "nothing")
    assert code == 1 and "not installed" in err
    code, _, err = run(capsys, "convert", str(tmp_path / "nowhere"))
    assert code == 1 and "not a folder" in err
    code, _, err = run(capsys, "convert", str(tmp_path), "--quant", "Q3_X")
    assert code == 1 and "unknown quantization 'Q3_X'" in err


def test_store_option_points_elsewhere(capsys, gguf_pair, tmp_path):
    other = tmp_path / "elsewhere"
    code, out, _ = run(capsys, "models", "--store", str(other), "import", *map(str, gguf_pair), "--link")
    assert code == 0 and (other / "manifest.json").exists()
    code, out, _ = run(capsys, "models", "list")
    assert "none —" in out


def test_progress_printer_without_a_terminal():
    import io

    from speco3.cli.models import StderrProgress

    buf = io.StringIO()
    p = StderrProgress(buf)
    for done in range(0, 100_001, 1000):
        p("copy x", done, 100_000)
    p.close()
    lines = buf.getvalue().splitlines()
    assert 10 <= len(lines) <= 12 and lines[-1].startswith("copy x: 100%")


@pytest.mark.parametrize("argv", [["models"], ["models", "bogus"]])
def test_models_needs_an_action(argv):
    with pytest.raises(SystemExit):
        main(argv)


def test_failed_convert_leaves_nothing_in_the_store(capsys, tmp_path):
    ckpt = tmp_path / "broken"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    code, _, err = run(capsys, "convert", str(ckpt))
    assert code == 1 and err.startswith("error: ")
    from speco3_models.store import ModelStore

    store = ModelStore()
    assert store.list() == []
    assert not (store.root / ".build" / "broken-q4_k_m").exists()
