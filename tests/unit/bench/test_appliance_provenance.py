"""The appliance receipt's identity of the tool itself: the package fingerprint and the git-archive stamp."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from inferencekit.bench.appliance import ARCHIVAL_FILE, PACKAGE_ROOT, archival_revision, source_sha256, tool_provenance

REPO = PACKAGE_ROOT.parents[1]
STAMP = f"src/inferencekit/{ARCHIVAL_FILE}"


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "inferencekit"
    (pkg / "gates").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "gates" / "rule.py").write_text("LIMIT = 0.10\n")
    return pkg


def test_the_source_fingerprint_follows_the_code_not_the_caches(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    first = source_sha256(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "rule.cpython-311.pyc").write_bytes(b"\0\1")
    (pkg / "gates" / "old.pyc").write_bytes(b"\2")
    assert source_sha256(pkg) == first  # bytecode is not the source
    (pkg / "gates" / "rule.py").write_text("LIMIT = 0.50\n")
    assert source_sha256(pkg) != first  # one threshold changed: another fingerprint
    (pkg / "gates" / "rule.py").write_text("LIMIT = 0.10\n")
    assert source_sha256(pkg) == first
    (pkg / "gates" / "rule.py").rename(pkg / "rule.py")  # same bytes, another place
    assert source_sha256(pkg) != first


def test_the_archival_stamp_is_read_only_once_git_archive_filled_it_in(tmp_path: Path) -> None:
    stamp = tmp_path / ARCHIVAL_FILE
    assert archival_revision(stamp) is None  # missing
    stamp.write_text("node: $Format:%H$\n")
    assert archival_revision(stamp) is None  # a checkout or plain copy: never expanded
    stamp.write_text("node: 0123456789ABCDEF0123456789abcdef01234567\nnode-date: 2026-12-02\n")
    assert archival_revision(stamp) == "0123456789abcdef0123456789abcdef01234567"
    stamp.write_text("node: 0123\n")
    assert archival_revision(stamp) is None


def test_in_this_checkout_the_tool_names_its_revision_and_its_files() -> None:
    prov = tool_provenance()
    assert prov["source_sha256"] == source_sha256() and len(prov["source_sha256"]) == 64
    if prov["source"] == "installed":
        pytest.skip("not run from a git checkout of inferencekit: nothing to compare the revision with")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert prov["source"] == "git-worktree" and prov["git_revision"] == head


def test_git_archive_of_this_repository_stamps_the_commit_into_the_package(tmp_path: Path) -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--error-unmatch", STAMP],
                            capture_output=True)
    if head.returncode or listed.returncode:
        pytest.skip("needs a git checkout whose HEAD holds the archival stamp (a commit, not a plain copy)")
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD", STAMP],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        member = t.extractfile(STAMP)
        assert member is not None
        text = member.read().decode()
    assert "$Format" not in text, "the .gitattributes export-subst line is missing"
    stamp = tmp_path / ARCHIVAL_FILE
    stamp.write_text(text)
    assert archival_revision(stamp) == head.stdout.strip()
