"""Evidence records: canonical JSON, content ids, integrity checks, and the store."""

from inferencekit.evidence.canonical import canonical_json, sha256_file, sha256_hex
from inferencekit.evidence.record import (
                                          FORMAT,
                                          artifact,
                                          build_record,
                                          compute_id,
                                          integrity_problem,
                                          integrity_problems,
                                          metric,
                                          tool_identity,
)
from inferencekit.evidence.store import Store, record_base, resolve_record, save_record

__all__ = ["FORMAT", "Store", "artifact", "build_record", "canonical_json", "compute_id", "integrity_problem",
           "integrity_problems", "metric", "record_base", "resolve_record", "save_record", "sha256_file",
           "sha256_hex", "tool_identity"]
