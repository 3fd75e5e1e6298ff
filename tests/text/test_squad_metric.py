"""SQuAD's metric (pazo.text.squad_metric) on hand-computed values (split from tests/llm/test_llm.py)."""
import pytest

from pazo.text.squad_metric import exact_match, f1_score, normalize_answer


def test_squad_metric_against_hand_computed_values():
    assert normalize_answer("The  Eiffel-Tower, (Paris)!") == "eiffeltower paris"
    assert f1_score("the city of Paris", ["Paris"]) == pytest.approx(0.5)   # pred "city of paris", P 1/3, R 1
    assert exact_match("the city of Paris", ["Paris"]) == 0.0
    assert exact_match("The Paris!", ["paris"]) == 1.0
    assert f1_score("Rome and Paris", ["Paris", "Rome Paris"]) == pytest.approx(0.8)  # best: P 2/3, R 1
    assert f1_score("Oslo", ["Paris"]) == 0.0 and f1_score("", ["Paris"]) == 0.0
