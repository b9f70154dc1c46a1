"""--listen parsing and the unix socket file's life: stale files go, live ones stay."""

from __future__ import annotations

import socket

import pytest

from rgd.http_sites import SocketInUse, prepare_unix_path
from rgd.settings import ListenAddress, SettingsError, parse_listen, resolve


def test_listen_takes_tcp_unix_or_both():
    assert parse_listen("127.0.0.1:8080") == [ListenAddress("127.0.0.1", 8080)]
    assert parse_listen("unix:/run/rgd/rgd.sock") == [ListenAddress(path="/run/rgd/rgd.sock")]
    assert parse_listen("0.0.0.0:8080, unix:/run/rgd/rgd.sock") == [
        ListenAddress("0.0.0.0", 8080), ListenAddress(path="/run/rgd/rgd.sock")]
    assert parse_listen("[::1]:9") == [ListenAddress("::1", 9)]


@pytest.mark.parametrize("bad, why", [
    ("nowhere", "not HOST:PORT"), ("host:99999", "not HOST:PORT"), ("unix:relative.sock", "absolute"),
    ("unix:/" + "x" * 120, "107 bytes"), ("unix:/run/rgd/", "absolute file path"),
    ("1.2.3.4:1,1.2.3.4:1", "twice"), ("127.0.0.1:8080,", "not HOST:PORT"),
])
def test_bad_listen_values_are_named(bad, why):
    with pytest.raises(SettingsError, match=f"environment: listen: .*{why}"):
        resolve({}, {"RGD_LISTEN": bad}, {})


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


def test_the_directory_is_created(tmp_path):
    prepare_unix_path(str(tmp_path / "a" / "b" / "rgd.sock"))
    assert (tmp_path / "a" / "b").is_dir()
