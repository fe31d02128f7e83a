"""Reading what a training run wrote: ``forge report`` (plots and a one-page summary) and ``forge runs``.

- :mod:`~forge_cli.report.metrics`: ``RUN/metrics.jsonl`` as typed records (:func:`read_metrics`);
- :mod:`~forge_cli.report.summary`: the figures of one run (:func:`summarize_run`), one table of rows;
- :mod:`~forge_cli.report.plots`: PNG figures, one run or several overlaid (matplotlib, Agg, no pyplot);
- :mod:`~forge_cli.report.render`: :func:`write_report`, what ``forge report`` calls;
- :mod:`~forge_cli.report.status`: :func:`run_infos`, what ``forge runs`` calls.

Nothing here imports matplotlib until a plot is drawn.
"""

from __future__ import annotations
