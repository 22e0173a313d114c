"""actors/name_guard.py: which tokens would spell a column name a reply must never write, or
make a computation already tried again, on a small vocabulary (the embedded model itself:
tests/test_llama_slow.py)."""

from __future__ import annotations

from actors.name_guard import NameGuard, RepeatGuard

VOCABULARY = ["df", '["', "['", "[", '"', "strength", "str", "s", "tr", "rength", "ength",
              "_ratio", '"]', 'strength"]', "slag", "cement", "st", "RS", "R", "A", "S", "RA",
              '"RS', "qu",
              "ality", "antity", "OBP", "OB", "O", "OOBP", "BA", "W", '"OBP"]', "BP"]


def _spelled(guard: NameGuard, written: str) -> set[str]:
    return {VOCABULARY[i] for i in guard.banned(written)}


def test_inside_a_column_name_the_tokens_spelling_the_target_are_banned() -> None:
    guard = NameGuard(VOCABULARY, never=["strength"], allowed=["slag", "cement", "age"])
    assert _spelled(guard, '    df["') == {"strength", "str", 'strength"]'}
    assert _spelled(guard, "    df['") == {"strength", "str", 'strength"]'}
    # `s` begins `slag`, `st` is too short to tell: the model may go on to another name
    assert _spelled(guard, '    df["s') == {"tr"}  # s + tr begins the target
    assert _spelled(guard, '    df["st') == {"rength"}
    assert _spelled(guard, '    df["str') == {"ength"}
    assert _spelled(guard, '    df["strength') == set()  # too late: the checks refuse it
    assert _spelled(guard, '    df["sl') == set()  # on the way to `slag`
    # outside a column's name nothing is banned: a name given, or a variable as index
    assert guard.banned('    df["cement"] / df["slag"] + ') == []
    assert guard.banned("    x[i") == []
    # a token that opens the quote itself
    assert '"strength' not in VOCABULARY and guard.banned("    df[") == []


def test_a_short_target_and_a_column_that_begins_like_it() -> None:
    guard = NameGuard(VOCABULARY, never=["RS"], allowed=["RA", "OBP"])
    assert _spelled(guard, '    df["') == {"RS"}  # `R` begins `RA`: allowed
    assert _spelled(guard, '    df["R') == {"S"}
    assert _spelled(guard, "    df[") == {'"RS'}  # the quote in the token
    # a target that a column begins with is that column's start: nothing is banned for it
    assert NameGuard(VOCABULARY, never=["RS"], allowed=["RS_prev"]).banned('df["') == []
    assert NameGuard(VOCABULARY, never=[], allowed=["RA"]).banned('df["') == []


def test_fewer_letters_than_the_minimum_are_left_alone() -> None:
    guard = NameGuard(VOCABULARY, never=["quality"], allowed=["alcohol"])
    assert "qu" not in _spelled(guard, '    df["')  # `quantity` begins so too
    assert _spelled(guard, '    df["qu') == {"ality"}


def test_the_second_column_of_a_computation_tried_is_banned_after_its_first_and_operator() -> None:
    tried = ["df['SLG'] / df['OBP']", "df['RA'] - (df['W'] + 1e-09)", "df['BA'] * 2"]
    guard = RepeatGuard(VOCABULARY, tried, allowed=["SLG", "OBP", "OOBP", "BA", "RA", "W"])
    start = '    df["power"] = df["SLG"] / '
    assert _spelled(guard, start + 'df["') == {"OBP"}  # not `O`, `OOBP`: a column begins so
    assert _spelled(guard, start + "(df['") == {"OBP"}  # however quoted and bracketed
    assert _spelled(guard, start + 'df["O') == {"BP"}
    assert _spelled(guard, start + "df[") == {'"OBP"]'}  # the quote in the token
    # the guarded second column of a difference; a difference of other columns is free
    assert _spelled(guard, '    df["x"] = df["RA"] - (df["') == {"W"}
    assert guard.banned('    df["x"] = df["RA"] - df["SLG"] / df["') == []
    # another operator, another first column, or not at the second column: nothing
    assert guard.banned(start.replace("/", "*") + 'df["') == []
    assert guard.banned('    df["x"] = df["OBP"] / df["') == []
    assert guard.banned(start) == [] and guard.banned('    df["') == []
    # a third operand is a new computation; so is `BA * 2` (not two columns): no guard
    assert guard.banned(start + 'df["OBP"] + df["') == []
    assert guard.banned('    df["x"] = df["BA"] * df["') == []
    # only the statement being written counts: an earlier line's computation is done
    assert guard.banned(start + 'df["BA"]\n    df["y"] = df["') == []
