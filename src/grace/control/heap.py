"""Keep the garbage collector's full passes off the request and cycle paths.

CPython's cyclic collector walks every tracked object in a full (generation 2)
pass. ``grace up`` holds a large, long-lived heap: the topology of every GPU,
the reconciler's mirror of each live job and core's snapshot of each waiting
one. With 100,000 jobs in the store and 10,000 waiting, a full pass took 55-77 ms
(measured in ``benchmarks/control_plane.py``'s API server with a
``gc.callbacks`` timer; each pass freed nothing) and showed up as the p99 of
``GET /jobs`` and of the reconcile cycle.

``freeze_long_lived`` collects once, then moves everything alive into the
permanent generation, which the collector skips: the heap built at start-up
and by the first cycle is no longer walked again and again. Objects that die
later are still freed by reference counting; only a reference cycle among the
frozen ones would stay, which is what the interpreter documents for
``gc.freeze``.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> int:
    """Collect, then exempt every object alive now from later collections; how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


__all__ = ["freeze_long_lived"]
