"""Generated data shared by the demo, the tests and the benchmarks (never by the library).

``prose``: English-like text from a small grammar (the demo's corpus) and bad input files;
``class_task``: the demo's GLUE-format class task and the class sentences its corpus needs;
``web_junk``: clean prose from the shared books mixed with labelled web junk (filter precision);
``web_corpus``: a web-like corpus of any size from real sentences, with planted duplicates.
Nothing is downloaded: the books are read from a folder the caller names.
"""
