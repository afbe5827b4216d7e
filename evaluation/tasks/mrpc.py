"""MRPC: is a sentence pair a paraphrase? Accuracy (the paper's number) and F1 of the class
"1" (GLUE's second MRPC score). The pair is symmetric, so it also trains on (b, a)."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec, f1

_PAIR = Layout(text_a=3, text_b=4, label=0)

TASK = TaskSpec(name="MRPC", kind="classification", labels=("0", "1"),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=3, text_b=4),
                metrics=(ACCURACY, f1("1")), primary="accuracy", both_orders=True)
