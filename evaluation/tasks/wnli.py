"""WNLI: pronoun resolution cast as entailment, labels ``0``/``1``, accuracy. Left out of the GLUE
average, as the paper does: its dev set is adversarial and every model scores the majority class.
Without a WNLI run, the submission's ``WNLI.tsv`` comes from the MNLI model (``mnli.py``)."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec

_PAIR = Layout(guid=0, text_a=1, text_b=2, label=-1)

TASK = TaskSpec(name="WNLI", kind="classification", labels=("0", "1"),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=1, text_b=2),
                metrics=(ACCURACY,), primary="accuracy", in_glue_average=False)
