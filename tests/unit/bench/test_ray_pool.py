"""``--ray ADDRESS`` is checked before anything is sent: an address nothing answers at fails at once (``ray.init``
would retry it for minutes, deaf to Ctrl-C). Real sockets on loopback; Ray itself is not needed."""

from __future__ import annotations

import socket

import pytest

from inferencekit.bench.ray_pool import _reachable
from inferencekit.errors import OpError


def test_an_address_nothing_answers_at_is_refused_with_the_address():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for addr in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(OpError, match=f"--ray {addr}: nothing answers there"):
            _reachable(addr, timeout_s=2)


def test_a_listening_address_and_the_named_modes_pass():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert _reachable(f"127.0.0.1:{s.getsockname()[1]}") is None
    for mode in ("default", "auto", "local"):
        assert _reachable(mode) is None  # ray.init resolves these itself
