"""Outside corpora: job directories built by generators that do not share code with `playbooks/`.

They exist to measure the diagnosis engine on data its authors did not shape (issue #10): other host
names, exporter layouts, scrape timing, noise and red herrings. Each job directory holds `job.log`,
a TSDB in `prometheus/` and a `truth.json` the engine never reads; `bench/outside_score.py` scores
the engine on them.
"""
