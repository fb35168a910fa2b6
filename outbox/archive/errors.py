"""What reading or writing an archive refuses, each naming what it refused."""


class ArchiveError(RuntimeError):
    """Base class of the archive's errors."""


class ArchiveFileError(ArchiveError):
    """A file the archive lists is missing, changed or unreadable: the message names it."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"archive file {path} {problem}")


class ArchiveVersionError(ArchiveError):
    """Written in a format version newer than this version of the package reads."""


class ArchiveMissingError(ArchiveError):
    """The publication has no archive, or the archive does not hold what was asked."""


class ArchiveRefusedError(ArchiveError):
    """The job cannot run as asked: another job writes the archive now, or the archive is
    somewhere else than the job was told."""
