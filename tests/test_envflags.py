"""The environment switches: which words turn one off, and which values are warned about."""

from __future__ import annotations

import pytest

from loop_core.envflags import switched_off, unknown_settings

SWITCHES = ("LOOP_RULES_SCANNER", "LOOP_RULES_CACHE", "LOOP_RULES_ORJSON")


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """No switch set, whatever the shell running the tests has set."""
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("value", ["off", "0", "no", "false", "OFF", "No", "FALSE"])
def test_each_off_word_in_any_case_turns_every_switch_off_without_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                                            name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert switched_off(name)
    assert unknown_settings() == []


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("value", ["on", "1", "yes", "true", "ON", "Yes", "True", ""])
def test_each_on_word_and_an_empty_value_leave_every_switch_on_without_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                                                 name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert not switched_off(name)
    assert unknown_settings() == []


@pytest.mark.parametrize("name", SWITCHES)
def test_every_switch_set_to_a_value_it_does_not_know_is_warned_about(monkeypatch: pytest.MonkeyPatch,
                                                                      name: str) -> None:
    monkeypatch.setenv(name, "of")
    assert not switched_off(name)
    (warning,) = unknown_settings()
    assert warning.startswith(f"{name}='of' is not one of off, 0, no, false, on, 1, yes, true")
    assert warning.endswith("; taken as on")


def test_ahocorasick_is_a_value_of_the_scanner_switch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_RULES_SCANNER", "AhoCorasick")
    assert not switched_off("LOOP_RULES_SCANNER")  # the scanner stays on, without Hyperscan
    assert unknown_settings() == []
    monkeypatch.setenv("LOOP_RULES_CACHE", "ahocorasick")
    (warning,) = unknown_settings()
    assert warning == "LOOP_RULES_CACHE='ahocorasick' is not one of off, 0, no, false, on, 1, yes, true; taken as on"

