"""A command's answer to one of our errors: one line on stderr, 2 for input the user can fix,
1 for anything else of ours."""

from __future__ import annotations

import pytest

from common.errors import StoreError, UserError, error_exit


def test_error_exit_prints_one_line_and_returns_the_status(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert error_exit(UserError("bad --budget ten; try 10m")) == 2
    assert error_exit(StoreError("cannot read runs/x/manifest.json")) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("error: bad --budget ten; try 10m\n"
                            "error: cannot read runs/x/manifest.json\n")
