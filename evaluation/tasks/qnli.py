"""QNLI: does a sentence answer a question? ``entailment`` / ``not_entailment``, accuracy."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec

_PAIR = Layout(guid=0, text_a=1, text_b=2, label=-1)

TASK = TaskSpec(name="QNLI", kind="classification", labels=("entailment", "not_entailment"),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=1, text_b=2),
                metrics=(ACCURACY,), primary="accuracy")
