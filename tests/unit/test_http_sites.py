"""--listen parsing and the unix socket file's life: stale files go, live ones stay.

--listen parsing; the unix socket file's life (real sockets) is in tests/integration/test_http_sites_unix.py.
"""

from __future__ import annotations

import pytest

from rgd.api.sites import prepare_unix_path
from rgd.config.settings import ListenAddress, SettingsError, parse_listen, resolve


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


def test_the_directory_is_created(tmp_path):
    prepare_unix_path(str(tmp_path / "a" / "b" / "rgd.sock"))
    assert (tmp_path / "a" / "b").is_dir()
