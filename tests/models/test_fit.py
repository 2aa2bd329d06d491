"""Memory fit decisions (`speco3_models.fit.plan_fit`) for simulated free-memory figures; estimate parts; shapes."""

from __future__ import annotations

import pytest

from speco3_models import catalog
from speco3_models.fit import (
    GIB,
    GPU_MARGIN,
    HOST_MARGIN,
    MIB,
    DeviceMemory,
    ModelShape,
    choose_mmap,
    estimate,
    plan_fit,
    retry_layers,
    shape_from_catalog,
)
from speco3_models.gguf_scan import scan_gguf


@pytest.fixture(scope="module")
def q4():
    return shape_from_catalog(catalog.get("spec-o3-7b"), "Q4_K_M")


@pytest.fixture(scope="module")
def q8():
    return shape_from_catalog(catalog.get("spec-o3-7b"), "Q8_0")


def gpu(gib: float, name: str = "CUDA0") -> DeviceMemory:
    return DeviceMemory(name, int(gib * GIB), 24 * GIB, "GPU", "simulated")


def test_catalog_shape_matches_the_catalog_sizes(q4):
    entry = catalog.get("spec-o3-7b")
    assert q4.n_layers == 28 and q4.head_dim == 128 and q4.n_head_kv == 4
    assert q4.weights_bytes == pytest.approx(entry.text_bytes["Q4_K_M"].value, rel=0.01)
    assert q4.projector_bytes == int(entry.mmproj_bytes["F16"].value)


def test_kv_cache_is_exact_and_scales_with_context_and_type(q4):
    e4, e16 = estimate(q4, 4096), estimate(q4, 16384)
    assert e4.kv_bytes == 28 * 4096 * 2 * 4 * 128 * 2  # layers × cells × (K+V) × kv heads × head dim × f16
    assert e16.kv_bytes == 4 * e4.kv_bytes
    assert estimate(q4, 4096, kv_type="q8_0").kv_bytes < e4.kv_bytes < estimate(q4, 4096, kv_type="f32").kv_bytes
    assert estimate(q4, 4000).n_ctx == 4096  # llama.cpp pads the context to 256 cells
    assert estimate(q4, 16384, flash_attn=False).compute_bytes > e16.compute_bytes
    with pytest.raises(ValueError, match="unknown KV type"):
        estimate(q4, 4096, kv_type="q4_0")


def test_cpu_only_with_plenty_of_ram(q4):
    plan = plan_fit(q4, 16384, 64 * GIB)
    assert plan.fits and plan.n_gpu_layers == 0 and not plan.mmproj_on_gpu
    assert plan.n_ctx == 16384 and not plan.context_reduced and plan.notes == ()
    assert plan.host_needed_bytes == plan.estimate.total_bytes
    assert plan.summary().startswith("fits on this machine: CPU only, ")


def test_unknown_free_ram_is_assumed_enough(q4):
    assert plan_fit(q4, 16384, None).fits


def test_context_lowered_when_that_is_what_it_takes(q4):
    need = {c: estimate(q4, c).total_bytes for c in (16384, 8192, 4096)}
    free = need[8192] + HOST_MARGIN + 1
    plan = plan_fit(q4, 16384, free)
    assert plan.fits and plan.n_ctx == 8192 and plan.context_reduced
    assert any("context lowered from 16384 to 8192" in n for n in plan.notes)
    assert "context lowered from 16384 to 8192" in plan.summary()


def test_margin_is_kept(q4):
    need = estimate(q4, 4096).total_bytes
    assert not plan_fit(q4, 4096, need).fits  # exactly the need: no room for the margin
    assert plan_fit(q4, 4096, need + HOST_MARGIN).fits


def test_model_file_mapped_only_when_it_fits_beside_the_loaded_weights(q4):
    need = estimate(q4, 16384).total_bytes
    roomy = plan_fit(q4, 16384, need + q4.weights_bytes + HOST_MARGIN)
    assert roomy.fits and roomy.use_mmap and roomy.notes == () and roomy.to_dict()["use_mmap"] is True
    tight = plan_fit(q4, 16384, need + q4.weights_bytes + HOST_MARGIN - 1)  # fits, but not beside the mapped file
    assert tight.fits and not tight.use_mmap and not tight.context_reduced
    assert any("read into memory instead of mapped" in n for n in tight.notes)
    assert choose_mmap(q4, tight) is False and choose_mmap(q4, roomy) is True
    assert plan_fit(q4, 16384, None).use_mmap  # unknown free memory: llama.cpp's default
    # the user's choice wins either way, and says nothing
    forced = plan_fit(q4, 16384, need + HOST_MARGIN, mmap=True)
    assert forced.use_mmap and forced.notes == ()
    assert not plan_fit(q4, 16384, 64 * GIB, mmap=False).use_mmap


def test_refusal_names_the_figures_and_a_smaller_quant(q8):
    plan = plan_fit(q8, 16384, 5 * GIB)
    assert not plan.fits
    assert plan.message.startswith(f"{q8.name} needs ")
    assert "GiB at a 16384-token context, 5.0 GiB free; try Q4_K_M" in plan.message
    assert plan.summary() == plan.message
    # at its requested context, with the figures of that context
    assert plan.n_ctx == 16384 and plan.host_needed_bytes == estimate(q8, 16384).total_bytes


def test_refusal_suggests_the_context_that_would_fit_when_the_context_is_fixed(q4):
    free = estimate(q4, 8192).total_bytes + HOST_MARGIN + 1
    plan = plan_fit(q4, 32768, free, lower_ctx=False)
    assert not plan.fits and plan.message.endswith("try a 8k context")
    hopeless = plan_fit(q4, 16384, 1 * GIB)
    assert "this machine does not have the memory for this model" in hopeless.message


def test_refusal_suggests_a_q8_0_kv_cache_when_that_would_fit(q4):
    need = estimate(q4, 16384)
    q8_need = estimate(q4, 16384, kv_type="q8_0")
    free = q8_need.total_bytes + HOST_MARGIN + 1  # the q8_0 cache fits, the f16 one does not
    plan = plan_fit(q4, 16384, free, lower_ctx=False)
    assert not plan.fits and "try a q8_0 KV cache (--kv-type q8_0)" in plan.message
    assert need.total_bytes > free - HOST_MARGIN
    assert "q8_0" not in plan_fit(q4, 16384, q8_need.total_bytes + HOST_MARGIN - 2**20, lower_ctx=False).message
    assert "q8_0 KV" not in plan_fit(q4, 16384, 1 * GIB, kv_type="q8_0").message  # already q8_0


def test_big_gpu_takes_every_layer_the_output_and_the_projector(q4):
    plan = plan_fit(q4, 16384, 16 * GIB, [gpu(24)])
    assert plan.fits and plan.n_gpu_layers == 29 and plan.mmproj_on_gpu
    assert plan.summary().startswith("fits on this machine: GPU 28/28 layers")
    assert plan.notes == ()
    # what stays on the host: the token embeddings (llama.cpp keeps the input layer on the CPU) and the runtime
    assert plan.host_needed_bytes < 1.5 * GIB


def test_small_gpu_takes_part_of_the_layers_and_no_projector(q4):
    plan = plan_fit(q4, 16384, 16 * GIB, [gpu(3)])
    assert plan.fits and 0 < plan.n_gpu_layers < 28 and not plan.mmproj_on_gpu
    assert plan.gpu_needed_bytes <= 3 * GIB - GPU_MARGIN
    assert any(f"{plan.n_gpu_layers}/28 layers on the GPU" in n for n in plan.notes)
    assert any("projector on the CPU" in n for n in plan.notes)
    assert plan.host_needed_bytes + plan.gpu_needed_bytes >= plan.estimate.total_bytes


def test_gpu_smaller_than_the_margin_means_cpu(q4):
    plan = plan_fit(q4, 16384, 16 * GIB, [gpu(0.9)])
    assert plan.fits and plan.n_gpu_layers == 0 and not plan.mmproj_on_gpu


def test_layers_never_decrease_with_more_gpu_memory(q4):
    layers = [plan_fit(q4, 16384, 64 * GIB, [gpu(g / 2)]).n_gpu_layers for g in range(0, 30)]
    assert layers == sorted(layers) and layers[0] == 0 and layers[-1] == 29


def test_two_gpus_share_the_layers(q4):
    one = plan_fit(q4, 16384, 16 * GIB, [gpu(4)])
    two = plan_fit(q4, 16384, 16 * GIB, [gpu(4, "CUDA0"), gpu(4, "CUDA1")])
    assert two.n_gpu_layers > one.n_gpu_layers and two.n_gpu_layers == 29


def test_gpu_plan_still_refused_when_the_host_cannot_hold_the_rest(q8):
    plan = plan_fit(q8, 16384, 2 * GIB, [gpu(2)])
    assert not plan.fits and "(+ 2.0 GiB free on the GPU)" in plan.message


def test_gpu_switched_off_or_projector_kept_on_cpu(q4):
    assert plan_fit(q4, 16384, 16 * GIB, [gpu(24)], want_gpu=False).n_gpu_layers == 0
    plan = plan_fit(q4, 16384, 16 * GIB, [gpu(24)], want_projector_gpu=False)
    assert plan.n_gpu_layers == 29 and not plan.mmproj_on_gpu and plan.notes == ()


def test_cpu_device_in_the_list_is_not_a_gpu(q4):
    cpu = DeviceMemory("CPU", 64 * GIB, 64 * GIB, "CPU")
    assert plan_fit(q4, 16384, 16 * GIB, [cpu]).n_gpu_layers == 0


def test_user_chosen_layer_count_is_kept(q4):
    plan = plan_fit(q4, 16384, 16 * GIB, [gpu(24)], n_gpu_layers=10)
    assert plan.n_gpu_layers == 10 and plan.fits
    assert plan_fit(q4, 16384, 16 * GIB, [gpu(24)], n_gpu_layers=-1).n_gpu_layers == 29


def test_retry_ladder():
    assert retry_layers(29, 28) == [14, 7, 0]
    assert retry_layers(-1, 28) == [14, 7, 0]
    assert retry_layers(3, 2) == [1, 0]
    assert retry_layers(1, 28) == [0]


def test_plan_json_has_the_parts_devices_and_context(q4):
    d = plan_fit(q4, 8192, 16 * GIB, [gpu(6)]).to_dict()
    parts = ("weights_bytes", "kv_bytes", "compute_bytes", "projector_bytes", "projector_compute_bytes")
    assert all(k in d for k in parts) and d["total_bytes"] == sum(
        d[k] for k in (*parts, "output_buffer_bytes", "overhead_bytes"))
    assert d["devices"][0]["name"] == "CUDA0" and d["devices"][0]["free_bytes"] == 6 * GIB
    assert d["n_ctx"] == 8192 and d["n_gpu_layers"] > 0


def test_shape_from_the_tiny_gguf_pair(tiny_gguf):
    text, mmproj = tiny_gguf("F16")
    shape = ModelShape.from_gguf(text, mmproj)
    assert shape.n_layers == 2 and shape.n_vocab == 1024 and shape.quant == "F16"
    assert shape.weights_bytes == sum(t.nbytes for t in scan_gguf(text).tensors)
    assert shape.projector_bytes == sum(t.nbytes for t in scan_gguf(mmproj).tensors)
    assert estimate(shape, 4096).kv_bytes == 2 * 4096 * 2 * 2 * 64 * 2
    assert plan_fit(shape, 4096, 4 * GIB).fits
    assert shape.weights_bytes < MIB * 8


def test_models_fit_command(tiny_gguf, capsys):
    import json

    from speco3.cli import main

    text, mmproj = tiny_gguf("F16")
    assert main(["models", "fit", "--text", str(text), "--mmproj", str(mmproj), "--ctx", "8192", "--json",
                 "--no-tool"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["n_ctx"] == 8192 and out["n_gpu_layers"] == 0 and out["source"] == "estimate"
    assert out["total_bytes"] == sum(v for k, v in out.items() if k.endswith("_bytes") and k not in (
        "total_bytes", "host_needed_bytes", "host_free_bytes", "gpu_needed_bytes", "mapped_bytes"))
    assert out["mapped_bytes"] == ModelShape.from_gguf(text, mmproj).weights_bytes
    assert out["devices_seen"][0]["kind"] == "CPU" and out["devices_seen"][0]["total_bytes"] > 0
    assert main(["models", "fit", "spec-o3-7b", "--quant", "Q8_0"]) in (0, 1)
    human = capsys.readouterr().out
    assert "estimate at a 16384-token context, f16 KV cache (estimate):" in human and "free memory: RAM " in human
    # how the file will be loaded, and why
    assert main(["models", "fit", "--text", str(text), "--mmproj", str(mmproj), "--no-tool"]) == 0
    assert "model file: mapped (the fastest load" in capsys.readouterr().out  # a tiny model fits beside its file
    assert main(["models", "fit", "--text", str(text), "--mmproj", str(mmproj), "--no-tool", "--no-mmap"]) == 0
    assert "model file: read into memory (a slower load, a lower peak): as asked (--no-mmap)" in capsys.readouterr().out
