"""The live reconciler's rooms, one role each (the ``Reconciler`` in ``grace.control.reconciler``
runs them in order every cycle):

- ``context``: what every role shares (store, backend, cluster, clock, settings, job dirs);
- ``ending``: ends the control plane asks for, written to the store before the backend
  is told (so a restart knows why an attempt ended), completed by the backend's worker;
- ``observe``: what the backend reports about attempts, recorded with core's restart policy;
- ``health``: signals, drains, diagnostics and returns through ``core.health.HealthMonitor``;
- ``watches``: heartbeats that stopped, stragglers, planned evictions;
- ``view``: the store's rows for one cycle as core's ``SchedulerState`` (read only);
- ``apply``: starts (with a launch budget), stops, preemptions, cancellations;
- ``recovery``: after a restart or a takeover, adopt or end what earlier attempts left.
"""
