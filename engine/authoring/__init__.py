"""The rule authors' tools: check values, units and choices, run examples, diff two versions, and gate publication."""
