import importlib.util

from tests.paths import ROOT


def test_cli_reference_matches_the_registry():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "docs" / "cli.md").read_text() == mod.render(), \
        "docs/cli.md is stale: run `.venv/bin/python scripts/gen_cli_docs.py`"
