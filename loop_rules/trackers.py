"""Plugin: the built-in tracker backends ``sqlite``, ``spool`` and ``github``.

The tracker module (SQLite, temp files, locks) is imported only when a
tracker is asked for, not when the plugin manager is built: commands that
file nothing (``classify``, ``explain`` ...) start without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loop_core import hookimpl

if TYPE_CHECKING:
    from loop_core.trackers import Tracker, TrackerOptions, TrackerSpec


def _sqlite(options: TrackerOptions) -> Tracker:
    from loop_core.trackers import SqliteTracker

    _no_repo(options, "sqlite", "its SQLite file under <captures>/_loop/")
    return SqliteTracker.for_captures(options.captures)


def _spool(options: TrackerOptions) -> Tracker:
    from loop_core.trackers import SpoolTracker

    _no_repo(options, "spool", "files under <captures>/_dedup-queue/")
    return SpoolTracker(options.captures)


def _no_repo(options: TrackerOptions, name: str, where: str) -> None:
    """A --repo given to a tracker that files locally: most likely --tracker github was
    left out, and the failures meant for that repository went quietly into a file."""
    if options.repo is not None:
        from loop_core import LoopError

        raise LoopError(f"--repo {options.repo}: the {name} tracker files into {where} and takes no "
                        "repository; give --tracker github to file into GitHub")


def _github(options: TrackerOptions) -> Tracker:
    from loop_core.github import GitHubTracker

    return GitHubTracker(options.captures, repo=options.repo, **options.extra)


@hookimpl
def loop_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    from loop_core.trackers import TrackerSpec

    register(TrackerSpec("sqlite", _sqlite, "embedded SQLite file under <captures>/_loop/ (default)"))
    register(TrackerSpec("spool", _spool, "offline files under <captures>/_dedup-queue/"))
    register(TrackerSpec("github", _github, "GitHub issues through the gh CLI; degrades to the spool"))
