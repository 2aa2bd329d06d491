"""The catalog ships as package data and says what is known (and what is only estimated)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from speco3_models import catalog
from speco3_models.errors import ModelStoreError


def test_catalog_loads_from_package_data():
    raw = json.loads(resources.files("speco3_models").joinpath("catalog.json").read_text(encoding="utf-8"))
    names = [m.name for m in catalog.catalog()]
    assert names == ["spec-o3-7b", "spec-o3-3b"]
    assert {m["name"] for m in raw["models"]} == set(names)


def test_known_facts_of_both_models():
    m7, m3 = catalog.get("spec-o3-7b"), catalog.get("Maxwell-Jia/spec-o3-3b")
    assert (m7.repo_id, m7.hidden_size, m7.tied_embeddings) == ("Maxwell-Jia/spec-o3-7b", 3584, False)
    assert (m3.repo_id, m3.hidden_size, m3.tied_embeddings) == ("Maxwell-Jia/spec-o3-3b", 2048, True)
    for m in (m7, m3):
        assert m.recommended_quant == "Q4_K_M" and m.recommended_ctx == 16384 and m.image_max_tokens
        assert {"config.json", "tokenizer.json", "preprocessor_config.json"} <= set(m.required_files)
        assert m.text_arch == "qwen2vl"
        assert m.license["model"] == "check the model card"
        assert m.install_name() == f"{m.name}-q4_k_m"
    assert m7.license["base"] == "Apache-2.0"


def test_sizes_are_flagged_as_estimates_and_no_checksums_are_invented():
    text = resources.files("speco3_models").joinpath("catalog.json").read_text(encoding="utf-8")
    assert "sha256\"" not in text and "sha256\":" not in text
    m7 = catalog.get("spec-o3-7b")
    est = m7.installed_bytes("Q4_K_M")
    assert est.estimate and 5e9 < est.value < 7e9
    assert str(est).startswith("≈")
    assert m7.text_bytes["Q8_0"].value > m7.text_bytes["Q5_K_M"].value > m7.text_bytes["Q4_K_M"].value
    assert m7.installed_bytes("IQ1_S") is None
    assert any("estimate" in n for n in catalog.catalog_notes())


def test_unknown_model_names_the_known_ones():
    assert catalog.find("nope") is None
    with pytest.raises(ModelStoreError, match="spec-o3-7b, spec-o3-3b"):
        catalog.get("nope")
