"""The package's one root exception and its input-error subclass."""

from __future__ import annotations


class SafeVLAError(Exception):
    """Root of every error this package raises on purpose."""


def quoted(text) -> str:
    """`repr(text)` for a message, with a backslash shown once: a file name that is not UTF-8 is
    already written with `\\xNN` escapes (`scoring.records.archive.display_path`), which repr would
    double. Line breaks and other control characters stay escaped, so the message stays one line."""
    shown = repr(text)
    return shown.replace("\\\\", "\\") if isinstance(text, str) else shown


class RecordError(SafeVLAError, ValueError):
    """A trajectory record, registry or store that does not match its schema.

    The message always names where the problem is (file, episode, field) and what was
    expected, so one bad episode in a large archive can be found and fixed.
    """

    def __init__(self, message: str, *, file: str | None = None, episode: str | None = None,
                 field: str | None = None):
        self.file = file
        self.episode = episode
        self.field = field
        self.detail = message
        where = []
        if file is not None:
            where.append(f"file {quoted(file)}")
        if episode is not None:
            where.append(f"episode {quoted(episode)}")
        if field is not None:
            where.append(f"field {quoted(field)}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class RegistryError(SafeVLAError, KeyError):
    """An unknown benchmark, task, spec family or tier; the message lists the valid choices."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""
