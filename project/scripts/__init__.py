"""The study's steps and what they share, run by project.yml as `python -m project.scripts.NAME`
from the repository root; the benchmarks and tests import `corpora`, `machine` and `scoring` from
here."""
