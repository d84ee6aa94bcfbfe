"""The ``grace`` command line: one entry point, one module per verb family."""
