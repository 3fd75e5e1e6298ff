"""The paper's numbers as transcribed in `paper_values()` (pazo.run.results), beside which the tables put
ours, against the paper's text (split from tests/report/test_tables_figures.py)."""
import pandas as pd
import pytest

from pazo.run.results import paper_values


def test_paper_values_match_the_paper_text():
    paper = paper_values()
    cell = paper.set_index(["table", "setting", "method", "column"]).value
    assert cell[("1", "cifar10", "pazo_m", "0.1")] == 70.9 and cell[("1", "cifar10", "sgd", "nonprivate")] == 86.3
    assert cell[("3", "imdb", "pazo_s", "0.1")] == 74.6 and pd.isna(cell[("4", "mnli", "gep", "1")])
    assert cell[("5", "cifar10", "pazo_m", "s_per_iter")] == pytest.approx(0.051)
    assert cell[("8", "mnli", "dpzero", "q=5")] == 62.6
    assert len(paper[paper.table == "2"]) == 9 * 4 + 2      # no epsilon 3 for Tiny-ImageNet
