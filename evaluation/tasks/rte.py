"""RTE: textual entailment, ``entailment`` / ``not_entailment``, accuracy; ten epochs, as the
paper's recipe for its small data sets."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec

_PAIR = Layout(guid=0, text_a=1, text_b=2, label=-1)

TASK = TaskSpec(name="RTE", kind="classification", labels=("entailment", "not_entailment"),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=1, text_b=2),
                metrics=(ACCURACY,), primary="accuracy", epochs=10)
