"""AI compute sizing engine: intake → validate → evaluate → render → deliver."""

__version__ = "0.1.0"
