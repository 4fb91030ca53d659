"""Infrastructure: errors, atomic files, the artefact cache, the results folder, registries, progress."""
