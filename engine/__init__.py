"""AI compute sizing engine: intake → validate → evaluate → render → deliver, one package per stage."""

__version__ = "0.1.0"
