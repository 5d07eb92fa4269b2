"""bench/peers.py's interleaved_ms, with a fake timer (no GPU, no torch): the order of the
calls, the split of the repetitions and what a drifting clock does to each entry's median."""
import contextlib
import importlib.util
import pathlib

_PEERS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers.py"
_spec = importlib.util.spec_from_file_location("peers", _PEERS)
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)


class DriftingTimer:
    """Every timed call costs the entry's base time times a clock factor that falls by `drift`
    per call (a GPU whose clock recovers over the run); records which entry ran when."""

    def __init__(self, base, drift):
        self.base, self.drift, self.calls, self.log = base, drift, 0, []

    def __call__(self, fn, reps):
        out = []
        for _ in range(reps):
            name = fn()
            self.log.append(name)
            out.append(self.base[name] * (1.0 - self.drift * self.calls))
            self.calls += 1
        return out


def entries_for(names, entered):
    def context(name):
        @contextlib.contextmanager
        def cm():
            entered.append(name)
            yield
        return cm
    return [(context(n), (lambda n=n: n)) for n in names]


def test_rounds_alternate_the_entries_and_split_the_repetitions():
    entered = []
    timer = DriftingTimer({"a": 1.0, "b": 1.0, "c": 1.0}, 0.0)
    peers.interleaved_ms(entries_for("abc", entered), reps=6, rounds=3, timer=timer)
    assert timer.log == list("aabbcc" * 3)
    assert entered == list("abc" * 3)  # each entry's context around its calls of a round


def test_one_round_is_one_entry_after_the_other():
    timer = DriftingTimer({"a": 1.0, "b": 2.0}, 0.0)
    done = []
    ms = peers.interleaved_ms(entries_for("ab", []), reps=4, rounds=1, timer=timer,
                              done=lambda i, m: done.append((i, m, len(timer.log))))
    assert timer.log == list("aaaabbbb")
    assert ms == [1.0, 2.0]
    assert done == [(0, 1.0, 4), (1, 2.0, 8)]  # reported as soon as each entry is timed


def test_alternating_rounds_cancel_a_drift_that_one_round_turns_into_a_ratio():
    base = {"a": 1.0, "b": 1.0}  # equal entries
    one = peers.interleaved_ms(entries_for("ab", []), reps=40, rounds=1, timer=DriftingTimer(base, 0.002))
    many = peers.interleaved_ms(entries_for("ab", []), reps=40, rounds=20, timer=DriftingTimer(base, 0.002))
    assert one[1] / one[0] < 0.93  # timed second, b looks ~8 % faster
    assert abs(many[1] / many[0] - 1.0) < 0.01


def test_reps_below_rounds_still_time_every_entry_each_round():
    timer = DriftingTimer({"a": 1.0}, 0.0)
    peers.interleaved_ms(entries_for("a", []), reps=2, rounds=5, timer=timer)
    assert timer.log == ["a"] * 5


def test_a_failing_entry_is_dropped_and_the_others_still_timed():
    calls = []

    def timer(fn, reps):
        name = fn()
        calls.append(name)
        if name == "b" and calls.count("b") == 2:
            raise RuntimeError("out of memory")
        return [1.0] * reps

    errors, done = [], []
    ms = peers.interleaved_ms(entries_for("abc", []), reps=3, rounds=3, timer=timer,
                              done=lambda i, m: done.append(i), failed=lambda i, e: errors.append((i, str(e))))
    assert calls == list("abc") + list("abc") + list("ac")  # b dropped after failing in round 2
    assert errors == [(1, "out of memory")]
    assert ms == [1.0, None, 1.0]
    assert done == [0, 2]


def test_without_a_failed_callback_the_error_propagates():
    def timer(fn, reps):
        raise RuntimeError("boom")

    try:
        peers.interleaved_ms(entries_for("a", []), reps=1, rounds=1, timer=timer)
    except RuntimeError as e:
        assert str(e) == "boom"
    else:
        raise AssertionError("expected the timer's error")


def test_queued_samples_time_depth_calls_between_two_events_and_divide():
    # A fake clock: each call advances it by 2 ms, each event reads it; the sample must be 2 ms
    # per call, every call between the two events, and the warm-up outside them.
    clock = [0.0]
    log = []

    def fn():
        clock[0] += 2.0
        log.append("call")

    def record():
        log.append("event")
        return clock[0]

    times = peers.time_samples_queued(fn, reps=3, warmup=2, depth=5,
                                      events=(record, lambda a, b: b - a, lambda: log.append("sync"),
                                              lambda: log.append("lead")))
    assert times == [2.0, 2.0, 2.0]
    assert log[:3] == ["call", "call", "sync"]
    # Each sample: the lead before its first event, then the calls between the two events.
    assert log[3:3 + 9] == ["lead", "event"] + ["call"] * 5 + ["event", "sync"]
    assert log.count("call") == 2 + 3 * 5
    assert log.count("lead") == 3
    # A sample of one call has no lead (as the C++ bench's): the call's host time stays in it.
    log.clear()
    peers.time_samples_queued(fn, reps=2, warmup=0, depth=1,
                              events=(record, lambda a, b: b - a, lambda: log.append("sync"),
                                      lambda: log.append("lead")))
    assert "lead" not in log and log.count("call") == 2


def test_stream_samples_follow_each_other_with_one_synchronisation():
    # --timing stream: one lead, then the samples' calls with one event between two samples and a
    # single synchronisation after the last; each sample is the span between consecutive events.
    clock = [0.0]
    log = []
    cost = iter([1.0] * 2 + [2.0] * 4 + [3.0] * 4 + [5.0] * 4)  # warm-up, then three samples

    def fn():
        clock[0] += next(cost)
        log.append("call")

    def record():
        log.append("event")
        return clock[0]

    times = peers.time_samples_queued(fn, reps=3, warmup=2, depth=4, train=True,
                                      events=(record, lambda a, b: b - a, lambda: log.append("sync"),
                                              lambda: log.append("lead")))
    assert times == [2.0, 3.0, 5.0]
    sample = ["call"] * 4 + ["event"]
    assert log == ["call", "call", "sync", "lead", "event"] + sample * 3 + ["sync"]
    # One call a sample: no lead, as in queued timing.
    log.clear()
    clock[0] = 0.0
    cost = iter([1.0] * 3)
    peers.time_samples_queued(fn, reps=3, warmup=0, depth=1, train=True,
                              events=(record, lambda a, b: b - a, lambda: log.append("sync"),
                                      lambda: log.append("lead")))
    assert log == ["sync", "event"] + ["call", "event"] * 3 + ["sync"]


def test_timing_option_picks_the_timer(monkeypatch):
    seen = []
    monkeypatch.setattr(peers, "time_samples_queued",
                        lambda fn, reps, depth, train: seen.append((reps, depth, train)) or [1.0])
    assert peers.timer_for("eager", 10) is peers.time_samples
    peers.timer_for("queued", 7)(None, 3)
    peers.timer_for("stream", 5)(None, 4)
    assert seen == [(3, 7, False), (4, 5, True)]


def test_settle_runs_before_each_entrys_timed_calls_inside_its_context():
    log = []

    def context(name):
        @contextlib.contextmanager
        def cm():
            log.append("enter " + name)
            yield
            log.append("exit " + name)
        return cm

    def timer(fn, reps):
        log.append("time " + fn())
        return [1.0] * reps

    entries = [(context(n), (lambda n=n: n)) for n in "ab"]
    peers.interleaved_ms(entries, reps=2, rounds=2, timer=timer, settle=lambda fn: log.append("settle " + fn()))
    one_round = ["enter a", "settle a", "time a", "exit a", "enter b", "settle b", "time b", "exit b"]
    assert log == one_round * 2
