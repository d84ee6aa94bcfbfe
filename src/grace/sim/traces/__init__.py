"""Trace loaders: real public job logs (and a synthetic generator) as ``TraceJob`` lists."""
