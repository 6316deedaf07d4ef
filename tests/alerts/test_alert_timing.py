"""The group timers, the dedup stage and the retry backoff as pure functions with an injected clock
(seconds as plain numbers): Alertmanager's aggregation group and ``DedupStage.needsUpdate``.

    t=0 a, b fire ─ group_wait ─▶ t=30 [a b] ─ 5m ─▶ 330 (c fired at 100) [a b c] ─ 5m ─▶ 630 nothing …
                                                      … 4h after 330 the first tick repeats [a b c]
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabricmon.alerts import timing
from fabricmon.alerts.timing import Flush, GroupState, GroupTiming

T = GroupTiming()  # the defaults: 30 s, 5 m, 4 h, send_resolved
F = frozenset


class Group:
    """One group driven by a clock the test sets: what it sent, and when."""

    def __init__(self, tm: GroupTiming = T) -> None:
        self.tm = tm
        self.state = GroupState()
        self.firing: set[str] = set()
        self.resolved: set[str] = set()
        self.sent: list[tuple[float, tuple[str, ...]]] = []

    def fire(self, fp: str, now: float) -> None:
        self.firing.add(fp)
        self.resolved.discard(fp)
        self.state = timing.admit(self.state, now, self.tm)

    def resolve(self, fp: str) -> None:
        self.firing.discard(fp)
        self.resolved.add(fp)

    def run_until(self, end: float) -> None:
        """Every tick of the group's timer up to ``end``."""
        while self.state.next_flush_s is not None and self.state.next_flush_s <= end:
            now = self.state.next_flush_s
            done: Flush = timing.flush(self.state, F(self.firing), F(self.resolved), now, self.tm)
            if done.send:
                self.sent.append((now, done.send))
            self.resolved -= done.drop
            self.state = done.state


def test_defaults_are_alertmanagers() -> None:
    assert (T.group_by, T.group_wait_s, T.group_interval_s, T.repeat_interval_s) == (
        ("fabric", "alertname"), 30.0, 300.0, 4 * 3600.0)
    assert T.problems() == {}


def test_two_alerts_of_a_group_are_one_notification_after_group_wait() -> None:
    g = Group()
    g.fire("a", 0)
    g.fire("b", 12)  # inside group_wait: joins the first notification
    g.run_until(29.9)
    assert g.sent == []
    g.run_until(30)
    assert g.sent == [(30, ("a", "b"))]


def test_a_new_alert_waits_for_group_interval_and_an_unchanged_group_for_repeat_interval() -> None:
    g = Group()
    g.fire("a", 0)
    g.run_until(30)
    g.fire("c", 100)  # the group is ticking: the change goes out at its next tick, not before
    g.run_until(329)
    assert g.sent == [(30, ("a",))]
    g.run_until(330)
    assert g.sent[-1] == (330, ("a", "c"))
    g.run_until(330 + 4 * 3600 - 1)
    assert len(g.sent) == 2  # unchanged: ticks every 5 min send nothing
    g.run_until(330 + 4 * 3600 + 300)
    (when, alerts) = g.sent[-1]
    assert alerts == ("a", "c") and 330 + 4 * 3600 <= when < 330 + 4 * 3600 + 300  # first tick after 4 h


def test_resolution_is_sent_with_send_resolved_and_the_group_stops() -> None:
    g = Group()
    g.fire("a", 0)
    g.fire("b", 0)
    g.run_until(30)
    g.resolve("a")
    g.run_until(330)
    assert g.sent[-1] == (330, ("a", "b"))  # b firing, a resolved: one notification with both
    g.resolve("b")
    g.run_until(630)
    assert g.sent[-1] == (630, ("b",)) and g.state.next_flush_s is None
    assert g.resolved == set()  # resolved alerts left the group with their flush


def test_without_send_resolved_a_partial_resolution_is_not_news_but_the_last_one_is_logged() -> None:
    g = Group(GroupTiming(send_resolved=False))
    g.fire("a", 0)
    g.fire("b", 0)
    g.run_until(30)
    g.resolve("a")
    g.run_until(330)
    assert len(g.sent) == 1  # firing {b} ⊆ {a, b}: nothing new
    g.resolve("b")
    g.run_until(630)
    assert len(g.sent) == 1  # all resolved: logged (the log forgets a and b), not sent
    assert g.state.next_flush_s is None and g.state.notified_firing == F()


def test_alerts_that_fire_and_resolve_between_ticks_are_never_sent() -> None:
    g = Group()
    g.fire("a", 0)
    g.resolve("a")
    g.run_until(30)
    assert g.sent == [] and g.state.next_flush_s is None  # nothing the receiver knew of


def test_an_emptied_group_starts_a_new_group_wait() -> None:
    g = Group()
    g.fire("a", 0)
    g.run_until(30)
    g.resolve("a")
    g.run_until(330)
    g.fire("a", 1000)
    g.run_until(1029)
    assert len(g.sent) == 2
    g.run_until(1030)
    assert g.sent[-1] == (1030, ("a",))


def test_admit_never_moves_a_ticking_timer() -> None:
    s = timing.admit(GroupState(), 5, T)
    assert s.next_flush_s == 35
    assert timing.admit(s, 20, T) == s


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("30s", 30.0), ("5m", 300.0), ("4h", 14400.0), ("1h30m", 5400.0), ("1s500ms", 1.5),
    ("2d", 172800.0), ("1w", 604800.0), ("1y", 365 * 86400.0), (" 10s ", 10.0)])
def test_durations_are_alertmanagers(text: str, seconds: float) -> None:
    assert timing.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "5 minutes", "1.5s", "-5s", "5m1h", "1x", "s"])
def test_bad_durations_are_refused_with_the_form_to_use(text: str) -> None:
    with pytest.raises(ValueError, match="30s, 5m, 4h"):
        timing.parse_duration(text)


@given(st.integers(0, 10 * 365 * 86400 * 1000))
def test_format_and_parse_are_inverse(ms: int) -> None:
    assert timing.parse_duration(timing.format_duration(ms / 1000)) == pytest.approx(ms / 1000)


def test_group_by_checks() -> None:
    assert timing.clean_group_by(["fabric", " alertname ", ""]) == ("fabric", "alertname")
    assert timing.clean_group_by(["..."]) == ("...",)
    with pytest.raises(ValueError, match="unknown label 'severity'"):
        timing.clean_group_by(["severity"])
    with pytest.raises(ValueError, match="cannot be combined"):
        timing.clean_group_by(["...", "fabric"])
    with pytest.raises(ValueError, match="twice"):
        timing.clean_group_by(["fabric", "fabric"])


def test_problems_name_the_field() -> None:
    bad = GroupTiming(group_wait_s=-1, group_interval_s=0, repeat_interval_s=float("inf"))
    assert bad.problems() == {
        "group_wait_s": "must be a duration of 0 or more",
        "group_interval_s": "group_interval cannot be zero",
        "repeat_interval_s": "must be a duration of 0 or more",
    }
    assert GroupTiming(group_wait_s=0).problems() == {}
    assert "at most" in GroupTiming(repeat_interval_s=31 * 86400.0).problems()["repeat_interval_s"]


def test_group_labels_and_keys() -> None:
    labels = {"alertname": "incast", "fabric": "su1", "scope": "leaf-r0:Ethernet1"}
    assert timing.group_labels(labels, ("fabric", "alertname")) == {"alertname": "incast", "fabric": "su1"}
    assert timing.group_labels(labels, ("run",)) == {"run": ""}  # a missing label is empty
    assert timing.group_labels(labels, ()) == {}  # one group for everything
    assert timing.group_labels(labels, ("...",)) == labels
    assert timing.group_key({"fabric": "su1", "alertname": "incast"}) == '{}:{alertname="incast", fabric="su1"}'
    assert timing.group_id({"a": "1"}) != timing.group_id({"a": "2"})


@given(st.integers(1, 40), st.floats(0, 1, exclude_max=True))
def test_full_jitter_stays_within_its_exponential_capped_bound(attempt: int, u: float) -> None:
    bound = min(300.0, 5.0 * 2 ** (attempt - 1))
    assert timing.retry_bound_s(attempt, 5.0, 300.0) == bound
    assert 0.0 <= timing.retry_delay_s(attempt, 5.0, 300.0, lambda: u) <= bound


def test_jitter_source_decides_where_in_the_bound() -> None:
    assert timing.retry_delay_s(1, 5.0, 300.0, lambda: 0.0) == 0.0
    assert timing.retry_delay_s(3, 5.0, 300.0, lambda: 0.5) == 10.0
    assert timing.retry_delay_s(30, 5.0, 300.0, lambda: 0.999) == pytest.approx(299.7)
