"""The prompted tasks' specifications: each task's Hub copy, columns, classes, label words and
templates (MeZO's causal prompts, LM-BFF's masked ones; `TASKS`, `task_spec`), label-word
resolution (`resolve_label_words`) and SQuAD's prompt (`squad_prompt`). The data loaders
(`pazo.data.prompt_tasks`) encode data sets with them; the language-model tasks (`pazo.models.hf_lm`)
score the label words.
"""
from __future__ import annotations

from dataclasses import dataclass

from pazo.errors import ConfigError, unknown_choice


def _nli_masked(premise: str, hypothesis: str) -> list:
    return ["<cls>", premise[:-1], "?", "<mask>", ",", " " + hypothesis[:1].lower() + hypothesis[1:], "<sep>"]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    hub: str
    hub_config: str | None
    train_split: str
    test_split: str
    columns: tuple[str, ...]            # text columns, in template order
    label_column: str = "label"
    classes: tuple[str, ...] = ()       # class names by label id
    causal_words: tuple[str, ...] = ()
    masked_words: tuple[str, ...] = ()
    causal: object = None               # row texts -> prompt text (encoded with special tokens)
    masked: object = None               # row texts -> pieces ("<cls>", "<mask>", "<sep>" or text)
    generation: bool = False

    def label_words(self, kind: str) -> list[str]:
        words = self.causal_words if kind == "causal" else self.masked_words
        if not words:
            have = [n for n, t in TASKS.items() if (t.causal if kind == "causal" else t.masked)]
            raise ConfigError(f"task {self.name} has no {kind} template; {kind} templates exist for {', '.join(have)}")
        return list(words)


TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    TaskSpec("sst2", "nyu-mll/glue", "sst2", "train", "validation", ("sentence",), classes=("negative", "positive"),
             causal_words=(" terrible", " great"), masked_words=(" terrible", " great"),
             causal=lambda s: f"{s.strip()} It was", masked=lambda s: ["<cls>", s, " It was", "<mask>", ".", "<sep>"]),
    TaskSpec("sst5", "SetFit/sst5", None, "train", "test", ("text",),
             classes=("very negative", "negative", "neutral", "positive", "very positive"),
             masked_words=(" terrible", " bad", " okay", " good", " great"),
             masked=lambda s: ["<cls>", s, " It was", "<mask>", ".", "<sep>"]),
    TaskSpec("mnli", "nyu-mll/glue", "mnli", "train", "validation_matched", ("premise", "hypothesis"),
             classes=("entailment", "neutral", "contradiction"), masked_words=(" Yes", " Maybe", " No"),
             masked=_nli_masked),
    TaskSpec("snli", "stanfordnlp/snli", None, "train", "test", ("premise", "hypothesis"),
             classes=("entailment", "neutral", "contradiction"), masked_words=(" Yes", " Maybe", " No"),
             masked=_nli_masked),
    TaskSpec("rte", "nyu-mll/glue", "rte", "train", "validation", ("sentence1", "sentence2"),
             classes=("entailment", "not_entailment"), causal_words=("Yes", "No"), masked_words=(" Yes", " No"),
             causal=lambda p, h: f'{p}\nDoes this mean that "{h}" is true? Yes or No?\n', masked=_nli_masked),
    TaskSpec("trec", "CogComp/trec", None, "train", "test", ("text",), label_column="coarse_label",
             classes=("ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"),
             masked_words=(" Expression", " Entity", " Description", " Human", " Location", " Number"),
             masked=lambda s: ["<cls>", "<mask>", ":", " " + s, "<sep>"]),
    TaskSpec("squad", "rajpurkar/squad", None, "train", "validation", ("title", "context", "question"),
             label_column="answers", generation=True),
]}


def task_spec(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ConfigError(unknown_choice("dataset.task", name, TASKS))
    return TASKS[name]


def resolve_label_words(task: str, kind: str, override=None) -> list[str]:
    """The label words of a classification task for a causal or masked model, or the override."""
    return list(override) if override else task_spec(task).label_words(kind)


def squad_prompt(title: str, context: str, question: str) -> str:
    return f"Title: {title}\nContext: {context}\nQuestion: {question.strip()}\nAnswer:"
