"""pazo.report.llm_table (`pazo-report llm-table`): the configuration is selected on mean
validation score over data seeds, and its test score is reported as mean and spread over those seeds."""
import json
from pathlib import Path

import pytest
import yaml

from pazo.report.llm_table import main, seed_table
from pazo.run.results import load_runs


def write_run(folder: Path, lr: float, data_seed: int, val: float, test: float, em: float):
    folder.mkdir(parents=True)
    cfg = {"seed": 0, "method": {"name": "dp_zo", "lr": lr, "clip": 0.1}, "privacy": {"epsilon": 1.0},
           "dataset": {"name": "squad", "data_seed": data_seed}, "train": {"batch_size": 16}}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    privacy = {"private": True, "guarantee_holds": True, "epsilon_spent": 0.99, "target_epsilon": 1.0,
               "sampling_matches_accountant": True, "within_budget": True}
    (folder / "summary.json").write_text(json.dumps({
        "status": "finished", "privacy": privacy, "final_test_accuracy": test, "final_val_accuracy": val,
        "final_test_metrics": {"accuracy": test, "f1": test, "exact_match": em}}))


def test_selection_on_validation_and_spread_over_data_seeds(tmp_path, capsys):
    sweep = tmp_path / "dpzo_squad"
    for seed, (test, em) in zip([13, 21, 42], [(0.70, 0.5), (0.74, 0.6), (0.78, 0.7)]):
        write_run(sweep / f"a{seed}", 1e-4, seed, val=0.8, test=test, em=em)         # best on validation
        write_run(sweep / f"b{seed}", 1e-5, seed, val=0.6, test=0.99, em=0.99)       # best on test: never chosen
    table = seed_table(load_runs([sweep]))
    assert len(table) == 1
    row = table.iloc[0]
    assert row.test_mean == pytest.approx(0.74) and row.test_std == pytest.approx(0.04)
    assert row.em_mean == pytest.approx(0.6) and row.em_std == pytest.approx(0.1)
    assert row.seeds == 3 and "lr=0.0001" in row.selected
    assert main([str(sweep)]) == 0 and "0.7400" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 2
