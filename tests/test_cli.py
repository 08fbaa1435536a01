"""The ``txmq`` command table (``txmq.cli.registry``): how the declared flags parse, without running a command."""

from __future__ import annotations

from datetime import datetime

import pytest

from txmq.cli import build_parser
from txmq.cli.registry import Commands, opt, parse_time


@pytest.mark.parametrize(("argv", "namesrv"), [
    (["-n", "a:1", "topic", "list"], "a:1"),  # before the subcommand: kept
    (["-n", "a:1", "topic", "list", "-n", "b:2"], "b:2"),  # after it: that one
    (["-n", "a:1", "admin", "topicStatus", "-t", "T"], "a:1"),
    (["admin", "-n", "a:1", "topicStatus", "-t", "T"], "a:1"),  # mqadmin's: before the admin command too
    (["admin", "topicStatus", "-t", "T", "-n", "b:2"], "b:2"),
    (["send", "--topic", "T"], None),  # none: the client's default ($NAMESRV_ADDR)
])
def test_the_name_server_flag_is_taken_before_or_after_the_subcommand(argv, namesrv):
    assert getattr(build_parser().parse_args(argv), "namesrv", None) == namesrv


def test_a_commands_handler_and_flags_come_from_its_declaration():
    args = build_parser().parse_args(["admin", "updateTopic", "-t", "T", "-w", "4", "-o", "true"])
    assert (args.command, args.admin_command, args.fn.__name__, args.admin_fn.__name__) == (
        "admin", "updateTopic", "run", "update_topic")
    assert (args.topic, args.write, args.read, args.order) == ("T", 4, 8, True)


def test_options_of_one_group_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["consume", "--topic", "T", "--from-beginning", "--offset", "3"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_command_is_declared_once():
    table = Commands("command")
    table.command("x", "one", opt("--a"))(lambda args: 0)
    with pytest.raises(ValueError, match="command x is declared twice"):
        table.command("x", "two")(lambda args: 0)


@pytest.mark.dated
@pytest.mark.parametrize("day", ["2026-11-30", "2024-02-29", "2038-01-19", "1999-12-31"])
def test_a_time_argument_keeps_its_milliseconds(day: str) -> None:
    """``yyyy-MM-dd#HH:mm:ss:SSS`` and ISO times (resetOffsetByTime, the console's reset by time): through
    ``timestamp() * 1000`` a quarter of the millisecond values came out one early, so a reset to .123 took the
    message stored at .122 too."""
    base = int(datetime.fromisoformat(f"{day}T12:00:00").timestamp()) * 1000
    for ms in range(1000):
        assert parse_time(f"{day}#12:00:00:{ms:03d}") == base + ms
        assert parse_time(f"{day}T12:00:00.{ms:03d}") == base + ms
