"""STS-B: similarity of a sentence pair, a score in [0, 5] (regression). Pearson and Spearman
correlation; the paper reports Spearman. Symmetric: also trains on (b, a); ten epochs, as the
paper's recipe for its small data sets."""
from evaluation.task_spec import PEARSON, SPEARMAN, Layout, TaskSpec

_PAIR = Layout(guid=0, text_a=7, text_b=8, label=9)

TASK = TaskSpec(name="STS-B", kind="regression", labels=(),
                train=_PAIR, dev=_PAIR, test=Layout(guid=0, text_a=7, text_b=8),
                metrics=(PEARSON, SPEARMAN), primary="spearman", epochs=10, both_orders=True,
                score_range=(0.0, 5.0))
