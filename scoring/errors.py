"""The package's one root exception and its input-error subclass."""

from __future__ import annotations


class SafeVLAError(Exception):
    """Root of every error this package raises on purpose."""


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
            where.append(f"file {file!r}")
        if episode is not None:
            where.append(f"episode {episode!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class RegistryError(SafeVLAError, KeyError):
    """An unknown benchmark, task, spec family or tier; the message lists the valid choices."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""
