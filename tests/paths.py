"""Where the tests' files are: the repository root and the recorded fixtures."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
