#!/usr/bin/env python3
"""Host emulation of the sm90 batch-prefill kernel's synchronisation (src/cuda/sm90/batch/
prefill_kernel.cuh with sm90/common/kv_tile_schedule.cuh): mbarrier phases and parities, the
pingpong named barriers, the epilogue barriers and the producer's completion-tracked cp.async
arrivals, for random sequences of units (0..6 key tiles each) under random interleavings of the
actors. It checks that no interleaving deadlocks, that a consumer reads a K/V stage or Q only
after every producer thread's copy of it has landed, been announced and been fenced into the
async proxy by the reading warpgroup (the fence in take_turn), that the producer overwrites no
stage or Q still being read, and that the named barriers end balanced. Actors: the producer
warpgroup (its 128 threads run the same program; modelled as one actor arriving 128 times), the
memory system (lands the copies in flight in any order; a thread's cp.async.mbarrier.arrive.noinc
fires once all of that thread's earlier copies have landed, so the arrivals fire in issue order),
and the two consumer warpgroups (4 warps each; releases arrive once per warp).

  python3 scripts/emulate_batch_prefill_sm90.py [--runs 2000] [--seed 1] [--stages 3] [--break NAME]

--break reproduces a mistake the emulation must catch: 'no-q-empty' (the producer does not wait
for the consumers to release Q), 'early-arrive' (a plain arrive at issue instead of the
completion-tracked one: consumers would read copies still in flight), 'no-fence' (no proxy fence
between the full-barrier waits and the WGMMAs), 'q-first' is not a mistake but the step-1 order
(Q before the unit's first K tile), kept to show both orders are deadlock-free.
(Step 1's wait_group protocol, and its 'one-group' deadlock, are gone with the ninth session.)
"""
import argparse
import random
import sys

S = 3  # stages (--stages)


class Deadlock(Exception):
    pass


class Barrier:
    """An mbarrier: arrivals per phase; wait(parity) passes once the phase with that parity has
    completed (the phase before the first, parity 1, counts as completed)."""

    def __init__(self, name, count):
        self.name, self.count, self.pending, self.phase = name, count, count, 0

    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, f"{self.name}: more arrivals than expected in phase {self.phase}"
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity):
        # The phase with this parity that the waiter means is the last one with that parity
        # before (or at) the current one; it has completed iff the current phase's parity differs.
        return (self.phase & 1) != parity


class Named:
    """A named barrier of `count` threads (bar.sync waits, bar.arrive does not)."""

    def __init__(self, name, count):
        self.name, self.count, self.arrived, self.generation = name, count, 0, 0

    def arrive(self, n):
        self.arrived += n
        assert self.arrived <= self.count, f"{self.name}: over-arrival"
        if self.arrived == self.count:
            self.arrived = 0
            self.generation += 1


def kernel(units, brk, rng):
    q_full, q_empty = Barrier("q_full", 128), Barrier("q_empty", 2)
    k_full = [Barrier(f"k_full{s}", 128) for s in range(S)]
    v_full = [Barrier(f"v_full{s}", 128) for s in range(S)]
    k_empty = [Barrier(f"k_empty{s}", 8) for s in range(S)]
    v_empty = [Barrier(f"v_empty{s}", 8) for s in range(S)]
    turn = [Named("turn0", 256), Named("turn1", 256)]
    # Data model: what each buffer holds, (unit, tile) or ("Q", unit), and whether it has landed.
    buf = {("K", s): None for s in range(S)}
    buf.update({("V", s): None for s in range(S)})
    buf["Q"] = None
    in_use = {key: 0 for key in buf}
    # Copies in flight, in issue order: [key, landed, barrier to arrive on once it and every
    # earlier copy have landed].
    flight = []
    seen = [dict(), dict()]  # per warpgroup: buffer contents as of its last proxy fence

    def wait_bar(bar, parity):
        while not bar.passed(parity):
            yield ("wait", bar.name)

    def issue(key, content, bar):
        assert in_use[key] == 0, f"producer overwrites {key} holding {buf[key]} while a consumer reads it"
        buf[key] = (content, False)
        entry = [key, False, bar]
        flight.append(entry)
        if brk == "early-arrive":
            entry[2] = None
            bar.arrive(128)

    def memory():
        # Lands one copy in flight (any of them), then fires the arrivals whose copies and all
        # earlier ones have landed.
        while True:
            if flight:
                entry = rng.choice(flight)
                if not entry[1]:
                    entry[1] = True
                    c, _ = buf[entry[0]]
                    buf[entry[0]] = (c, True)
                while flight and flight[0][1]:
                    _, _, bar = flight.pop(0)
                    if bar is not None:
                        bar.arrive(128)
            yield ("step", None)

    def producer():
        it = 0
        for u, n_tiles in enumerate(units):
            def load_q():
                if brk != "no-q-empty":
                    yield from wait_bar(q_empty, (u & 1) ^ 1)
                issue("Q", ("Q", u), q_full)
            if n_tiles == 0 or brk == "q-first":
                yield from load_q()
            for i in range(n_tiles):
                stage = it % S
                parity = ((it // S) & 1) ^ 1
                yield from wait_bar(k_empty[stage], parity)
                issue(("K", stage), (u, i), k_full[stage])
                if i == 0 and brk != "q-first":
                    yield from load_q()
                yield from wait_bar(v_empty[stage], parity)
                issue(("V", stage), (u, i), v_full[stage])
                it += 1
                yield ("step", None)
            yield ("step", None)

    def consumer(c):
        def take_turn():
            if brk != "no-fence":  # fence.proxy.async: what has landed is visible to the WGMMAs
                seen[c].clear()
                seen[c].update({k: v for k, v in buf.items() if v is not None and v[1]})
            gen = turn[c].generation
            turn[c].arrive(128)
            while turn[c].generation == gen:
                yield ("wait", f"turn{c}")

        def pass_turn():
            turn[c ^ 1].arrive(128)

        def check(key, want):
            content, landed = buf[key]
            assert landed and content == want, f"wg{c} reads {key} = {buf[key]}, expected {want} landed"
            assert seen[c].get(key) == (want, True), f"wg{c} reads {key} = {want} not fenced after it landed"

        if c == 1:
            pass_turn()
        it = 0
        for u, n_tiles in enumerate(units):
            yield from wait_bar(q_full, u & 1)
            in_use["Q"] += 1
            if n_tiles > 0:
                # run_kv_tiles (the non-serial form), reads checked at issue time
                def qk(stage, tile):
                    check("Q", ("Q", u))
                    check(("K", stage), (u, tile))
                def pv(stage, tile):
                    check(("V", stage), (u, tile))
                yield from wait_bar(k_full[it % S], (it // S) & 1)
                yield from take_turn()
                qk(it % S, 0)
                in_use[("K", it % S)] += 1
                pass_turn()
                yield ("step", None)
                in_use[("K", it % S)] -= 1
                k_empty[it % S].arrive(4)  # 4 warps of this warpgroup
                for i in range(1, n_tiles):
                    prev = it % S
                    it += 1
                    stage = it % S
                    yield from wait_bar(k_full[stage], (it // S) & 1)
                    yield from wait_bar(v_full[prev], ((it - 1) // S) & 1)
                    yield from take_turn()
                    qk(stage, i)
                    pv(prev, i - 1)
                    in_use[("K", stage)] += 1
                    in_use[("V", prev)] += 1
                    pass_turn()
                    yield ("step", None)
                    in_use[("K", stage)] -= 1
                    k_empty[stage].arrive(4)
                    yield ("step", None)
                    in_use[("V", prev)] -= 1
                    v_empty[prev].arrive(4)
                last = it % S
                yield from wait_bar(v_full[last], (it // S) & 1)
                yield from take_turn()
                pv(last, n_tiles - 1)
                in_use[("V", last)] += 1
                pass_turn()
                yield ("step", None)
                in_use[("V", last)] -= 1
                v_empty[last].arrive(4)
                it += 1
            in_use["Q"] -= 1
            # epilogue barrier (its own 128 threads), then thread 0 releases Q
            q_empty.arrive(1)
            yield ("step", None)
        if c == 0:
            yield from take_turn()

    actors = {"producer": producer(), "wg0": consumer(0), "wg1": consumer(1)}
    mem = memory()
    blocked = {}
    while actors:
        names = list(actors) + ["memory"]
        rng.shuffle(names)
        progressed = False
        for name in names:
            if name == "memory":
                if flight:
                    next(mem)
                    progressed = True
                    break
                continue
            gen = actors[name]
            try:
                ev = next(gen)
            except StopIteration:
                del actors[name]
                progressed = True
                break
            if ev[0] == "wait":
                blocked[name] = ev[1]
                continue
            blocked.pop(name, None)
            progressed = True
            break
        if not progressed:
            # Every actor's last step was a failed wait and nothing is in flight: let each
            # re-check once more.
            again = False
            for name in list(actors):
                ev = next(actors[name], None)
                if ev is None:
                    del actors[name]
                    again = True
                elif ev[0] != "wait":
                    again = True
            if not again:
                raise Deadlock("all waiting: " + ", ".join(f"{n} on {b}" for n, b in blocked.items()))
    assert not flight or brk == "early-arrive", "copies still in flight at the end"
    for t in turn:
        assert t.arrived == 0, f"{t.name} unbalanced at the end ({t.arrived} arrivals left)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--break", dest="brk", choices=["no-q-empty", "early-arrive", "no-fence", "q-first"], default=None)
    a = ap.parse_args()
    global S
    S = a.stages
    rng = random.Random(a.seed)
    failures = 0
    for r in range(a.runs):
        units = [rng.choice([0, 1, 1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 6))]
        try:
            kernel(units, a.brk, rng)
        except (Deadlock, AssertionError) as e:
            failures += 1
            if failures <= 3:
                print(f"run {r}, units {units}: {type(e).__name__}: {e}")
    print(f"{a.runs} runs, {S} stages, {failures} failures" + (f" (--break {a.brk})" if a.brk else ""))
    if a.brk == "q-first":  # an alternative order, not a mistake: it must pass
        return 1 if failures else 0
    return 1 if failures and not a.brk else (0 if failures or not a.brk else 1)


if __name__ == "__main__":
    sys.exit(main())
