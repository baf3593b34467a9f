"""``bench serve --workers N`` and ``--ray``: one level sent by several client processes, merged into one run dir.

Real HTTP against the synthetic streaming server of ``/work/shared/perf/sse_server.py`` (every token event at an
absolute deadline, 2 ms apart): these tests are about our client's process split, not about an engine, so the
server only has to stream on time. The CLI runs as a subprocess, as a user runs it. Nothing here asserts speed:
the figures compared in the Ray test are server-set (TPOT is the server's ITL) and the bands are wide on purpose.
"""

from __future__ import annotations

import json
import re
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, _missing
from tests.fault_server import fault_server

SSE_SERVER = Path("/work/shared/perf/sse_server.py")
ENGINE = "openai"  # the label bench serve gives a server it cannot identify further (the synthetic one)
LEVELS = ("c4", "r40")


# -------------------------------------------------------------------------------------------------- helpers

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def synthetic_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The synthetic SSE server (``--itl-ms 2``) on a free port, for the whole module."""
    if not SSE_SERVER.is_file():
        msg = f"synthetic server {SSE_SERVER} is absent (the shared perf tools are not mounted)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    log = tmp_path_factory.mktemp("sse") / "server.log"
    for _attempt in range(3):  # a free port can be taken between the probe and the bind: try another
        port = _free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, str(SSE_SERVER), "--port", str(port), "--itl-ms", "2"],
                                    stdout=out, stderr=subprocess.STDOUT)
        if _wait_listening(port, proc):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"the synthetic server did not start: {log.read_text()[-2000:]}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench(url: str, run_dir: Path, *extra: str, model: str = "synthetic-model") -> tuple[int, dict, str]:
    """``inferencekit bench serve`` as a subprocess: (exit code, its JSON, stderr)."""
    cmd = [sys.executable, "-m", "inferencekit", "bench", "serve", "--base-url", url, "--model", model,
           "--max-tokens", "16", "--no-retokenize", "--json", "--quiet", "--run-dir", str(run_dir), *extra]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    out = json.loads(p.stdout) if p.stdout.strip() else {}
    return p.returncode, out, p.stderr


def level_replies(run: Path, level: str) -> list[dict]:
    return [json.loads(p.read_text()) | {"_key": p.stem}
            for p in sorted((run / "outputs" / ENGINE / f"load-{level}").glob("*/*.json"))]


def layout(run: Path) -> set[str]:
    """Every file's path in the run dir, the evidence file's id replaced (it differs between runs)."""
    return {re.sub(r"^evidence/[^/]+\.json$", "evidence/<id>.json", p.relative_to(run).as_posix())
            for p in run.rglob("*") if p.is_file()}


def assert_done_or_only_client_paced(code: int, out: dict, stderr: str) -> None:
    """Exit 0, or exit 3 with the only limitation a level the client's own pace made invalid.

    On this 2-core machine the event-loop lag of a client process can pass the pace judge's 5 ms floor (seen:
    p99 5.1 ms), which makes the level invalid and the run UNPROVEN (exit 3). That is the self-check working,
    a timing outcome; the tests do not assert it either way. Everything else must be clean, apart from the notes
    every single-run record carries about its intervals (run once; too few values for a p99 interval) and an
    over-saturation flag, which is also a timing outcome of a busy machine."""
    assert code in (0, 3), stderr
    if code == 3:
        assert out["verdict"] == "UNPROVEN", out
        paced = [x for x in out["limitations"] if re.match(r"level \S+ is invalid, the client set its pace: ", x)]
        assert paced, out["limitations"]
        other = [x for x in out["limitations"] if x not in paced]
        assert all(re.match(r"load point\(s\) .* ran once: |no 95% interval for |level \S+ is over-saturated: ", x)
                   for x in other), other
    else:
        assert out["verdict"] is None, out


# ------------------------------------------------------------------------------------ --workers 2 vs --workers 1

@pytest.fixture(scope="module")
def two_runs(synthetic_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same command (same seed, so the same prompts) with --workers 2 and with --workers 1."""
    root = tmp_path_factory.mktemp("workers")
    args = ("--concurrency", "4", "--request-rate", "40", "--num-prompts", "24", "--seed", "11")
    runs = {}
    for n in (2, 1):
        run = root / f"w{n}"
        runs[n] = (run, *bench(synthetic_server, run, *args, "--workers", str(n)))
    return runs


def test_workers_2_run_dir_has_the_single_process_layout(two_runs):
    run2, code2, out2, err2 = two_runs[2]
    run1, code1, out1, err1 = two_runs[1]
    assert_done_or_only_client_paced(code2, out2, err2)
    assert_done_or_only_client_paced(code1, out1, err1)
    for out in (out1, out2):
        for lvl in LEVELS:
            req = out["levels"][lvl]["requests"]
            assert req["total"] == 24 and req["completed"] == 24 and req["failed"] == 0, req
    # the same files, down to the keys (same seed: the two processes of a level take draws i, i+2, ... of the
    # same sequence, with 12 requests each, i.e. the same 24 draws); nothing extra is left behind (journals)
    assert layout(run2) == layout(run1)
    for lvl in LEVELS:
        assert len(level_replies(run2, lvl)) == 24
        assert (run2 / "outputs" / ENGINE / f"load-{lvl}" / "client.json").is_file()
        assert not list((run2 / "outputs" / ENGINE / f"load-{lvl}").glob("journal*"))


def test_workers_2_replies_carry_their_worker_and_clock(two_runs):
    run2 = two_runs[2][0]
    offsets = {}
    for lvl in LEVELS:
        rs = level_replies(run2, lvl)
        assert all(r["worker"] in (0, 1) for r in rs)
        assert all(isinstance(r["clock_offset_ns"], int) and not isinstance(r["clock_offset_ns"], bool) for r in rs)
        assert {r["worker"] for r in rs} == {0, 1}
        for r in rs:
            offsets.setdefault((lvl, r["worker"]), set()).add(r["clock_offset_ns"])
    assert all(len(v) == 1 for v in offsets.values())  # one anchor per process and level
    # both processes map the same host's perf_counter (CLOCK_MONOTONIC) to the wall clock: the anchors agree up to
    # the read-out error and any clock slew — far inside a second (a wrong clock would be off by days)
    for lvl in LEVELS:
        a, b = offsets[(lvl, 0)].pop(), offsets[(lvl, 1)].pop()
        assert abs(a - b) < 1_000_000_000
    for lvl in LEVELS:  # the single-process run has no worker tags
        assert all("worker" not in r and "clock_offset_ns" not in r for r in level_replies(two_runs[1][0], lvl))


def test_workers_2_request_ids_and_file_keys_are_unique(two_runs):
    run2 = two_runs[2][0]
    replies = [r for lvl in LEVELS for r in level_replies(run2, lvl)]
    warmup = (run2 / "outputs" / ENGINE / "warmup").glob("*.json")
    replies += [json.loads(p.read_text()) | {"_key": p.stem} for p in warmup]
    ids = [r["request_id"] for r in replies]
    assert len(ids) > 48 and len(set(ids)) == len(ids)  # 2 × 24 load requests and the warm-up
    keys = [r["_key"] for r in replies]
    assert len(set(keys)) == len(keys)
    # X-Request-ID: a random 64-bit prefix per process and a counter; the two workers' prefixes differ
    for lvl in LEVELS:
        prefixes = {r["worker"]: r["request_id"][:16] for r in level_replies(run2, lvl)}
        assert prefixes[0] != prefixes[1]


def test_workers_2_client_json_and_record(two_runs):
    run2, _code, out2, _err = two_runs[2]
    for lvl in LEVELS:
        client = json.loads((run2 / "outputs" / ENGINE / f"load-{lvl}" / "client.json").read_text())
        procs = client["processes"]
        assert len(procs) == 2 and [p["worker"] for p in procs] == [0, 1]
        assert len({p["pid"] for p in procs}) == 2
        for p in procs:
            assert isinstance(p["host"], str) and p["host"] and isinstance(p["pid"], int)
            assert isinstance(p["anchor"]["wall_ns"], int) and isinstance(p["anchor"]["perf_ns"], int)
            lag = p["loop"]["loop_lag_ms"]
            assert lag["n"] > 0 and lag["p99"] is not None and lag["max"] >= lag["p99"] >= 0
            assert p["loop"]["interval_ms"] == 5.0
        clock = client["clock"]
        assert clock["skew_bound_ms"] >= 0 and len(clock["offsets_ns"]) == 2 and len(clock["bounds_ns"]) == 2
        assert client["pool"] == {"kind": "processes", "workers": 2, "host": procs[0]["host"]}
        # the record judged each level's client pace from these figures (valid or not is timing: not asserted)
        pace = out2["levels"][lvl]["client"]
        assert "valid" in pace and pace["processes"] == 2
        assert pace["loop_lag_p99_ms"] == max(p["loop"]["loop_lag_ms"]["p99"] for p in procs)
        # the merged level window is on the common wall clock: seconds, not the decades between two clocks
        assert 0 < out2["levels"][lvl]["window_s"] < 120


def test_workers_2_open_loop_level_is_split_in_two_schedules(two_runs):
    run2, _code, out2, _err = two_runs[2]
    rs = level_replies(run2, "r40")
    assert all(isinstance(r["scheduled_ns"], int) and isinstance(r["dispatched_ns"], int) for r in rs)
    assert Counter(r["worker"] for r in rs) == {0: 12, 1: 12}
    client = json.loads((run2 / "outputs" / ENGINE / "load-r40" / "client.json").read_text())
    shares = [p["share"] for p in client["processes"]]
    assert [s["rate_req_s"] for s in shares] == [20.0, 20.0] and [s["num_requests"] for s in shares] == [12, 12]
    assert shares[0]["arrival_seed"] != shares[1]["arrival_seed"]
    assert out2["levels"]["r40"]["client"]["send_late_ms"]["n"] == 24  # every send's lateness was judged
    c4 = json.loads((run2 / "outputs" / ENGINE / "load-c4" / "client.json").read_text())
    assert [p["share"]["concurrency"] for p in c4["processes"]] == [2, 2]
    assert Counter(r["worker"] for r in level_replies(run2, "c4")) == {0: 12, 1: 12}


# ------------------------------------------------------------------------------ a failure on the workers' side

def test_worker_side_failures_are_recorded_not_fatal(tmp_path):
    run = tmp_path / "fail"
    # the fault server drops the connection on every POST before any byte of a reply (fault "drop")
    with fault_server() as (url, seen):
        code, out, err = bench(url, run, "--concurrency", "4", "--request-rate", "40", "--num-prompts", "12",
                               "--warmup", "0", "--workers", "2", "--extra-body", '{"fault": "drop"}',
                               model="fault-model")
        posts = list(seen)
    assert code == 3, err
    assert out["verdict"] == "UNPROVEN"
    assert any(x.startswith("24 of 24 requests failed") for x in out["limitations"]), out["limitations"]
    assert len(posts) == 24  # every request reached the server once: the server read it, so it is never re-sent
    for lvl in LEVELS:
        rs = level_replies(run, lvl)
        assert len(rs) == 12  # nothing lost: every request is on disk, failed
        assert all(r["status"] == 0 and r["error"] and "retried" not in r for r in rs), [r.get("error") for r in rs]
        assert Counter(r["worker"] for r in rs) == {0: 6, 1: 6}
        assert out["levels"][lvl]["requests"]["transport_failures"] == 12
        assert (run / "outputs" / ENGINE / f"load-{lvl}" / "client.json").is_file()
        assert not list((run / "outputs" / ENGINE / f"load-{lvl}").glob("journal*"))


# --------------------------------------------------------------------------------------------------------- Ray

def _p50(out: dict, name: str) -> float:
    return out["levels"]["r20"][name]["p50"]


def test_ray_two_node_cluster_splits_the_level_and_agrees_with_one_process(synthetic_server, tmp_path):
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError as e:
        _missing("Ray", f"{e} (bench serve --ray needs the [ray] extra; the Makefile installs it)")

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        finally:
            ray.shutdown()
        assert len(alive) == 2

        common = ("--request-rate", "20", "--num-prompts", "40", "--seed", "5")
        t0 = time.monotonic()
        code, out, err = bench(synthetic_server, tmp_path / "ray", *common, "--ray", cluster.address,
                               "--workers", "2")
        print(f"Ray run: {time.monotonic() - t0:.1f} s")  # reported with -s; never asserted
        assert_done_or_only_client_paced(code, out, err)
        rs = level_replies(tmp_path / "ray", "r20")
        assert len(rs) == 40 and all(r["status"] == 200 and "error" not in r for r in rs)
        assert Counter(r["worker"] for r in rs) == {0: 20, 1: 20}
        assert all(isinstance(r["dispatched_ns"], int) and isinstance(r["scheduled_ns"], int) for r in rs)
        client = json.loads((tmp_path / "ray" / "outputs" / ENGINE / "load-r20" / "client.json").read_text())
        procs = client["processes"]
        nodes = [p["node_id"] for p in procs]
        assert len(set(nodes)) == 2 and set(nodes) <= alive  # one actor on each node
        assert client["pool"]["kind"] == "ray" and set(client["pool"]["alive_nodes"]) == alive
        assert [p["share"]["rate_req_s"] for p in procs] == [10.0, 10.0]
        # the open loop's send lateness was recorded per worker: every reply of each worker has its send stamps
        for w in (0, 1):
            mine = [r for r in rs if r["worker"] == w]
            assert len(mine) == 20 and all(r["dispatched_ns"] - r["scheduled_ns"] > -10**9 for r in mine)
        assert out["levels"]["r20"]["client"]["send_late_ms"]["n"] == 40

        singles = []
        for i in (1, 2):  # the same schedule (same seed) from one process, twice
            c, o, e = bench(synthetic_server, tmp_path / f"single{i}", *common)
            assert_done_or_only_client_paced(c, o, e)
            assert o["levels"]["r20"]["requests"]["completed"] == 40
            singles.append(o)
    finally:
        cluster.shutdown()

    ttft = [_p50(o, "ttft_ms") for o in singles]
    tpot = [_p50(o, "tpot_ms") for o in singles]
    ray_ttft, ray_tpot = _p50(out, "ttft_ms"), _p50(out, "tpot_ms")
    print(f"TTFT p50 ms: ray {ray_ttft:.3f}, single {ttft[0]:.3f} / {ttft[1]:.3f}; "
          f"TPOT p50 ms: ray {ray_tpot:.4f}, single {tpot[0]:.4f} / {tpot[1]:.4f}")  # how close: reported, not asserted
    # What a broken merge of the workers' clocks shows is an offset of a second or more (docs/load-generation.md):
    # the Ray run's times must read like the single process's to within a second, whatever the load. How close the
    # two p50s come is a timing figure, reported above and never asserted (load moves it).
    assert all(0 <= r["ttft_ms"] <= r["e2el_ms"] for r in rs)
    assert abs(ray_ttft - statistics.median(ttft)) < 1000 and abs(ray_tpot - statistics.median(tpot)) < 1000
