"""Measurements of the data path: ``grace bench net``, ``scaling`` and ``storage``.

Each bench runs real work (``torch.distributed`` collectives, the DDP example, file
reads and DCP checkpoints) and reports figures with published definitions, so the
twin's runtime model can be checked against what this cluster really does. Torch and
plotly are imported only inside the functions that need them: importing this package
costs nothing to ``grace.core`` or to the CLI's start-up.
"""
