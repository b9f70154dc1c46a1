"""--listen parsing and the unix socket file's life: stale files go, live ones stay.

Here with real unix sockets; --listen parsing is in tests/unit/test_http_sites.py.
"""

from __future__ import annotations

import socket

import pytest

from rgd.api.sites import SocketInUse, prepare_unix_path


def test_a_stale_socket_file_is_replaced(tmp_path):
    path = tmp_path / "sub" / "rgd.sock"
    path.parent.mkdir()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nobody accepts: a daemon that died
    assert path.is_socket()
    prepare_unix_path(str(path))
    assert not path.exists()


def test_a_live_socket_and_other_files_are_refused(tmp_path):
    live = tmp_path / "live.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(live))
    s.listen()
    try:
        with pytest.raises(SocketInUse, match="in use"):
            prepare_unix_path(str(live))
        assert live.is_socket()
    finally:
        s.close()
    plain = tmp_path / "plain"
    plain.write_text("keep me")
    with pytest.raises(SocketInUse, match="not a socket"):
        prepare_unix_path(str(plain))
    assert plain.read_text() == "keep me"
