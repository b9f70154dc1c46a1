"""`rgd run --help`: every setting in one titled group, every text a whole sentence with its
environment variable and a default that says something (the CLI's parser, built in process;
tests/integration/test_cli_help.py runs the installed command)."""

from __future__ import annotations

import re

import pytest

from rgd.cli import build_parser, setting_help
from rgd.config.settings import FIELDS, HELP, SETTING_GROUPS, env_name, shown_default


def _run_help() -> str:
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    return run.format_help()


def test_every_setting_is_in_exactly_one_group() -> None:
    placed = [name for group in SETTING_GROUPS for name in group.names]
    assert sorted(placed) == sorted(FIELDS), "a setting must be placed in one group of SETTING_GROUPS"
    assert len(placed) == len(set(placed))
    assert len({g.title for g in SETTING_GROUPS}) == len(SETTING_GROUPS)


def test_groups_appear_as_titled_sections_holding_their_flags() -> None:
    text = _run_help()
    sections = re.split(r"\n(?=\S[^\n]*:\n)", text)  # argparse: "title:\n  description\n\n  --flag ..."
    by_title = {s.split(":\n", 1)[0]: s for s in sections}
    for group in SETTING_GROUPS:
        assert group.title in by_title, group.title
        body = by_title[group.title]
        assert " ".join(group.description.split()) in " ".join(body.split())
        for name in group.names:
            assert "--" + name.replace("_", "-") in body, (group.title, name)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_each_setting_text_reads_as_a_whole_phrase(name: str) -> None:
    text = HELP[name]
    assert text, name
    first = text.split()[0].lower()
    assert first not in {"but", "and", "or", "also", "then"}, f"{name}: starts mid-sentence: {text!r}"
    assert "default" not in text.lower(), f"{name}: the default is appended from the code, not written here"
    assert not text.endswith((".", ",", ";")), name
    shown = setting_help(name)
    assert shown.endswith(f"[env {env_name(name)}; default: {shown_default(name)}]")
    assert "''" not in shown and "default: ]" not in shown, f"{name}: an empty default says nothing: {shown!r}"


def test_defaults_are_shown_in_words_where_the_value_says_nothing() -> None:
    assert setting_help("id").endswith("default: the hostname]")
    assert "hostname" not in HELP["id"] or "default" not in HELP["id"]
    assert setting_help("tick").endswith("default: 1.0]")
    assert setting_help("cluster_process").endswith("default: off]")
    assert setting_help("admin_tokens_file").endswith("default: none: admin writes from loopback only]")
    assert HELP["report_every"].startswith("report every group at least every")
