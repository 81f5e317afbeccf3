"""The one error type for files this package cannot read or write as asked."""
from __future__ import annotations


class ElmoFileError(ValueError):
    """A file (options, weights, checkpoint, pipeline data, embed output) that is missing, unreadable,
    corrupt, hostile or inconsistent. The message names the file and the problem; the command line
    prints it as one `error: ...` line."""
