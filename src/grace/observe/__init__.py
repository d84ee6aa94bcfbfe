"""Observability: heartbeats, /metrics, NVML telemetry, runbooks and alerts, ``grace why``.

See docs/observability.md for the metric names and docs/runbooks.md for the rules.
"""
