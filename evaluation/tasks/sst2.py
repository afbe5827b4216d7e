"""SST-2: sentiment of a movie-review sentence, scored by accuracy. Train and dev files are
``sentence, label``; the test file ``index, sentence``."""
from evaluation.task_spec import ACCURACY, Layout, TaskSpec

TASK = TaskSpec(name="SST-2", kind="classification", labels=("0", "1"),
                train=Layout(text_a=0, label=1), dev=Layout(text_a=0, label=1),
                test=Layout(guid=0, text_a=1), metrics=(ACCURACY,), primary="accuracy")
