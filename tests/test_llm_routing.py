"""Mixed models: `--llm` specs routed by operator, validated at start, and a whole run whose
drafts and improvements come from two different (scripted) models."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from actors.llm import make_llm, parse_routes, parse_spec, routes_from_mapping
from common.errors import UserError
from engine.config import RunConfig, load_task_yaml
from engine.run import main
from search.node import Operator
from tests.reliability._rig import replies


def test_one_spec_serves_every_operator() -> None:
    routes = parse_routes("llama")
    assert routes.specs == ["llama"]
    assert {routes.spec_for(op) for op in Operator} == {"llama"}
    assert routes.text() == "llama"


def test_operators_routed_and_the_first_entry_serves_the_rest() -> None:
    routes = parse_routes("draft, improve=vllm:big ; debug=openai:http://h:8000/v1#small")
    assert routes.specs == ["vllm:big", "openai:http://h:8000/v1#small"]
    assert routes.spec_for(Operator.DRAFT) == routes.spec_for(Operator.IMPROVE) == "vllm:big"
    assert routes.spec_for(Operator.DEBUG) == "openai:http://h:8000/v1#small"
    assert routes.spec_for(Operator.REFLECT) == "vllm:big"  # not named: first entry
    assert parse_routes(routes.text()) == routes


def test_a_default_entry_serves_the_operators_not_named() -> None:
    routes = parse_routes("debug=vllm:small;vllm:big")
    assert routes.spec_for(Operator.DEBUG) == "vllm:small"
    assert routes.spec_for(Operator.DRAFT) == routes.spec_for(Operator.SELA) == "vllm:big"


def test_specs_keep_their_own_equals_signs_and_colons() -> None:
    routes = parse_routes("draft=scripted:/tmp/a=b.json;scripted:/tmp/c.json")
    assert routes.spec_for(Operator.DRAFT) == "scripted:/tmp/a=b.json"
    assert routes.spec_for(Operator.DEBUG) == "scripted:/tmp/c.json"


@pytest.mark.parametrize("text,needle", [
    ("drafts=llama", "unknown operator 'drafts'"),
    ("baseline=llama", "unknown operator 'baseline'"),
    ("draft=llama;draft,debug=llama:/m.gguf", "routed twice"),
    ("llama;llama:/m.gguf", "only one may be the default"),
    ("draft=llama;;debug=llama", "empty entry"),
    ("draft=gpt9", "unknown LLM spec"),
    ("debug=vllm", "needs an argument"),
    ("openai:http://h:8000/v1", "needs a model after '#'"),
    ("openai:ftp://h/v1#m", "http:// or https://"),
])
def test_bad_routes_are_user_errors(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        parse_routes(text)


def test_none_is_a_spec_without_any_pool() -> None:
    assert parse_spec("none") == ("none", "")
    routes = parse_routes(" none ")
    assert routes.none and routes.specs == [] and routes.text() == "none"
    assert {routes.spec_for(op) for op in Operator} == {"none"}
    assert not parse_routes("llama").none
    with pytest.raises(UserError, match="none makes no LLM"):
        make_llm("none")


@pytest.mark.parametrize("text,needle", [
    ("none:model.gguf", "none takes no argument"),
    ("draft=none;llama", "cannot be routed beside other specs"),
    ("llama;debug=none", "cannot be routed beside other specs"),
])
def test_none_routed_beside_a_model_is_a_user_error(text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        parse_routes(text)


def test_llm_none_asks_no_model_what_a_request_leaves_open(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d.csv").write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n"
                                                         for i in range(40)))
    monkeypatch.chdir(tmp_path)
    code = main(["--task", "predict something from d.csv", "--llm", "none",
                 "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("error: the request does not say the target; say it in the "
                                 "request (e.g. 'predict COLUMN from FILE.csv') or pass flags")
    assert not (tmp_path / "runs").exists()


def test_parse_spec_splits_kind_and_argument() -> None:
    assert parse_spec("openai:http://127.0.0.1:8000/v1#qwen") == (
        "openai", "http://127.0.0.1:8000/v1#qwen")
    assert parse_spec("vllm:/models/qwen") == ("vllm", "/models/qwen")


def test_task_yaml_mapping_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(
        "data: d.csv\ntarget: y\nllm:\n  draft,improve: scripted:big.json\n"
        "  default: scripted:small.json\n")
    config = load_task_yaml(tmp_path / "task.yaml")
    routes = parse_routes(config.llm)
    assert routes.spec_for(Operator.DRAFT) == f"scripted:{tmp_path / 'big.json'}"
    assert routes.spec_for(Operator.DEBUG) == f"scripted:{tmp_path / 'small.json'}"
    with pytest.raises(UserError, match="must be a spec string"):
        routes_from_mapping({"draft": 3}, "task file t.yaml")


@pytest.mark.parametrize("kwargs,match", [
    ({"llm": "llama", "tp": 2}, "applies to vllm specs only"),
    ({"llm": "vllm:m", "tp": 0}, "bad --tp"),
    ({"llm": "vllm:m", "tp": 2, "llm_gpus": 1}, "drop --llm-gpus"),
    ({"llm": "vllm:m", "llm_gpus": -1}, "bad --llm-gpus"),
    ({"llm_resource": "GPU"}, "bad --llm-resource"),
    ({"executor_resource": "has space"}, "bad --executor-resource"),
    ({"executor_gpus": -0.5}, "executor_gpus"),
    ({"vllm_args": ["max_model_len"]}, "vllm_args"),
    ({"llm_concurrency": 0}, "llm-concurrency"),
    ({"llm": "draft=llama;nope=llama"}, "unknown operator"),
])
def test_placement_settings_validated(kwargs: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        RunConfig(data=Path("d.csv"), target="y", **kwargs).validate()


def test_good_cluster_settings_pass() -> None:
    config = RunConfig(data=Path("d.csv"), target="y", llm="vllm:m", tp=4, llm_replicas=2,
                       llm_resource="llm", executor_resource="executor", executor_gpus=0.25,
                       vllm_args={"max_model_len": 16384}).validate()
    assert config.tp == 4


def test_unknown_operator_on_the_command_line_exits_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a,y\n" + "".join(f"{i},{i % 2}\n" for i in range(40)))
    out = tmp_path / "runs"
    code = main(["--data", str(data), "--target", "y", "--out", str(out),
                 "--llm", "draft=llama;fix=llama"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "unknown operator 'fix'" in err, err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_run_routes_drafts_and_improvements_to_their_models(tmp_path: Path) -> None:
    rows = "".join(f"{i},{(i * 7) % 5},{i * 0.3 + (i * 7) % 5}\n" for i in range(80))
    (tmp_path / "d.csv").write_text("a,b,y\n" + rows)  # regression: constant predictions score
    # Distinct code per model and reply, so the duplicate guard never skips one.
    for name, prefix in (("big.json", "big"), ("small.json", "small")):
        (tmp_path / name).write_text(json.dumps({"default": replies(prefix, 8)}))
    (tmp_path / "task.yaml").write_text(
        "data: d.csv\ntarget: y\nllm:\n  draft: scripted:big.json\n"
        "  improve,debug: scripted:small.json\nnum_drafts: 1\nmax_nodes: 8\nexecutors: 1\n"
        "budget: 4m\nquiet: true\nbaseline: false\nexec_timeout: 60\n")
    assert main(["--task", str(tmp_path / "task.yaml"), "--out", str(tmp_path / "runs")]) == 0
    (run,) = list((tmp_path / "runs").iterdir())
    nodes = pd.read_parquet(run / "nodes")
    assert len(nodes) == 8 and (nodes.status == "ok").all(), nodes[["operator", "error"]]
    # At most 5 proposals fit in flight (1 executing, 1 waiting, 1 generating, 2 queued for
    # the busy draft model), so the last 3 come after a node has finished: improvements.
    models = nodes.groupby("operator").model.unique()
    assert list(models["draft"]) == ["scripted:big.json"]
    assert list(models["improve"]) == ["scripted:small.json"]
    # Two pools, named apart; each node's actor is from the pool of its operator.
    assert set(nodes[nodes.operator == "draft"].llm_actor) <= {"llm0-0"}
    assert set(nodes[nodes.operator == "improve"].llm_actor) <= {"llm1-0"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"] == "scripted:big.json, scripted:small.json"


@pytest.mark.slow  # a whole search, about 20 s on 2 cores
def test_llm_none_stops_when_the_engine_has_nothing_left_to_run(tmp_path: Path) -> None:
    """No floor, no ensembles: the baseline root is all there is to run, and the loop, with no
    LLM pool to wait on, stops after it instead of at the budget."""
    rows = "".join(f"{i},{(i * 7) % 5},{i * 0.3 + (i * 7) % 5}\n" for i in range(80))
    (tmp_path / "d.csv").write_text("a,b,y\n" + rows)
    out = tmp_path / "runs"
    assert main(["--data", str(tmp_path / "d.csv"), "--target", "y", "--llm", "none",
                 "--no-floor", "--no-ensemble", "--budget", "10m", "--quiet", "--memory", "off",
                 "--no-save-model", "--out", str(out)]) == 0
    (run,) = list(out.iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["spent"]["stopped_by"] == "nothing left to run"
    assert manifest["model"] == "none"
    nodes = pd.read_parquet(run / "nodes")
    assert list(nodes.operator) == ["baseline"] and (nodes.status == "ok").all()
