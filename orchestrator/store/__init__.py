"""Where results go, at the bottom of the orchestrator: the results folder, local or on an object store
(storage), and its W&B mirror (tracking). Imports only ``privauditor.tasks``."""
