"""Tests of the sm90 forward's protocol model (sm90_protocol_model.py beside this file, which says
what it models and checks): random schedules of every instance, and each instance's deliberate
mistakes, which must fail the model. pytest (its default prepend import mode) puts this folder
on sys.path, as for naive.py, so the model imports by its name from the repo root or anywhere."""

import random

import pytest

from sm90_protocol_model import (OWN_MUTATIONS, OWN_TURN_MUTATIONS, SERIAL_MUTATIONS, TAIL_MUTATIONS, Deadlock,
                                 masked_own_counts, run, turn_own_counts)


@pytest.mark.parametrize("seed", range(300))
def test_protocol_random_schedule(seed):
    rnd = random.Random(seed)
    stages = rnd.choice([2, 3, 4])
    tiles = rnd.randint(1, 6)
    lens = [rnd.choice([0, 1, 2, 3, 5]) for _ in range(tiles)]
    fp8 = rnd.random() < 0.4
    # Three consumer warpgroups: the bf16/fp16 head_dim 64 instances and fp8 head_dim 128.
    warpgroups = 2 if rnd.random() < 0.5 else 3
    # Two Q buffers where shared memory allows (d64, d128 masked and unmasked, fp8 d128).
    q_buffers = rnd.choice([1, 2])
    run(tiles, lambda t: lens[t], stages, seed, fp8=fp8, W=warpgroups, QB=q_buffers)
    # The forward's order: no turn for a tile's first Q K^T and last P V (the batch prefill keeps
    # them).
    run(tiles, lambda t: lens[t], stages, seed + 3333, fp8=fp8, W=warpgroups, QB=q_buffers, turns_at_ends=False,
        defer_q_release=q_buffers == 2)
    # FP8 with V^T loaded by TMA from the pass's workspace (fp8_v_transpose.h).
    run(tiles, lambda t: lens[t], stages, seed + 7777, fp8=True, W=warpgroups, QB=q_buffers, vt_global=True)
    # The V^T-only instance (FP8 d256: two consumer warpgroups, two Q buffers): no transposers.
    run(tiles, lambda t: lens[t], stages, seed + 9999, fp8=True, W=2, QB=q_buffers, vt_global=True, transposers=False)


def _tail_case(seed, min_tiles=1):
    rnd = random.Random(seed)
    tiles = rnd.randint(min_tiles, 10)
    lens = [rnd.randint(0, 10) for _ in range(tiles)]
    return tiles, (lambda t: lens[t])


@pytest.mark.parametrize("seed", range(300))
def test_tail_rows_random_schedule(seed):
    # The tail-row instance: three consumer warpgroups over a ring of 4 stages, several tail tiles
    # per CTA (a walk of 1..10), 0..10 K/V tiles each; also with two warpgroups, should the
    # instance be reused with them.
    tiles, lens = _tail_case(seed)
    run(tiles, lens, 4, seed, W=3, QB=2, tail=True)
    run(tiles, lens, 4, seed + 5555, W=2, QB=2, tail=True)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_tail_rows_ring_smaller_than_shares(stages):
    # run_kv_share's static_assert S >= kWarpgroups is for speed (each share's tile in the ring
    # at once), not for progress: a smaller ring neither deadlocks nor races.
    for seed in range(20):
        tiles, lens = _tail_case(1000 + seed)
        run(tiles, lens, stages, seed, W=3, QB=2, tail=True)


@pytest.mark.parametrize("mutation", sorted(TAIL_MUTATIONS))
def test_tail_mutation_fails(mutation):
    # Each deliberate mistake fails the model, for the reason TAIL_MUTATIONS gives, on every
    # schedule tried (walks of 3..10 tail tiles, three warpgroups or two), or where it needs a
    # particular interleaving on most of them.
    seen = []
    for seed in range(12):
        tiles, lens = _tail_case(seed, min_tiles=3)
        W = 3 if seed % 3 else 2
        seen.append(_outcome(lambda: run(tiles, lens, 4, seed, W=W, QB=2, tail=True, mutation=mutation)))
    _expect_caught(mutation, seen, *TAIL_MUTATIONS[mutation])


def _outcome(schedule):
    """What one mutated schedule did: "deadlock", the failed check's message, or None (passed)."""
    try:
        schedule()
    except Deadlock:
        return "deadlock"
    except AssertionError as e:
        return str(e)
    return None


def _expect_caught(mutation, seen, expect, racy):
    # Every schedule fails (two thirds where the mistake needs a particular interleaving), each
    # with one of the expected messages.
    failed = [m for m in seen if m is not None]
    assert len(failed) >= (len(seen) * 2 // 3 if racy else len(seen)), (mutation, seen)
    assert all(any(frag in m for frag in expect.split("|")) for m in failed), (mutation, seen)


@pytest.mark.parametrize("defer", [False, True])
def test_q_release_without_store_wait_fails(defer):
    # A Q buffer given back before its O store has read it: the producer's next Q lands on the
    # rows the store still has to read, on some schedules (two Q buffers, deferred or not).
    failed = []
    for seed in range(40):
        rnd = random.Random(seed)
        tiles = rnd.randint(3, 6)
        lens = [rnd.choice([1, 2, 3]) for _ in range(tiles)]
        try:
            run(tiles, lambda t: lens[t], 2, seed, W=2, QB=2, turns_at_ends=False, defer_q_release=defer,
                store_wait=False)
        except AssertionError as e:
            assert "O overwritten before its store read it" in str(e), str(e)
            failed.append(seed)
    assert failed, "the release without the store's read wait was never caught"


def _own_case(seed, min_tiles=1, min_len=0):
    rnd = random.Random(seed)
    tiles = rnd.randint(min_tiles, 8)
    lens = [rnd.randint(min_len, 6) for _ in range(tiles)]
    return tiles, (lambda t: lens[t])


def test_own_counts_cover_the_cases():
    # The random schedules below meet tiles without K/V tiles, warpgroups that compute none of a
    # tile's K/V tiles (and skip them all), last warpgroups short of the tile's end, and rows past
    # the sequence after live ones.
    seen = set()
    for seed in range(300):
        tiles, lens = _own_case(seed)
        orng = random.Random(seed + 424242)  # as run() draws them
        for t in range(tiles):
            n = lens(t)
            m = masked_own_counts(orng, n, 3)
            seen.add("no K/V tile" if n == 0 else None)
            seen.add("skips all" if n > 0 and 0 in m else None)
            seen.add("last short" if m[-1] < n else None)
            seen.add("dead after live" if m[0] > 0 and m[-1] == 0 else None)
            seen.add("uneven" if len(set(m)) == 3 else None)
    assert seen >= {"no K/V tile", "skips all", "last short", "dead after live", "uneven"}, seen


@pytest.mark.parametrize("seed", range(300))
def test_own_diagonals_random_schedule(seed):
    # The own-diagonal instance: three warpgroups, two Q buffers, a ring of 4 stages; walks of
    # 1..8 tiles of 0..6 K/V tiles, own counts as the masks give them; and any counts at all (the
    # protocol does not rely on their order).
    tiles, lens = _own_case(seed)
    run(tiles, lens, 4, seed, W=3, QB=2, own_diag=True)
    rnd = random.Random(seed + 1)
    table = [[rnd.randint(0, lens(t)) for _ in range(3)] for t in range(tiles)]
    run(tiles, lens, 4, seed + 4444, W=3, QB=2, own_diag=True, own_of=lambda t, c: table[t][c])


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_own_diagonals_small_ring(stages):
    # Nothing in skip_kv_tiles or the warpgroups' drift apart needs a ring of 4: smaller rings
    # neither deadlock nor race; nor does one Q buffer (a Q barrier pair per warpgroup).
    for seed in range(40):
        tiles, lens = _own_case(2000 + seed)
        run(tiles, lens, stages, seed, W=3, QB=2, own_diag=True)
        run(tiles, lens, stages, seed + 6666, W=3, QB=1, own_diag=True)


@pytest.mark.parametrize("counts", ["none", "all", "first", "last"])
def test_own_diagonals_extremes(counts):
    # No warpgroup computes anything (every tile only given back), every warpgroup every tile
    # (the main instance's schedule without turns), only the first, only the last.
    own = {"none": lambda n, c: 0, "all": lambda n, c: n, "first": lambda n, c: n if c == 0 else 0,
           "last": lambda n, c: n if c == 2 else 0}[counts]
    for seed in range(20):
        tiles, lens = _own_case(3000 + seed)
        run(tiles, lens, 4, seed, W=3, QB=2, own_diag=True, own_of=lambda t, c: own(lens(t), c))


@pytest.mark.parametrize("mutation", sorted(OWN_MUTATIONS))
def test_own_mutation_fails(mutation):
    # Each deliberate mistake fails the model, for the reason OWN_MUTATIONS gives, on every
    # schedule tried, or where it needs a particular interleaving on most of them. Counts as the
    # masks give them, with the first tile's at 0, 1 and all of its (>= 2) K/V tiles: a
    # warpgroup that skips them all, and unequal turn counts.
    seen = []
    for seed in range(12):
        tiles, lens = _own_case(seed, min_tiles=3, min_len=2)
        orng = random.Random(seed)
        table = [[0, 1, lens(0)]] + [masked_own_counts(orng, lens(t), 3) for t in range(1, tiles)]
        seen.append(_outcome(lambda: run(tiles, lens, 4, seed, W=3, QB=2, own_diag=True,
                                         own_of=lambda t, c: table[t][c], mutation=mutation)))
    _expect_caught(mutation, seen, *OWN_MUTATIONS[mutation])


# ---- the own diagonals with the turns kept (masked 16-bit head_dim 256: two warpgroups, one Q
# buffer, a ring of 2 stages) ----

def _own_turns_case(seed, S, W=2, within_reach=True, min_tiles=1):
    """A walk of 1..8 tiles of 0..6 K/V tiles with own counts as the masks give them
    (turn_own_counts); within_reach: a tile with a warpgroup past the sequence (n_own 0, so
    n_run 1 and n - 1 empty turns while another warpgroup computes) has at most S + 1 K/V tiles,
    the most the first build's order got through (test_own_turns_past_ring_reach); the kernel's
    interleaved order has no such limit (test_own_turns_any_counts)."""
    rnd = random.Random(seed)
    tiles = rnd.randint(min_tiles, 8)
    lens, table = [], []
    for _ in range(tiles):
        n = rnd.randint(0, 6)
        m = turn_own_counts(rnd, n, W)
        if within_reach and m[-1] == 0 and n > S + 1:
            cut = n - rnd.randint(1, S + 1)
            n, m = n - cut, [max(0, x - cut) for x in m]
        lens.append(n)
        table.append(m)
    return tiles, (lambda t: lens[t]), (lambda t, c: table[t][c])


def test_own_turn_counts_cover_the_cases():
    # The random schedules below meet tiles without K/V tiles, the first warpgroup one tile short
    # of the second (the causal diagonal), equal counts, and the second warpgroup past the
    # sequence (0, its empty turns taken while the first computes).
    seen = set()
    for seed in range(300):
        tiles, lens, own = _own_turns_case(seed, 2)
        for t in range(tiles):
            n, m = lens(t), [own(t, 0), own(t, 1)]
            seen.add("no K/V tile" if n == 0 else None)
            seen.add("one fewer" if n > 1 and m == [n - 1, n] else None)
            seen.add("equal" if n > 1 and m == [n, n] else None)
            seen.add("second past the sequence" if n > 1 and m == [n, 0] else None)
            seen.add("first zero" if n > 0 and m[0] == 0 and m[1] > 0 else None)
    assert seen >= {"no K/V tile", "one fewer", "equal", "second past the sequence", "first zero"}, seen


@pytest.mark.parametrize("seed", range(300))
def test_own_turns_random_schedule(seed):
    # The instance as it runs: two warpgroups, one Q buffer, a ring of 2; walks of 1..8 tiles of
    # 0..6 K/V tiles, counts as the masks give them (within the ring's reach); and any counts
    # whose difference per tile is at most one, a warpgroup's 0 included.
    tiles, lens, own = _own_turns_case(seed, 2)
    run(tiles, lens, 2, seed, W=2, QB=1, own_diag=True, own_turns=True, own_of=own)
    rnd = random.Random(seed + 1)
    table = []
    for t in range(tiles):
        hi = rnd.randint(0, lens(t))
        table.append([max(0, hi - rnd.randint(0, 1)), hi][:: rnd.choice([1, -1])])
    run(tiles, lens, 2, seed + 4444, W=2, QB=1, own_diag=True, own_turns=True, own_of=lambda t, c: table[t][c])


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_own_turns_small_ring(stages):
    # Rings of 1 and 3 stages as of 2; within the ring's reach the first build's orders (every
    # empty turn before the last P V, or after it) are correct too; three warpgroups with their
    # turns (the round robin through 0, 1, 2), one Q buffer or two.
    for seed in range(30):
        tiles, lens, own = _own_turns_case(5000 + seed, stages)
        run(tiles, lens, stages, seed, W=2, QB=1, own_diag=True, own_turns=True, own_of=own)
        run(tiles, lens, stages, seed + 1111, W=2, QB=1, own_diag=True, own_turns=True, own_of=own,
            extra_turns_at=("after_pv", "before_pv")[seed % 2])
        tiles, lens, own = _own_turns_case(6000 + seed, stages, W=3)
        run(tiles, lens, stages, seed + 2222, W=3, QB=1 + seed % 2, own_diag=True, own_turns=True, own_of=own)


@pytest.mark.parametrize("counts", ["one fewer", "equal", "second zero", "first zero", "both zero"])
def test_own_turns_counts(counts):
    # Every tile of the walk with the same pattern: the first warpgroup a tile short of the second
    # (the causal diagonal: one empty turn), equal counts (no empty turn), the second past the
    # sequence (n_run 1, n - 1 empty turns while the first computes; within the ring's reach), the
    # first without own tiles (the second computing), neither (both compute tile 0 only and take
    # every turn empty).
    own = {"one fewer": lambda n, c: n - 1 + c, "equal": lambda n, c: n, "second zero": lambda n, c: n * (c == 0),
           "first zero": lambda n, c: n * c, "both zero": lambda n, c: 0}[counts]
    reach = counts in ("second zero", "first zero")
    for S in (1, 2, 3):
        for seed in range(10):
            rnd = random.Random(seed)
            lens = [rnd.randint(0, S + 1 if reach else 6) for _ in range(rnd.randint(1, 6))]
            run(len(lens), lambda t: lens[t], S, seed, W=2, QB=1, own_diag=True, own_turns=True,
                own_of=lambda t, c: own(lens[t], c))


@pytest.mark.parametrize("extra_turns_at", ["before_pv", "after_pv"])
def test_own_turns_past_ring_reach(extra_turns_at):
    # Found by the model (thirty-second session) in the first build, which took every empty turn
    # at once: a warpgroup that computes n_run tiles of n takes its n - n_run empty turns while it
    # still holds its ring positions n_run - 1 .. n - 1 (the last V, before or after its P V, and
    # the skipped tiles, given back only after the turns). The producer cannot refill past them
    # (K of position n_run + S - 1 at most), so the other warpgroup's step n_run + S cannot start,
    # and the empty turn after it never comes: with the second warpgroup past the sequence
    # (counts [n, 0], a ragged causal tile of 64 or fewer rows, e.g. 17 queries on 300 keys, or
    # 700 on 300 (its last tile): n = 5) every schedule deadlocks from n = S + 2 (4 on the ring
    # of 2). The kernel's order (interleaved) passes the same schedules.
    _past_ring_reach(extra_turns_at)


def _past_ring_reach(extra_turns_at, serial=False):
    for S in (1, 2, 3):
        for seed in range(5):
            lens = [S + 2 + seed % 3]
            with pytest.raises(Deadlock):
                run(1, lambda t: lens[t], S, seed, W=2, QB=1, own_diag=True, own_turns=True,
                    own_of=lambda t, c: lens[t] * (c == 0), extra_turns_at=extra_turns_at, serial=serial)
            run(1, lambda t: lens[t], S, seed, W=2, QB=1, own_diag=True, own_turns=True,
                own_of=lambda t, c: lens[t] * (c == 0), serial=serial)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_own_turns_any_counts(stages):
    # The kernel's order: the first empty turn before the last P V (the causal diagonal's one),
    # each further one just before the next skipped tile is given back, so a warpgroup holds no
    # ring position past the other's next turn. No deadlock with any counts at all (the finding's
    # included), two warpgroups or three.
    for seed in range(30):
        tiles, lens, own = _own_turns_case(7000 + seed, stages, within_reach=False)
        run(tiles, lens, stages, seed, W=2, QB=1, own_diag=True, own_turns=True, own_of=own)
        rnd = random.Random(seed)
        W = rnd.choice([2, 3])
        table = [[rnd.randint(0, lens(t)) for _ in range(W)] for t in range(tiles)]
        run(tiles, lens, stages, seed + 3333, W=W, QB=1, own_diag=True, own_turns=True,
            own_of=lambda t, c: table[t][c])


@pytest.mark.parametrize("mutation", sorted(OWN_TURN_MUTATIONS))
def test_own_turn_mutation_fails(mutation):
    # Each deliberate mistake fails the model, for the reason OWN_TURN_MUTATIONS gives, on every
    # schedule tried: walks of 3..8 tiles on the ring of 2 whose first tiles are the causal
    # diagonal's [n - 1, n] (n >= 2), the second warpgroup past the sequence [k, 0] (2 <= k <= 3:
    # within the ring's reach) and neither warpgroup with own tiles [0, 0].
    _expect_caught(mutation, _own_turn_mutation_seen(mutation), *OWN_TURN_MUTATIONS[mutation])


def _own_turn_mutation_seen(mutation, serial=False):
    seen = []
    for seed in range(12):
        rnd = random.Random(seed)
        tiles, lens, own = _own_turns_case(seed, 2, min_tiles=3)
        n, k = rnd.randint(2, 6), rnd.randint(2, 3)
        first = [(n, [n - 1, n]), (k, [k, 0]), (rnd.randint(1, 6), [0, 0])]
        rnd.shuffle(first)
        lens_l = [x[0] for x in first] + [lens(t) for t in range(3, tiles)]
        table = [x[1] for x in first] + [[own(t, 0), own(t, 1)] for t in range(3, tiles)]
        seen.append(_outcome(lambda: run(tiles, lambda t: lens_l[t], 2, seed, W=2, QB=1, own_diag=True, own_turns=True,
                                         own_of=lambda t, c: table[t][c], mutation=mutation, serial=serial)))
    return seen


@pytest.mark.parametrize("seed", range(200))
def test_own_diagonals_serial_random_schedule(seed):
    # The causal 16-bit head_dim 128 instance on three warpgroups (kThreeWarpgroupCausalMinKeysD128):
    # own diagonals, no turns, two Q buffers, run_kv_tiles' serial schedule (kSerialGemms), over
    # its ring of 2 stages and rings of 1 and 3; own counts as the masks give them, and any counts.
    tiles, lens = _own_case(seed)
    rnd = random.Random(seed + 1)
    table = [[rnd.randint(0, lens(t)) for _ in range(3)] for t in range(tiles)]
    for stages in (1, 2, 3):
        run(tiles, lens, stages, seed + 100 * stages, W=3, QB=2, own_diag=True, serial=True)
        run(tiles, lens, stages, seed + 100 * stages + 4444, W=3, QB=2, own_diag=True, serial=True,
            own_of=lambda t, c: table[t][c])


@pytest.mark.parametrize("seed", range(200))
def test_serial_with_turns_random_schedule(seed):
    # The serial schedule with the pingpong turns (the FP8 instances but the V^T-only head_dim 256
    # one run it): two or three warpgroups, one or two Q buffers, 16-bit or FP8 (V^T transposed by
    # warps or loaded by TMA), turns at a tile's ends or not (with the deferred Q release where
    # two Q buffers allow it).
    rnd = random.Random(seed)
    stages = rnd.choice([1, 2, 3, 4])
    tiles = rnd.randint(1, 6)
    lens = [rnd.choice([0, 1, 2, 3, 5]) for _ in range(tiles)]
    fp8 = rnd.random() < 0.5
    vt_global = fp8 and rnd.random() < 0.5
    warpgroups = rnd.choice([2, 3])
    q_buffers = rnd.choice([1, 2])
    ends = rnd.random() < 0.5
    run(tiles, lambda t: lens[t], stages, seed, fp8=fp8, W=warpgroups, QB=q_buffers, vt_global=vt_global,
        turns_at_ends=ends, defer_q_release=not ends and q_buffers == 2, serial=True)


@pytest.mark.parametrize("mutation", sorted(SERIAL_MUTATIONS))
def test_serial_mutation_fails(mutation):
    # Each deliberate mistake fails the model, for the reason SERIAL_MUTATIONS gives, on most
    # schedules of the head_dim 128 instance (own diagonals, serial, a ring of 2), walks of 3..8
    # tiles of 2..6 K/V tiles, the first tile computed in full by every warpgroup (steady-state steps).
    seen = []
    for seed in range(12):
        tiles, lens = _own_case(seed, min_tiles=3, min_len=2)
        orng = random.Random(seed)
        table = [[lens(0)] * 3] + [masked_own_counts(orng, lens(t), 3) for t in range(1, tiles)]
        seen.append(_outcome(lambda: run(tiles, lens, 2, seed, W=3, QB=2, own_diag=True, serial=True,
                                         own_of=lambda t, c: table[t][c], mutation=mutation)))
    _expect_caught(mutation, seen, *SERIAL_MUTATIONS[mutation])



# ---- the serial schedule with the turns kept at own diagonals: no instance runs it (masked 16-bit
# head_dim 256 is overlapped), but kernel.cuh hands Tr::kSerialGemms to that path as to the others
# ----

@pytest.mark.parametrize("seed", range(100))
def test_own_turns_serial_random_schedule(seed):
    # As test_own_turns_random_schedule, serial: the turns a tile (n - 1 each), the stages read by
    # a wgmma until its wait; rings of 1..3, two warpgroups within the ring's reach, and any
    # counts on two or three (the kernel's interleaved order).
    for S in (1, 2, 3):
        tiles, lens, own = _own_turns_case(seed + 100 * S, S)
        run(tiles, lens, S, seed, W=2, QB=1, own_diag=True, own_turns=True, own_of=own, serial=True)
        tiles, lens, own = _own_turns_case(seed + 100 * S + 50, S, W=3, within_reach=False)
        run(tiles, lens, S, seed + 4444, W=3, QB=1 + seed % 2, own_diag=True, own_turns=True, own_of=own,
            serial=True)


@pytest.mark.parametrize("extra_turns_at", ["before_pv", "after_pv"])
def test_own_turns_serial_past_ring_reach(extra_turns_at):
    # The first build's orders deadlock past the ring's reach serial too (the positions held
    # across the empty turns, not the overlap, cause it); the kernel's passes.
    _past_ring_reach(extra_turns_at, serial=True)


@pytest.mark.parametrize("mutation", sorted(OWN_TURN_MUTATIONS))
def test_own_turn_mutation_fails_serial(mutation):
    # The turn mistakes caught serial too, on the schedules of test_own_turn_mutation_fails.
    _expect_caught(mutation, _own_turn_mutation_seen(mutation, serial=True), *OWN_TURN_MUTATIONS[mutation])


@pytest.mark.parametrize("mutation", sorted(SERIAL_MUTATIONS))
def test_serial_mutation_fails_with_turns(mutation):
    # The serial mistakes with the turns kept (two warpgroups, one Q buffer, a ring of 2), the
    # first tile computed in full by both: the turns hold the other warpgroup's release back, so a
    # stage is refilled under the wgmma on most schedules, not on every one.
    seen = []
    for seed in range(12):
        tiles, lens, own = _own_turns_case(seed, 2, min_tiles=3)
        lens_l = [max(2, lens(0))] + [lens(t) for t in range(1, tiles)]
        table = [[lens_l[0]] * 2] + [[own(t, 0), own(t, 1)] for t in range(1, tiles)]
        seen.append(_outcome(lambda: run(tiles, lambda t: lens_l[t], 2, seed, W=2, QB=1, own_diag=True, own_turns=True,
                                         own_of=lambda t, c: table[t][c], mutation=mutation, serial=True)))
    _expect_caught(mutation, seen, SERIAL_MUTATIONS[mutation][0], True)
