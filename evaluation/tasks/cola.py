"""CoLA: is a sentence grammatical? Scored by Matthews correlation, as GLUE and the paper do
(its classes are unbalanced, so accuracy would reward the majority class). The files have no
header: ``source, label, original label, sentence``; the test file has one (``index, sentence``)."""
from evaluation.task_spec import MCC, Layout, TaskSpec

_NO_HEADER = Layout(text_a=3, label=1, header=False, num_fields=4)

TASK = TaskSpec(name="CoLA", kind="classification", labels=("0", "1"),
                train=_NO_HEADER, dev=_NO_HEADER, test=Layout(guid=0, text_a=1),
                metrics=(MCC,), primary="mcc")
