"""The answer format: the multi-answer prompt (``prompting``), reading answers back out of a completion
(``parsing``), applying an answer to its parent and deduping (``mutate``), and the entry-point renaming a model
needs (``naming``). Knows no backend and no trainer."""
