"""`rgd up`, the README's main command, runs end to end and exits 0; what it prints.

Here its table and report lines, in process; `rgd up` itself runs in tests/system/test_showcase.py.
"""

from pathlib import Path

from rich.console import Console

from rgd.devtools.showcase import report_lines, status_table


def test_status_table_reads_as_rows_of_numbers():
    table = status_table(["tenant-a"], 300, ["daemon-1", "daemon-2"],
                         offered={(0, 0): 216, (0, 1): 36}, admitted={(0, 0): 156, (0, 1): 36},
                         shares={("tenant-a", "daemon-1"): 264.0}, elapsed=12)
    console = Console(record=True, width=100)
    console.print(table)
    rows = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in console.export_text().splitlines()]
    assert "group daemon demand limit admitted" in rows
    assert "tenant-a all daemons 252 300 192" in rows
    assert "daemon-1 216 264 156" in rows
    assert "daemon-2 36 - 36" in rows  # no share heard yet


def test_report_lines_say_what_the_report_found():
    summary = {
        "grid_ms": 1000, "span": {"ticks": 61}, "daemons": ["daemon-1", "daemon-2", "daemon-3"],
        "options": {"tolerance": 0.05},
        "loss": {"lost": 2, "expected": 540},
        "delay_ms": {"p50": 29.9, "mean": 512.3},
        "groups": {"tenant-a": {"totals": {"publish_messages_admitted": 17788}, "dims": {"publish_messages": {
            "admitted_mean": 291.6, "demand_mean": 358.4, "quota_mean": 300.0, "overshoot_ratio_max": 0.031,
            "ticks_over_quota": 0, "jain_mean": 0.9712}}}},
    }
    lines = report_lines(summary, Path("/r/report.html"))
    assert lines == [
        "fairness report: /r/report.html",
        "  61 ticks of 1 s from the first report to the last, 3 daemons, 1 groups",
        "  tenant-a: admitted 292/s of 358/s demand (17,788 in all), quota 300/s (worst tick 3.1% over it; 0 ticks "
        "more than 5% over); Jain index of the daemons' shares 0.971 on average "
        "(1 = each daemon got its max-min fair share)",
        "  reports: 2 of 540 lost; delay from publish to arrival at a receiver: median 30 ms, mean 512 ms",
    ]


def test_status_table_says_which_second_and_marks_a_shift():
    def caption(second: int) -> str:
        table = status_table(["tenant-a"], 300, ["daemon-1"], offered={(0, 0): 36}, admitted={(0, 0): 36},
                             shares={("tenant-a", "daemon-1"): 40.0}, elapsed=second + 1.2, second=second)
        console = Console(record=True, width=100)
        console.print(table)
        return console.export_text()

    assert "second 9-10 (phase 1)" in caption(9) and "shifted" not in caption(9)
    assert "second 10-11 (phase 2)" in caption(10) and "◆ the load shifted at 10 s" in caption(10)
