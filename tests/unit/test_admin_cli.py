"""What each `gateway admin` command sends (docs/keys-teams-spend.md): keys and teams share their create,
list, get and update commands (`admin_cli.Objects`), each kind keeping its own body options, clearable
fields and extra commands."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from gateway.admin_cli import add_parser, request_for


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gateway")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["admin", *argv])


CASES: list[tuple[tuple[str, ...], tuple[str, str, dict[str, Any] | None]]] = [
    (("keys", "create", "dev 1", "--team", "platform", "--rpm", "60", "--models", "a,b",
      "--metadata", '{"owner": "alice"}'),
     ("POST", "/admin/v1/keys", {"name": "dev 1", "team": "platform", "rpm": 60, "models": ["a", "b"],
                                 "metadata": {"owner": "alice"}})),
    (("keys", "list"), ("GET", "/admin/v1/keys", None)),
    (("keys", "get", "dev 1"), ("GET", "/admin/v1/keys/dev%201", None)),
    (("keys", "update", "dev-1", "--tpm", "5", "--expires-at", "2027-01-01T00:00:00Z", "--clear", "team,rpm"),
     ("PATCH", "/admin/v1/keys/dev-1", {"tpm": 5, "expires_at": "2027-01-01T00:00:00Z", "team": None,
                                        "rpm": None})),
    (("keys", "revoke", "dev-1"), ("DELETE", "/admin/v1/keys/dev-1", None)),
    (("keys", "rotate", "dev-1", "--grace-s", "30"), ("POST", "/admin/v1/keys/dev-1/rotate", {"grace_s": 30.0})),
    (("teams", "create", "search", "--budget-usd", "5", "--budget-period", "day"),
     ("POST", "/admin/v1/teams", {"name": "search", "budget_usd": 5.0, "budget_period": "day"})),
    (("teams", "list"), ("GET", "/admin/v1/teams", None)),
    (("teams", "get", "a/b"), ("GET", "/admin/v1/teams/a%2Fb", None)),
    (("teams", "update", "search", "--rpm", "9", "--clear", "budget_usd"),
     ("PATCH", "/admin/v1/teams/search", {"rpm": 9, "budget_usd": None})),
    (("teams", "delete", "search"), ("DELETE", "/admin/v1/teams/search", None)),
]


@pytest.mark.parametrize(("argv", "sent"), CASES, ids=[" ".join(argv[:2]) for argv, _ in CASES])
def test_each_command_sends_its_request(argv: tuple[str, ...], sent: tuple[str, str, dict[str, Any] | None]) -> None:
    assert request_for(_parsed(*argv)) == sent


@pytest.mark.parametrize("argv", [
    ("teams", "update", "search", "--team", "x"),  # a team has no team, expiry or metadata
    ("teams", "update", "search", "--clear", "expires_at"),  # nor may it clear one
    ("teams", "rotate", "search"),  # rotate and revoke are a key's
    ("keys", "delete", "dev-1"),  # a key is revoked, not deleted
    ("keys", "update", "dev-1", "--clear", "metadata"),  # not a clearable field
])
def test_each_kind_keeps_its_own_options_and_commands(argv: tuple[str, ...],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parsed(*argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err
