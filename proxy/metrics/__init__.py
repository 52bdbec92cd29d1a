"""Prometheus metrics of the proxy (issue 25 item 6), served at ``GET /metrics``.

``instruments`` — the counters and histograms (multiprocess-safe when
``PROMETHEUS_MULTIPROC_DIR`` is set, as ``config.run`` does); ``recording`` — what fills them
(the finished dispatch report, token refreshes, ledger batches); ``pool_state`` — the gauges
computed at scrape time (accounts by status, slots in use); ``views`` — the endpoint and its
access rule.
"""
