"""The spaCy project of the study (project.yml at the repository root): its scripts are the package
`project.scripts`, run as `python -m project.scripts.NAME` from the repository root."""
