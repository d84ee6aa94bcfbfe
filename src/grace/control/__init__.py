"""The live control plane: the store, the reconciler that drives ``core``, and the API."""
