"""The package's errors: one base, `ElmoError`, and the few kinds a user catches; and its warnings.

Every message names the file or setting and the problem; the command line prints it as one
`error: ...` line and exits 1. This module imports nothing of the package (every layer may use it).
"""

from __future__ import annotations


class ElmoError(Exception):
    """Base of every error this package raises on purpose."""


class ElmoFileError(ElmoError, ValueError):
    """A file (options, weights, checkpoint, pipeline data, corpus, embed output) that is missing,
    unreadable, corrupt, hostile or inconsistent, or cannot be written."""


class ElmoConfigError(ElmoError, ValueError):
    """A setting, argument or config value that is out of range, unknown, or disagrees with the
    model."""


class ElmoResourceError(ElmoError, OSError):
    """Not enough of something to do the work: memory, disk space, or an optional package (named,
    with the command that installs it)."""


class ElmoResumeError(ElmoFileError):
    """An interrupted run that cannot be resumed as asked: other input, weights or settings, or a
    second writer."""


__all__ = ["ElmoConfigError", "ElmoError", "ElmoFileError", "ElmoResourceError", "ElmoResumeError"]


class ElmoUnusedWarning(UserWarning):
    """An `elmo` component whose layers no trained component reads: the biLM runs for nothing."""


class ElmoUntrainedWarning(UserWarning):
    """A biLM of random, untrained weights (`python -m spacy_elmo init-random`): for trying the API
    offline; its vectors mean nothing."""
