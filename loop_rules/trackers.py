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

    return SqliteTracker.for_captures(options.captures)


def _spool(options: TrackerOptions) -> Tracker:
    from loop_core.trackers import SpoolTracker

    return SpoolTracker(options.captures)


def _github(options: TrackerOptions) -> Tracker:
    from loop_core.github import GitHubTracker

    return GitHubTracker(options.captures, repo=options.repo, **options.extra)


@hookimpl
def loop_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    from loop_core.trackers import TrackerSpec

    register(TrackerSpec("sqlite", _sqlite, "embedded SQLite file under <captures>/_loop/ (default)",
                         takes_repo=False))
    register(TrackerSpec("spool", _spool, "offline files under <captures>/_dedup-queue/", takes_repo=False))
    register(TrackerSpec("github", _github, "GitHub issues through the gh CLI; degrades to the spool"))
