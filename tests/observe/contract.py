"""The metric names of issue 15's contract, which the runbook and the Grafana board may use."""

from __future__ import annotations

#: every metric name of the issue's contract (what Grace's /metrics exposes)
CONTRACT_METRICS = frozenset({
    "grace_gpus", "grace_jobs", "grace_pending_jobs", "grace_job_phase_seconds_total",
    "grace_job_phase_share", "grace_job_wait_share", "grace_job_steps_per_second",
    "grace_job_step_seconds", "grace_job_loss", "grace_job_goodput_ratio", "grace_job_leaves",
    "grace_job_gpus", "grace_job_heartbeat_age_seconds", "grace_restarts_total",
    "grace_node_state", "grace_node_signals_total", "grace_health_breaker_open",
    "grace_tenant_gpu_hours_allocated_total", "grace_tenant_gpu_hours_useful_total",
    "grace_tenant_gpus_held", "grace_tenant_quota_gpus", "grace_gpu_allocation",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_SM_ACTIVE",
    "grace_gpu_telemetry_devices", "grace_job_constraint", "grace_cluster_constraint_gpus",
    *(f"{h}{suffix}" for h in ("grace_checkpoint_save_seconds", "grace_checkpoint_size_bytes",
                               "grace_reconcile_cycle_seconds", "grace_api_request_duration_seconds")
      for suffix in ("_bucket", "_sum", "_count")),
})
