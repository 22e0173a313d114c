"""Registry of the benchmark datasets shipped under `benchmarks/data/`, and suites of them.

Each folder holds one CSV (cleaned as its SOURCE.txt's last line says) and the SOURCE.txt with
origin, licence and attribution. Metrics follow the two benchmark traditions we compare with:
SELA scores F1 (binary), weighted F1 (multiclass) and RMSE (regression); AMLB scores ROC-AUC,
log-loss and RMSE; `benchmarks.run --protocol` picks one for every method (the SELA metrics are
also the engine's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError

DATA = Path(__file__).parent / "data"

SELA_METRIC = {"binary": "f1", "multiclass": "f1_weighted", "regression": "rmse"}
AMLB_METRIC = {"binary": "roc_auc", "multiclass": "log_loss", "regression": "rmse"}
PROTOCOLS = {"sela": SELA_METRIC, "amlb": AMLB_METRIC}


@dataclass(frozen=True)
class Dataset:
    name: str
    file: str
    target: str
    task_type: str
    openml_id: int | None

    @property
    def path(self) -> Path:
        return DATA / self.name / self.file

    @property
    def sela_metric(self) -> str:
        return SELA_METRIC[self.task_type]

    @property
    def amlb_metric(self) -> str:
        return AMLB_METRIC[self.task_type]

    def metric(self, protocol: str) -> str:
        return PROTOCOLS[protocol][self.task_type]


REGISTRY: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("australian", "australian.csv", "A15_class", "binary", 40981),
        Dataset("bank-marketing", "bank_marketing.csv", "Class", "binary", 1461),
        Dataset("banknote-authentication", "data_banknote_authentication.csv", "class", "binary",
                1462),
        Dataset("california-housing", "california_housing.csv", "median_house_value", "regression",
                43939),
        Dataset("concrete-strength", "concrete.csv", "strength", "regression", None),
        Dataset("credit-g", "credit_german.csv", "class", "binary", 31),
        Dataset("diamonds", "diamonds.csv", "price", "regression", 42225),
        Dataset("kc1", "kc1.csv", "Class", "binary", 1067),
        Dataset("mfeat-factors", "mfeat_factors.csv", "class", "multiclass", 12),
        Dataset("moneyball", "baseball.csv", "RS", "regression", 41021),
        Dataset("penguins", "penguins.csv", "species", "multiclass", None),
        Dataset("segment", "segment.csv", "class", "multiclass", 40984),
        Dataset("wine-quality-white", "winequality-white.csv", "quality", "multiclass", 40498),
    )
}

SUITES: dict[str, tuple[str, ...]] = {
    # Two tiny sets, one classification and one regression: plumbing checks in CI.
    "smoke": ("penguins", "concrete-strength"),
    # Small sets across the three task types; also issue 10's quality tasks.
    "lite": ("concrete-strength", "penguins", "credit-g", "kc1", "wine-quality-white", "moneyball"),
    "full": tuple(sorted(REGISTRY)),
}


def suite(name: str) -> list[Dataset]:
    """The datasets of a suite, or of a comma-separated list of dataset names."""
    names = SUITES.get(name) or tuple(n.strip() for n in name.split(",") if n.strip())
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise UserError(
            f"unknown suite or dataset {', '.join(unknown) or name!r}; suites: "
            f"{', '.join(SUITES)}; datasets: {', '.join(REGISTRY)}"
        )
    return [REGISTRY[n] for n in names]
