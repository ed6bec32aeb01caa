"""Reports of simulated runs: the comparison table (for the terminal and HTML), the verdict against a baseline,
windows sized to the run, matplotlib figures and a self-contained HTML page (docs/report.md)."""

from trimtab.report.html import write_report
from trimtab.report.table import COLUMNS, Column, best_per_column

__all__ = ["COLUMNS", "Column", "best_per_column", "write_report"]
