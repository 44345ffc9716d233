"""Plugin: the built-in tracker backends ``sqlite``, ``spool`` and ``github``."""

from __future__ import annotations

from collections.abc import Callable

from loop_core import hookimpl
from loop_core.trackers import SpoolTracker, SqliteTracker, Tracker, TrackerOptions, TrackerSpec


def _sqlite(options: TrackerOptions) -> Tracker:
    return SqliteTracker.for_captures(options.captures)


def _spool(options: TrackerOptions) -> Tracker:
    return SpoolTracker(options.captures)


def _github(options: TrackerOptions) -> Tracker:
    from loop_core.github import GitHubTracker

    return GitHubTracker(options.captures, repo=options.repo, **options.extra)


@hookimpl
def loop_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    register(TrackerSpec("sqlite", _sqlite, "embedded SQLite file under <captures>/_loop/ (default)"))
    register(TrackerSpec("spool", _spool, "offline files under <captures>/_dedup-queue/"))
    register(TrackerSpec("github", _github, "GitHub issues through the gh CLI; degrades to the spool"))
