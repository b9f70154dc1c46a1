"""A daemon that fails to start says why in the exception, not only in a log file.

`rgd up` and CI runs delete or bury their scratch directories, so the reason a daemon
exited must travel in the error itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rgd.daemon_process import DaemonProcess


def test_failed_start_quotes_the_daemons_own_error(tmp_path: Path) -> None:
    log = tmp_path / "d.out"
    d = DaemonProcess("bad", ["--tick", "-1", "--data-dir", str(tmp_path / "data")], log_path=log).start()
    try:
        with pytest.raises(RuntimeError) as info:
            d.wait_ready(timeout=30)
    finally:
        d.stop()
    message = str(info.value)
    assert "bad exited with" in message
    assert "tick" in message.split("(log:", 1)[1], message  # the daemon's own words about the bad setting
