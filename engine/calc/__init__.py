"""The rules engine: catalogs, safe formulas, rule sets and their evaluation, one scenario or a grid; knows nothing of Excel, HTML or mail."""
