"""Bad input: a clear error, exit 2, nothing sent."""

from __future__ import annotations

import socket
import threading

from inferencekit.cli import main


class Listener:
    """A real TCP listener that counts connections (to prove nothing was sent)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self._stop = True
        self.thread.join()
        self.sock.close()


def test_malformed_prompt_file_names_path_line_and_sends_nothing(tmp_path, capsys):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"id": "a", "prompt": "fine"}\n{"id": "b", "prompt": "x"\n')
    srv = Listener()
    try:
        code = main(["bench", "serve", "--base-url", f"http://127.0.0.1:{srv.port}", "--dataset", str(bad),
                     "--run-dir", str(tmp_path / "run")])
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"inferencekit: error: {bad}:2: not valid JSON")
    assert srv.connections == 0
    assert not (tmp_path / "run").exists()


def test_unreachable_url_is_one_clear_line_and_exit_2(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    code = main(["bench", "serve", "--base-url", f"http://127.0.0.1:{port}/v1", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"http://127.0.0.1:{port} does not answer as an OpenAI-compatible server" in err
    assert "connection failed" in err
    assert not list((tmp_path / "r").glob("outputs/**/*.json"))


def test_url_with_credentials_is_refused_before_anything(tmp_path, capsys):
    code = main(["verify", "--base-url", "http://user:hunter2@127.0.0.1:1/v1", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "contains credentials" in err and "hunter2" not in err
    assert not (tmp_path / "r").exists()
