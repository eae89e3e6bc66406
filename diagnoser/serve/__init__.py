"""`diagnoser serve`: the HTTP API (FastAPI + uvicorn) and its Prometheus metrics.

config (settings from env and options), auth (Bearer token), limits (request size), uploads
(multipart files and .tar.gz archives to a temp dir), work (the triage a worker process runs),
jobs (bounded worker pool, async jobs), app (the routes), cli (the `serve` command).
"""
