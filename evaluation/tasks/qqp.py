"""QQP: are two Quora questions duplicates? Accuracy (the paper's number) and F1 of the class
"1". The official download has rows broken by newlines inside a question: they are skipped and
counted, as the original reader does."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec, f1

_PAIR = Layout(guid=0, text_a=3, text_b=4, label=5)

TASK = TaskSpec(name="QQP", kind="classification", labels=("0", "1"),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=1, text_b=2),
                metrics=(ACCURACY, f1("1")), primary="accuracy", skip_malformed=True)
