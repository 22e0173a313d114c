"""Per run of each arm: Optuna trials and executor seconds of family studies against node
studies (trials of one node's PARAMS: a case's, or an LLM-written node's), and the operators of
the nodes those node studies tuned.

    PYTHONPATH=. python tuneshare.py /tmp/exp/off-s01 /tmp/exp/on-s01 > tuneshare.txt
"""
import sys
from pathlib import Path

import pandas as pd

from engine.records.runs import open_run
from search.node import Node, Operator


def trials(nodes: list[Node]) -> str:
    return f"{len(nodes)}:{sum(n.exec_seconds for n in nodes):.0f}s"


for folder in sys.argv[1:]:
    results = pd.read_parquet(Path(folder) / "results.parquet")
    for row in results.sort_values(["seed"]).itertuples():
        journal = open_run(Path(str(row.run_dir))).journal
        by_id = {n.node_id: n for n in journal}
        tunes = [n for n in journal if n.operator is Operator.TUNE]
        family = [n for n in tunes if n.parent_id is None]
        node = [n for n in tunes if n.parent_id is not None]
        tuned = sorted({by_id[n.parent_id].operator.value for n in node if n.parent_id in by_id})
        print(f"{Path(folder).name:9s} s{row.seed} {row.task:19s} test {row.test:.4g} "
              f"family {trials(family):9s} node {trials(node):9s} {tuned}")
