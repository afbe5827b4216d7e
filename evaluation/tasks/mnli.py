"""MNLI: entailment, contradiction or neutral, on two dev sets (matched and mismatched genres).

The headline score splits by dev set: ``accuracy_m`` (the paper's number) and ``accuracy_mm``;
the test sets go to ``MNLI-m.tsv`` and ``MNLI-mm.tsv``. The MNLI model also predicts the AX
diagnostic set (test only) and WNLI's test set: WNLI is an entailment task that the GLUE
baselines and BERT submit from an NLI model, ``entailment`` → 1 and anything else → 0 (a WNLI
model of its own, when WNLI was run, takes precedence in the submission). Rows broken by stray
newlines are skipped and counted, as the original reader does.
"""
from evaluation.task_spec import ACCURACY, ExtraTest, Layout, TaskSpec

_LABELS = ("contradiction", "entailment", "neutral")
_PAIR = Layout(guid=0, text_a=8, text_b=9, label=-1)
_PAIR_TEST = Layout(guid=0, text_a=1, text_b=2)

TASK = TaskSpec(
    name="MNLI", kind="classification", labels=_LABELS,
    train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=8, text_b=9),
    metrics=(ACCURACY,), primary="accuracy_m",
    eval_splits=("dev_matched", "dev_mismatched"), test_splits=("test_matched", "test_mismatched"),
    metric_suffix={"dev_matched": "_m", "dev_mismatched": "_mm"},
    submission={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
    also_predicts=(
        ExtraTest("ax", ("diagnostic/diagnostic.tsv", "AX/test.tsv", "AX/AX.tsv"), _PAIR_TEST,
                  "AX.tsv"),
        ExtraTest("wnli_test", ("WNLI/test.tsv",), _PAIR_TEST, "WNLI.tsv",
                  relabel={"entailment": "1", "contradiction": "0", "neutral": "0"}),
    ),
    skip_malformed=True)
