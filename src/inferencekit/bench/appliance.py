"""The appliance receipt: run the three sections, assemble the receipt, write it, make the ``appliance`` record.

The receipt (docs/appliance.md) is RigMark's shape: protocol and prompt
versions with the prompts' SHA-256, the tool's own identity, the run's label, comparison id and the
appliance metadata, the settings, and the decode / prefill / concurrency sections. It holds no URL
and no key (the key's *variable name* only). RigMark's "is this checkout behind the newest release"
network check is dropped: inferencekit never calls home; the tool's version, revision (from git, or
from a ``git archive``'s stamp) and a fingerprint of its own files are recorded instead.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

from inferencekit.api.detect import EngineInfo
from inferencekit.api.tokenize import refused_texts_note
from inferencekit.bench.appliance_collect import NONCE_VERSION, Collector, load_prompts
from inferencekit.bench.appliance_judge import receipt_verdict
from inferencekit.evidence import artifact, build_record, metric, save_record, tool_identity
from inferencekit.evidence.receipt import RECEIPT_FORMAT
from inferencekit.rundir import RunDir, write_bytes, write_json

__all__ = ["ARCHIVAL_FILE", "PROTOCOL_VERSION", "RECEIPT_FORMAT", "archival_revision", "source_sha256",
           "tool_provenance", "run_appliance", "appliance_record",
           "receipt_path"]

PROTOCOL_VERSION = "1.0.0"  # the measurement protocol; NONCE_VERSION tracks the model inputs alone


def receipt_path(run: RunDir) -> Path:
    return run.appliance_path("receipt.json")


def _git(root: Path, *args: str) -> bytes | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the inferencekit package folder
ARCHIVAL_FILE = ".git_archival.txt"  # in the package; `git archive` fills in its commit (.gitattributes export-subst)


def source_sha256(package: Path = PACKAGE_ROOT) -> str:
    """SHA-256 of the running package's own files: for each file below ``package`` in sorted relative-path order
    (bytecode caches left out), its path, a NUL, its bytes and a NUL. It names the code that ran whichever way it was
    installed: two copies with the same version but different code differ here (the seed's ``source_fingerprint``,
    over the whole package rather than a fixed file list)."""
    h = hashlib.sha256()
    for f in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                    and p.suffix not in (".pyc", ".pyo")):
        h.update(f.relative_to(package).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def archival_revision(path: Path = PACKAGE_ROOT / ARCHIVAL_FILE) -> str | None:
    """The commit ``git archive`` wrote into ``path`` (``node: <40 or 64 hex digits>``), or None: the file is
    missing, unreadable or still holds the unexpanded ``$Format:%H$`` (a plain checkout or copy)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    node = fields.get("node", "").strip()
    return node.lower() if re.fullmatch(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}", node) else None


@lru_cache(maxsize=1)
def tool_provenance() -> dict[str, Any]:
    """The running inferencekit: ``{name, version, source, git_revision, git_dirty, worktree_sha256,
    source_sha256}``.

    ``source``, in order: ``"git-worktree"`` in our own git checkout (the revision, whether the work tree
    differs from it, and when it does the SHA-256 of ``git status --porcelain`` + ``git diff --binary HEAD``
    + every untracked, unignored file's path and bytes, so two dirty trees with the same revision are told
    apart); ``"git-archive"`` in an unpacked ``git archive`` (the commit it wrote into the package's
    ``.git_archival.txt``; dirtiness unknown, None); else ``"installed"``, the version alone. In every case
    ``source_sha256`` (``source_sha256``) fingerprints the package's files as they ran. The seed's
    ``git_identity`` / ``archival_identity``.
    """
    ident = tool_identity()
    out: dict[str, Any] = {"name": "inferencekit", "version": ident["version"], "source": "installed",
                           "git_revision": None, "git_dirty": None, "worktree_sha256": None,
                           "source_sha256": source_sha256()}
    top = _git(PACKAGE_ROOT, "rev-parse", "--show-toplevel")
    root = Path(top.decode().strip()) if top is not None and ident.get("git_revision") else None
    if root is None or not (root / "src" / "inferencekit").is_dir():  # no checkout, or some other repository's
        archived = archival_revision()
        if archived:
            out.update(source="git-archive", git_revision=archived)
        return out
    status = _git(root, "status", "--porcelain=v1", "--untracked-files=all") or b""
    out.update(source="git-worktree", git_revision=ident["git_revision"], git_dirty=bool(status.strip()))
    if status.strip():
        h = hashlib.sha256(status + b"\0" + (_git(root, "diff", "--binary", "HEAD") or b""))
        for raw in sorted(p for p in (_git(root, "ls-files", "--others", "--exclude-standard", "-z")
                                      or b"").split(b"\0") if p):
            h.update(b"\0untracked\0" + raw + b"\0")
            f = root / os.fsdecode(raw)
            if f.is_file() and not f.is_symlink():
                h.update(f.read_bytes())
        out["worktree_sha256"] = h.hexdigest()
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


async def run_appliance(col: Collector, *, label: str, comparison_id: str, metadata: dict[str, Any],
                        metadata_source: str, api_key_env: str | None) -> dict[str, Any]:
    """Run decode, then prefill and concurrency unless skipped, and return the finished receipt, written to
    ``appliance/receipt.json`` only when every section has run. While it runs, the receipt so far is kept in
    ``appliance/receipt.partial.json`` (removed at the end): an interrupted run leaves no receipt that
    ``report`` or ``compare`` could take for a finished one."""
    prompts, prompts_sha = load_prompts()
    info, run, settings = col.info, col.run, col.s
    receipt: dict[str, Any] = {
        "format": RECEIPT_FORMAT, "schema": 1,
        "protocol": {"version": PROTOCOL_VERSION, "nonce_version": NONCE_VERSION,
                     "prompts_version": str(prompts["version"]), "prompts_sha256": prompts_sha},
        "tool": tool_provenance(),
        "run": {"label": label, "comparison_id": comparison_id, "started_at": _now(), "finished_at": None,
                "model": info.model, "engine": {"engine": info.engine, "version": info.version},
                "appliance": metadata, "metadata_source": metadata_source, "api_key_env": api_key_env,
                "python": platform.python_version(), "platform": platform.platform()},
        "settings": settings.to_json(), "decode": {}, "prefill": {}, "concurrency": {},
        "skipped": dict(settings.skipped), "verdict": None, "limitations": []}
    partial = run.appliance_path("receipt.partial.json")
    receipt["decode"] = await col.decode()
    write_json(partial, receipt, indent=True)
    if "prefill" not in settings.skipped:
        receipt["prefill"] = await col.prefill()
        write_json(partial, receipt, indent=True)
    if "concurrency" not in settings.skipped:
        receipt["concurrency"] = await col.concurrency()
    receipt["run"]["finished_at"] = _now()
    verdict, reasons = receipt_verdict(receipt)
    receipt["verdict"] = verdict
    engine_lims, engine_fallbacks = engine_limitations(receipt, info)
    refused = refused_texts_note(col.tok.source if col.tok else "none", col.retokenize_errors)
    receipt["limitations"] = reasons + engine_lims + ([refused] if refused else []) + list(settings.notes)
    # the limitations that changed what was measured: verify --strict does not let a PASS rest on one
    receipt["fallbacks"] = engine_fallbacks + list(settings.notes)
    write_json(receipt_path(run), receipt, indent=True)
    partial.unlink(missing_ok=True)
    return receipt


def engine_limitations(receipt: dict[str, Any], info: EngineInfo) -> tuple[list[str], list[str]]:
    """``(limitations, fallbacks)`` of a finished receipt's samples: what the figures cannot see, and the part of it
    that changed what was measured (samples served partly from the prompt cache, whose TTFT is no full prefill;
    completion tokens counted from token events where the server streamed no usage). ``verify --strict`` does not
    let a PASS rest on a fallback (docs/design.md, "A PASS is a bounded claim")."""
    out = []
    fallbacks = []
    rows = [r for sec in receipt["decode"].values() for r in sec["runs"]]
    streams = [s for sec in receipt["concurrency"].values() for rnd in sec["rounds"] for s in rnd["streams"]]
    cached = [r for r in rows + streams if (r.get("cached_prompt_tokens") or 0) > 0]
    if cached:
        worst = max(cached, key=lambda r: r["cached_prompt_tokens"] / max(r.get("prompt_tokens") or 1, 1))
        fallbacks.append(f"{len(cached)} of {len(rows + streams)} decode/concurrency samples were served partly "
                         f"from the prompt cache (up to {worst['cached_prompt_tokens']} of "
                         f"{worst.get('prompt_tokens')} prompt tokens): their TTFT is not a full prefill "
                         f"(cache bypass: {receipt['settings'].get('decode_cache_isolation')})")
        out.append(fallbacks[-1])
    caps = [(r, receipt["settings"]["decode_tokens"]) for r in rows]
    caps += [(s, receipt["settings"]["concurrency_tokens"]) for s in streams]
    short = [r for r, cap in caps if r.get("finish_reason") == "length" and r.get("usable")
             and r.get("completion_tokens_source") == "usage" and r["completion_tokens"] < cap]
    if short:
        out.append(f"{len(short)} samples ended with finish_reason 'length' below their max_tokens (e.g. "
                   f"{short[0]['completion_tokens']} tokens): something else capped them (a server-side limit or an "
                   "engine-specific field)")
    retried = [r for r in rows + streams if r.get("retried")]
    if retried:
        out.append(f"{len(retried)} requests were sent again after their connection failed before any byte of "
                   "them was written (see each row's 'retried')")
    if rows and all(r.get("completion_tokens_source") == "token events" for r in rows):
        fallbacks.append(f"{info.engine} streamed no usage: completion tokens are the number of token-bearing "
                         "events (one token per event on this engine); retokenized counts are recorded beside them")
        out.append(fallbacks[-1])
    if any(sec.get("cold_verification") != "server-verified" and any(r.get("usable") for r in sec["cold"]["runs"])
           for sec in receipt["prefill"].values()):
        out.append("cold prefill is not server-verified: the server reported no cached-token figure for the cold "
                   "samples (" + (receipt["settings"].get("prefill_cache_isolation") or "") + ")")
    if info.capacity == 1 and any(int(k) > 1 for k in receipt["concurrency"]):
        out.append(f"{info.engine} serves one request at a time (capacity from: {info.capacity_source}): concurrent "
                   "streams queue inside the server, so per-stream rates fall with the level")
    return out, fallbacks


def write_card(run: RunDir, receipt: dict[str, Any]) -> Path:
    """``appliance/card.txt``: the card as plain text (what people paste)."""
    from inferencekit.report.appliance_card import card_text

    path = run.appliance_path("card.txt")
    write_bytes(path, card_text(receipt).encode())
    return path


def appliance_record(run: RunDir, receipt: dict[str, Any], info: EngineInfo) -> dict[str, Any]:
    """The ``appliance`` evidence record: the receipt, the card and every request/reply file as artifacts; the
    headline medians as metrics; the receipt's verdict and limitations. Saved to the store and the run dir."""
    arts = [artifact(receipt_path(run), run.path, "receipt")]
    card = run.appliance_path("card.txt")
    if card.is_file():
        arts.append(artifact(card, run.path, "card"))
    for kind, role in (("inputs", "request"), ("outputs", "reply")):
        for p in run.appliance_files(kind):
            arts.append(artifact(p, run.path, role))
    metrics = []
    for name, sec in receipt["decode"].items():
        s = sec["decode_tokens_per_second"]
        metrics.append(metric("decode_rate", s and s["median"], "tokens/s", "median", s["n"] if s else 0,
                              subject=f"decode/{name}"))
    for depth, sec in receipt["prefill"].items():
        for side in ("cold", "warm_replay"):
            s = sec[side]["effective_prefill_tokens_per_second"]
            metrics.append(metric("prefill_rate", s and s["median"], "tokens/s", "median", s["n"] if s else 0,
                                  subject=f"prefill/{depth}/{side}"))
    for level, sec in receipt["concurrency"].items():
        s = sec["aggregate_end_to_end_tokens_per_second"]
        metrics.append(metric("aggregate_throughput", s and s["median"], "tokens/s", "median", s["n"] if s else 0,
                              subject=f"concurrency/{level}"))
    run_part = receipt["run"]
    rec = build_record(
        kind="appliance", claim_class="observed",
        summary=(f"appliance receipt {run_part['label']!r} ({run_part['comparison_id']}) on {info.engine} "
                 f"{info.version or ''} ({info.model}): {receipt['verdict']}"),
        identity={"engine": {k: v for k, v in info.to_dict().items() if k != "models"}, "model": {"id": info.model},
                  "workload": {"settings": receipt["settings"], "protocol": receipt["protocol"]}},
        metrics=metrics, artifacts=arts, limitations=receipt["limitations"],
        missing=[f"{k}: {v}" for k, v in receipt["skipped"].items()], verdict=receipt["verdict"],
        data={"run_dir": str(run.path.resolve()), "receipt": "appliance/receipt.json",
              "label": run_part["label"], "comparison_id": run_part["comparison_id"],
              "fallbacks": [x for x in receipt.get("fallbacks") or [] if isinstance(x, str)]})
    save_record(rec, run)
    run.update_run(appliance_record=rec["evidence_id"])
    return rec
