"""The sweep file at the bottom of the orchestrator: its settings (sweep), the matrix of cells it expands to
(matrix) and the hypothesis it commits to (hypothesis). Imports only ``privauditor.tasks``."""
