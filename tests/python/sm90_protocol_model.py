"""A model of the sm90 forward kernel's synchronisation (src/cuda/sm90/forward/kernel.cuh; its
producer warpgroup in producer.cuh, the barriers and the tile ring in smem_layout.cuh), run
under random interleavings: the producer thread (TMA issue for Q and the K/V ring), the FP8
V-transposing warps, the consumer warpgroups (two, or three at head_dim 64) with their round-robin
pingpong turns, mbarrier phases and
parities, named barriers, and a CTA that walks several tiles (the persistent grid), including
tiles with no K/V tile. It checks that nothing deadlocks, that every read of a stage or of the Q
buffer sees the data of the tile and K/V tile it expects, that the warpgroups take their turns
in order 0, 1, (2,) 0, ..., and that the turn barriers end balanced. Tiles reach the consumers and
the transposing warps through the tile ring (two slots the producer publishes tile indices in,
then an end marker), as with the dynamic tile walk.

The tail-row instance (kernel.cuh kTailRows, 16-bit head_dim 64: three consumer warpgroups, a ring
of 4 stages, two Q buffers with one Q barrier pair each) is modelled too (run(..., tail=True)):
the producer loads the tile's first 64 rows into every warpgroup's part of the Q buffer; each
warpgroup runs its share (kv_tile_schedule.cuh run_kv_share: tiles c, c + W, ... serially, the
others only waited for and given back), no turns; warpgroups 1.. leave their shares in their
merge slots between kMergeEmptyBarrier and kMergeFullBarrier, warpgroup 0 reads them between the
two (arming the empty barrier at the start; warpgroups 1.. balance it at the end). Checked there
besides: every ring release counts in the phase of its own ring position (no early release), no
TMA refills a stage while a wgmma still reads it, each warpgroup computes exactly its share, the
merge slot warpgroup 0 reads holds the share of the same tile (written, not yet overwritten),
every named-barrier generation has one arrival per warpgroup, the merge barriers end balanced,
and the turn barriers see only the start's arrival and the end's take.

The own-diagonal instances (kernel.cuh kOwnDiagonal, masked 16-bit head_dim 64: three consumer
warpgroups, two Q buffers, a ring of 4 stages; causal 16-bit head_dim 128 the same on a ring of 2
with the serial schedule, below) too (run(..., own_diag=True)): warpgroup c runs run_kv_tiles
over only the first n_own of a tile's K/V tiles (those its rows see: own_of, or random as the
masks give them, masked_own_counts), none where n_own is 0 (its deferred Q release then at its
epilogue), and gives the rest back unread (kv_tile_schedule.cuh skip_kv_tiles: wait each stage's
full barrier, release), no turns at all; the producer as ever. Checked there
besides: no turn barrier is ever used. In every instance (since the own-diagonal one): every
consumer's ring release counts in the phase of its own ring position, each stage's empty
barriers end with one completed phase per ring position through it, and (but in the tail's,
whose shares are checked apart) each warpgroup computes, Q K^T and P V, exactly its tiles.

The own diagonals with the turns kept (kernel.cuh kOwnDiagonal without kNoTurns: masked 16-bit
head_dim 256, two consumer warpgroups, one Q buffer, a ring of 2) too (run(..., own_diag=True,
own_turns=True)): warpgroup c runs run_kv_tiles over n_run = max(n_own, 1) tiles, takes the first
of its n - n_run empty turns (take, pass) after its loop and before its last P V, and each other
one just before it gives back the next skipped tile (skip_kv_tiles); own counts as the masks
give them (turn_own_counts). Checked there besides: each warpgroup takes n - 1 turns a tile (in
every instance with turns: its tile's turns), round robin. Found by this model (thirty-second
session, test_own_turns_past_ring_reach), before the kernel ran: the first build took all the
empty turns before the last P V (extra_turns_at="before_pv"), which deadlocks every schedule
where a warpgroup takes more empty turns than the ring lets the other compute while it holds its
positions n_run - 1 .. n - 1 (counts [n, 0], the second warpgroup past the sequence, from n = S +
2: 4 K/V tiles on the ring of 2); all of them after the last P V ("after_pv") do no better. The
kernel's order ("interleaved") passes with any counts. Its mistakes, as tests
(test_own_turn_mutation_fails, OWN_TURN_MUTATIONS, and serial too): no extra turns (deadlock, or
turns a tile unequal); n_run = n_own without the max (deadlock, or tile 0 not computed).

The consumers follow run_kv_tiles' overlapped schedule (Q K^T of tile i and P V of tile i - 1 in
flight together), or with serial=True its serial one (kv_tile_schedule.cuh kSerialGemms: the FP8
instances but the V^T-only head_dim 256 one, and causal 16-bit head_dim 128 on three warpgroups
with own diagonals, whose registers do not hold O, S and P at once): each steady-state step waits
for K(i) and V(i - 1), takes its turn, issues P V(i - 1), waits for it, gives V(i - 1) back, issues
Q K^T(i), passes the turn, waits for it and gives K(i) back; the first Q K^T and the last P V as in
the overlapped one. Either, in every mode but the tail instance's (the turn modes, the own diagonals
with turns or without). In both the consumers register the wgmmas in flight on each stage (from
the issue to the wait that completes them), and no TMA (nor a transposing warp) may refill a
stage one of them still reads.

Its tests are in test_sm90_protocol_model.py beside it (split off to keep each file short).

A deadlock is reported as soon as every live agent is blocked on a barrier that no agent and no
copy in flight can change (Deadlock), not after a step limit.

The model mirrors the kernel's waits and arrivals line by line; keep the two in step when the
protocol changes. It fails on each of these deliberate mistakes (checked when it was written):
consumer Q parity flipped, no Q release after the epilogue, no final turn taken by warpgroup 0,
producer's empty-stage parity not flipped, ring position advanced one step early; and, with two Q
buffers, a Q phase counted per tile instead of per buffer round (r instead of r // 2); a tile
slot published without waiting for its release, a reader's tile-slot parity flipped; with one Q
buffer (a Q barrier pair per warpgroup), a warpgroup waiting on the first warpgroup's Q barrier
instead of its own, a warpgroup's box landing on every warpgroup's rows (checked when the pairs
were split, twentieth session). The tail-row instance's mistakes are kept as tests
(test_tail_mutation_fails, TAIL_MUTATIONS): no initial arrival of warpgroup 0 on the merge's
empty barrier (deadlock); warpgroups 1.. writing their slot without syncing on the empty barrier
(a warpgroup arriving twice in one generation, or a slot overwritten before warpgroup 0 read
it), or with no empty barrier at all (a slot overwritten before it was read, with several tail
tiles per CTA); warpgroup 0 reading the slots without syncing on the full barrier; a skipped
K/V tile given back without waiting for its full barrier (early release); a share giving back
its K stage before its Q K^T completes (the stage refilled under the wgmma); no final balancing
sync of warpgroups 1..; the tail's Q boxes at each warpgroup's own rows (the main instance's
step) instead of the tile's first 64 rows. The own-diagonal instance's, as tests too
(test_own_mutation_fails, OWN_MUTATIONS): a skipped tile given back without waiting for its full
barriers (early release); a warpgroup advancing its ring position by n_own, no skips (deadlock, or
a stale K); run_kv_tiles run with n_own == 0 (a tile not its own computed); the pingpong turns
kept (deadlock). The serial schedule's, as tests too (test_serial_mutation_fails, SERIAL_MUTATIONS,
in the own-diagonal instance with the head_dim 128 instance's ring of 2): a step giving V(i - 1)
back before its P V's wait, or K(i) back before its Q K^T's wait (the stage refilled under the
wgmma); with the turns kept as well, on most schedules (test_serial_mutation_fails_with_turns).
"""

import random

# Every change to a barrier's state ticks the clock: an agent found blocked at the current tick
# stays blocked until it ticks again.
_clock = [0]
BLOCKED = "blocked"  # what an agent yields when it spins on a barrier that has not completed


class Deadlock(RuntimeError):
    pass


def _where(agent):
    """Where a blocked agent (a generator) waits: its innermost generator's function, line and
    ring position (it / pos) or turn barrier, for the deadlock's message."""
    g, names = agent, []
    while g is not None and g.gi_frame is not None:
        f = g.gi_frame
        loc = {k: f.f_locals[k] for k in ("c", "t", "it", "pos", "n", "extra") if k in f.f_locals
               and isinstance(f.f_locals[k], (int, str))}
        names.append(f"{f.f_code.co_name}:{f.f_lineno}{loc if loc else ''}")
        g = g.gi_yieldfrom if hasattr(g, "gi_yieldfrom") else None
    return " > ".join(names)


class MBar:
    """mbarrier: a phase completes when its arrivals and its transaction bytes are both done;
    try_wait(p) is true once the phase of parity p has completed (PTX try_wait.parity)."""

    def __init__(self, count):
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0

    def arrive(self, n=1):
        _clock[0] += 1
        self.pending -= n
        assert self.pending >= 0, "too many arrivals"
        self._maybe()

    def expect_tx(self, b):
        _clock[0] += 1
        self.tx += b

    def complete_tx(self, b):
        _clock[0] += 1
        self.tx -= b
        assert self.tx >= 0
        self._maybe()

    def _maybe(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def try_wait(self, parity):
        return (self.phase & 1) != parity


class NamedBar:
    """bar.sync / bar.arrive with a thread count: a generation completes at `count` arrivals.
    `who` (a warpgroup) names the arrival: no warpgroup may arrive twice in one generation (the
    hardware would count it, completing the generation with another's arrival missing)."""

    def __init__(self, count, name="named barrier"):
        self.count = count
        self.arrived = 0
        self.gen = 0
        self.name = name
        self.members = []

    def arrive(self, n, who=None):
        _clock[0] += 1
        if who is not None:
            assert who not in self.members, f"{self.name}: warpgroup {who} arrives twice in one generation"
            self.members.append(who)
        self.arrived += n
        if self.arrived >= self.count:
            assert self.arrived == self.count, f"{self.name} over-arrived"
            self.arrived -= self.count
            self.gen += 1
            self.members = []

    def sync(self, n, who=None):
        """bar.sync: arrive, then wait for the generation to complete."""
        g = self.gen
        self.arrive(n, who)
        while self.gen == g:
            yield BLOCKED


# The tail-row instance's deliberate mistakes (run(..., mutation=...)): how the model catches
# each ("deadlock": Deadlock raised; otherwise fragments of the assertion message), any of
# each, "|"-separated, and whether it needs a particular interleaving ("racy": caught on most
# schedules, not all; otherwise on every one).
TAIL_MUTATIONS = {
    # warpgroup 0 does not arm kMergeEmptyBarrier at the start
    "no_arm": ("deadlock", False),
    # warpgroups 1.. write their slot without syncing on kMergeEmptyBarrier (the arm, warpgroup 0's
    # arrivals and the final sync kept): warpgroup 0's arrivals pile up in one generation, or a
    # slot is overwritten before warpgroup 0 read it
    "no_empty_sync": ("arrives twice|overwritten before", False),
    # no empty barrier at all (arm, syncs, arrivals, final sync): a slot overwritten before it was
    # read, where warpgroup 1 or 2 laps warpgroup 0 (several tail tiles per CTA)
    "no_empty_barrier": ("overwritten before", True),
    # warpgroup 0 reads the slots without syncing on kMergeFullBarrier
    "no_full_sync": ("read before|arrives twice", False),
    # a skipped K/V tile given back without waiting for its full barriers: its release counts in
    # the previous round's phase, which frees the stage under another warpgroup
    "skip_no_full_wait": ("released early", True),
    # a share gives its K stage back before its Q K^T completes: the producer refills it under
    # the wgmma
    "release_k_before_qk": ("under a wgmma", False),
    # warpgroups 1.. skip the last sync on the empty barrier: warpgroup 0's last arrival stays
    "no_final_balance": ("unbalanced merge", False),
    # the tail's Q boxes at kQBoxRows * wg (the main instance's step): warpgroups 1.. get rows
    # 64.. of the tile instead of its first 64
    "tail_q_box_step": ("Q rows", False),
}

# The own-diagonal instance's deliberate mistakes (run(..., own_diag=True, mutation=...)), as
# TAIL_MUTATIONS.
OWN_MUTATIONS = {
    # skip_kv_tiles gives a tile back without waiting for its full barriers: its release counts
    # in the previous round's phase, which frees the stage under another warpgroup
    "skip_no_full_wait": ("released early", True),
    # a warpgroup advances its ring position by n_own only (no skip_kv_tiles): the producer waits
    # for the releases that never come, or the warpgroup reads an earlier tile's K/V as its next
    # tile's, or (its last tile) the ring ends short of those releases
    "advance_by_own": ("deadlock|stale|not given back", False),
    # run_kv_tiles called with n_own == 0 (the `if (n_own > 0)` dropped): it issues the first
    # Q K^T and the last P V regardless, computing a tile the warpgroup's rows do not see (and
    # would run one position ahead of the ring)
    "no_own_guard": ("not one of its own", False),
    # the pingpong turns kept (take_turn / pass_turn as in the other instances): warpgroups with
    # different own counts take different numbers of turns per tile
    "turns_kept": ("deadlock|unbalanced turns|turn order", False),
}


# The own diagonals with turns' deliberate mistakes (run(..., own_diag=True, own_turns=True,
# mutation=...)), as TAIL_MUTATIONS.
OWN_TURN_MUTATIONS = {
    # run_kv_tiles without extra_turns: a warpgroup that computes fewer tiles takes fewer turns
    # than the other, whose next turn then waits for an arrival that never comes, or the turn
    # barriers end unbalanced, or out of round-robin order
    "no_extra_turns": ("deadlock|unbalanced turns|turn order|turns a tile", False),
    # n_run = n_own without the max: a warpgroup without own tiles runs no run_kv_tiles, so takes
    # none of the tile's turns (and computes no tile: the kernel's computes a masked one)
    "no_max": ("deadlock|unbalanced turns|turn order|turns a tile|computed", False),
}


# The serial schedule's deliberate mistakes (run(..., serial=True, mutation=...)), as TAIL_MUTATIONS.
SERIAL_MUTATIONS = {
    # a steady-state step gives V(i - 1) back right after issuing its P V, before the wait_group 0
    # that completes it: once every warpgroup has, the producer refills the stage under the wgmma
    "release_v_before_pv_wait": ("under a wgmma", False),
    # a steady-state step gives K(i) back right after issuing its Q K^T, before its wait
    "release_k_before_qk_wait": ("under a wgmma", True),
}


def masked_own_counts(rnd, n, W):
    """Own counts of a tile of n K/V tiles as the masks give them (kernel.cuh n_own): non-decreasing
    in the warpgroup (a later warpgroup's last row sees at least as far), the last warpgroup's
    short of the tile's end too (a window), and 0 for the warpgroups whose rows lie past the
    sequence (the last ones of a tile)."""
    m = sorted(rnd.randint(0, n) for _ in range(W))
    if rnd.random() < 0.5:
        m[-1] = n
    if rnd.random() < 0.2:
        dead = rnd.randint(1, W - 1)
        m[W - dead:] = [0] * dead
    return m


def turn_own_counts(rnd, n, W):
    """Own counts of a tile of n K/V tiles at head_dim 256 (kernel.cuh n_own: 128-row Q tiles of
    64-key K/V tiles): the tile's K/V range ends where its last row inside the sequence sees, so
    the last warpgroup with rows inside computes all n, and each one before it, 64 rows earlier,
    as many or one fewer (causal: one fewer on the diagonal; a window's right edge as causal;
    neither: all n); the warpgroups past the sequence (the last ones of a ragged tile) 0."""
    dead = rnd.randint(1, W - 1) if n > 0 and rnd.random() < 0.25 else 0
    m = [0] * W
    m[W - 1 - dead] = n
    for c in range(W - 2 - dead, -1, -1):
        m[c] = max(0, m[c + 1] - rnd.randint(0, 1))
    return m


def run(tiles_per_cta, ntiles_of, S, seed, fp8=False, W=2, QB=1, vt_global=False, transposers=True, tail=False,
        mutation=None, turns_at_ends=True, defer_q_release=False, store_wait=True, own_diag=False, own_of=None,
        own_turns=False, extra_turns_at="interleaved", serial=False):
    """One CTA walking `tiles_per_cta` tiles of ntiles_of(t) K/V tiles each, S ring stages, W
    consumer warpgroups, QB Q buffers (Q tile r in buffer r % QB, phase r // QB), vt_global: FP8
    with V^T loaded by the producer's TMA instead of transposed by warps; transposers=False (with
    vt_global): the V^T-only instance, no transposing warps at all (kernel_traits.cuh kVtOnly);
    tail: the tail-row instance (16-bit, two Q buffers; mutation: one of TAIL_MUTATIONS);
    turns_at_ends=False: a tile's first Q K^T and last P V issued without a turn
    (kv_tile_schedule.cuh kTurnsAtEnds, the forward's order since the twenty-fourth session);
    the epilogue's O store is a copy that reads the warpgroup's Q rows at a random later time
    (the release waits for that read: tma_store_wait_read); defer_q_release (two Q buffers, not
    the tail instance: kernel.cuh kDeferQRelease): that wait and the Q buffer's release come
    after the next tile's first Q K^T is issued, or at the next epilogue (store_wait=False: a
    deliberate mistake, the release without that wait);
    own_diag: the own-diagonal instance (kernel.cuh kOwnDiagonal, masked 16-bit head_dim 64 or 128
    on three warpgroups; at 128 with serial=True): warpgroup c computes the first own_of(t, c) K/V
    tiles of tile t (default: random, as the masks give them) and gives the others back unread, no
    turns, the Q release deferred with two Q buffers (mutation: one of OWN_MUTATIONS);
    own_turns (with own_diag): the own diagonals with the turns kept (kernel.cuh kOwnDiagonal
    without kNoTurns, masked 16-bit head_dim 256: two warpgroups, one Q buffer, a ring of 2):
    warpgroup c runs run_kv_tiles over n_run = max(n_own, 1) K/V tiles (none where the tile has
    none) with extra_turns = n - n_run empty turns (take, pass) after its loop, then gives the rest
    back unread (mutation: one of OWN_TURN_MUTATIONS); extra_turns_at: where they are taken,
    "interleaved" (the kernel: one in run_kv_tiles before the last P V's full-barrier wait, each
    other one just before the next skipped tile is given back), or, as the first build did,
    "before_pv" (all of them there) or "after_pv" (all after the last P V's release): both
    deadlock past the ring's reach (test_own_turns_past_ring_reach);
    serial: run_kv_tiles' serial schedule (kSerialGemms: P V of tile i - 1 completed before Q K^T of
    tile i is issued) instead of the overlapped one, in any of the modes but the tail instance's
    (mutation: one of SERIAL_MUTATIONS);
    agents are generators advanced in random order, TMA copies land at random later times."""
    assert transposers or (fp8 and vt_global), "only V^T-only FP8 instances lack the transposing warps"
    assert not tail or (not fp8 and QB == 2), "the tail-row instance: 16-bit, two Q buffers (kQGroups == 1)"
    assert mutation is None or (tail and mutation in TAIL_MUTATIONS) or (
        own_diag and mutation in (OWN_TURN_MUTATIONS if own_turns else OWN_MUTATIONS)) or (
        serial and mutation in SERIAL_MUTATIONS), mutation
    assert not own_turns or own_diag, "own_turns: an own-diagonal instance"
    assert extra_turns_at in ("before_pv", "after_pv", "interleaved"), extra_turns_at
    assert not serial or not tail, "the tail-row instance runs run_kv_share, not run_kv_tiles"
    assert not own_diag or (not fp8 and not tail), "the own-diagonal instance: 16-bit, not the tail instance"
    if own_diag:  # as the instance runs: run_kv_tiles<..., kTurnsAtEnds = false>, kDeferQRelease
        turns_at_ends, defer_q_release = False, QB == 2
    assert not defer_q_release or (QB == 2 and not tail), "deferred Q release: two Q buffers, not the tail instance"
    tw = 3 if fp8 and transposers else 0  # transposing warps
    rnd = random.Random(seed)
    # Q barrier pairs per buffer: with one buffer one per warpgroup (its 64 rows load and are
    # given back on their own), with two one per buffer (kernel_traits.cuh kQGroups).
    QG = W if QB == 1 else 1
    grp = (lambda c: c) if QG > 1 else (lambda c: 0)
    q_full = [[MBar(1) for _ in range(QG)] for _ in range(QB)]
    q_empty = [[MBar(W // QG) for _ in range(QG)] for _ in range(QB)]
    k_full = [MBar(1) for _ in range(S)]
    k_empty = [MBar(4 * W) for _ in range(S)]
    v_full = [MBar(1) for _ in range(S)]
    v_empty = [MBar(3 if fp8 else 4 * W) for _ in range(S)]
    vt_full = [MBar(1 if vt_global else 3) for _ in range(S)]
    vt_empty = [MBar(4 * W) for _ in range(S)]
    turn = [NamedBar(256, f"turn barrier {c}") for c in range(W)]
    # The tail-row instance's merge barriers (kMergeFullBarrier, kMergeEmptyBarrier: every
    # consumer thread) and the merge slots of warpgroups 1.. (kernel_traits.cuh kMergeOffset).
    merge_full = NamedBar(128 * W, "kMergeFullBarrier")
    merge_empty = NamedBar(128 * W, "kMergeEmptyBarrier")
    merge_slot = [{"state": "free", "tile": None, "share": None} for _ in range(W - 1)]
    # The tile ring: the producer publishes each tile it takes (and finally an end marker) in
    # slot r % 2; every consumer warp (4 per warpgroup) and transposing warp reads and releases.
    tile_full = [MBar(1) for _ in range(2)]
    tile_empty = [MBar(4 * W + tw) for _ in range(2)]
    slot = [None, None]
    END = "end"
    order = []  # warpgroups in the order they got their turns
    kbuf = [None] * S
    vbuf = [None] * S
    vtbuf = [None] * S
    # wgmmas in flight reading each stage (registered from their issue to the wait that completes
    # them): no TMA, nor a transposing warp, may refill it.
    reading = {"K": [0] * S, "V": [0] * S, "V^T": [0] * S}
    qbuf = [{"rows": [None] * W} for _ in range(QB)]
    pending_tma = []  # (callback)
    tiles = list(range(tiles_per_cta))
    if own_diag and own_of is None:
        orng = random.Random(seed + 424242)  # apart from the schedule's
        counts = turn_own_counts if own_turns else masked_own_counts
        own_table = [counts(orng, ntiles_of(t), W) for t in tiles]
        own_of = lambda t, c: own_table[t][c]  # noqa: E731
    # The K/V tiles each warpgroup computes of each tile: (Q K^T issued, P V issued).
    computed = {}

    def q_rows(c):
        # The Q rows the producer puts in warpgroup c's part: its own 64 (box c), or in the tail
        # instance the tile's first 64 (box 0) in every part.
        return 0 if tail and mutation != "tail_q_box_step" else c

    def tma(cb):
        pending_tma.append(cb)

    def publish(r, value):
        while not tile_empty[r % 2].try_wait(((r // 2) & 1) ^ 1):
            yield BLOCKED
        slot[r % 2] = value
        tile_full[r % 2].arrive()

    def read_tile(r, warps):
        while not tile_full[r % 2].try_wait((r // 2) & 1):
            yield BLOCKED
        value = slot[r % 2]
        yield
        tile_empty[r % 2].arrive(warps)
        return value

    def producer():
        it = 0
        qr = 0
        for r, t in enumerate(tiles + [END]):
            yield from publish(r, t)
            if t == END:
                break
            n = ntiles_of(t)

            def load_q(t=t):
                nonlocal qr
                b = qr % QB
                # One 64-row box per warpgroup, each landing on its own; with one Q buffer the
                # producer waits for each warpgroup's release in turn.
                for c in range(W):
                    g = grp(c)
                    if QG > 1 or c == 0:
                        while not q_empty[b][g].try_wait(((qr // QB) & 1) ^ 1):
                            yield BLOCKED
                        q_full[b][g].expect_tx(W // QG)
                        q_full[b][g].arrive()

                    def land(t=t, b=b, c=c, g=g):
                        qbuf[b]["rows"][c] = ("q", t, q_rows(c))
                        q_full[b][g].complete_tx(1)

                    tma(land)
                qr += 1

            def load_stage(empty, full, buf, st, par, tag, kind):
                # A ring stage: wait for it to be free, expect the bytes, the copy lands later.
                while not empty[st].try_wait(par):
                    yield BLOCKED
                assert not reading[kind][st], f"{kind} stage {st} refilled under a wgmma reading it"
                full[st].expect_tx(1)
                full[st].arrive()

                def land():
                    assert not reading[kind][st], f"{kind} stage {st} overwritten under a wgmma reading it"
                    buf[st] = tag
                    full[st].complete_tx(1)

                tma(land)

            if n == 0:
                yield from load_q()
            for i in range(n):
                st = it % S
                par = ((it // S) & 1) ^ 1
                yield from load_stage(k_empty, k_full, kbuf, st, par, (t, i), "K")
                if i == 0:
                    yield from load_q()
                if fp8 and vt_global:  # V^T from global memory by TMA (FwdArgs::vt_global): no transposer
                    yield from load_stage(vt_empty, vt_full, vtbuf, st, par, (t, i), "V^T")
                else:
                    yield from load_stage(v_empty, v_full, vbuf, st, par, (t, i), "V")
                it += 1

    def transposer():
        it = 0
        for r in range(len(tiles) + 1):
            t = yield from read_tile(r, 3)
            assert t == (tiles + [END])[r], ("transposer tile", t, r)
            if t == END:
                break
            if vt_global:  # only the tile ring to keep up with
                continue
            for i in range(ntiles_of(t)):
                st = it % S
                par = (it // S) & 1
                while not v_full[st].try_wait(par):
                    yield BLOCKED
                while not vt_empty[st].try_wait(par ^ 1):
                    yield BLOCKED
                assert vbuf[st] == (t, i), ("transposer read", vbuf[st], (t, i))
                assert not reading["V^T"][st], f"V^T stage {st} refilled under a wgmma reading it"
                yield
                assert not reading["V^T"][st], f"V^T stage {st} overwritten under a wgmma reading it"
                vtbuf[st] = vbuf[st]
                vt_full[st].arrive(3)
                v_empty[st].arrive(3)
                it += 1

    # kNoTurns (kOwnDiagonal on three warpgroups: head_dim 64 and 128): take_turn and pass_turn are
    # empty (the warpgroups take different numbers of steps per tile), the start's arrival and the
    # final take included; at head_dim 256 (own_turns) they stay.
    no_turns = own_diag and not own_turns and mutation != "turns_kept"
    turns_of = {}  # (tile, warpgroup) -> the turns it took in the tile

    def take(c, t=None):
        if no_turns:
            return
        yield from turn[c].sync(128, c)
        order.append(c)
        if t is not None:
            turns_of[(t, c)] = turns_of.get((t, c), 0) + 1

    def pas(c):
        if no_turns:
            return
        turn[(c + 1) % W].arrive(128, c)

    pending = [None] * W  # per warpgroup: (Q buffer, its O store) not yet released

    def release(empty, st, pos, what):
        # release_stage: the warpgroup's 4 warps; it must count in the phase of its own ring
        # position (pos // S), which the wait on the stage's full barrier guarantees.
        assert empty[st].phase == pos // S, (
            f"{what} of ring position {pos} released early (stage {st} in phase {empty[st].phase}, not {pos // S})")
        empty[st].arrive(4)

    def skip_kv_tiles(n, pos):
        """kv_tile_schedule.cuh skip_kv_tiles (16-bit: V through v_full): gives back the n tiles at
        ring positions pos .. pos + n - 1 unread; returns pos + n."""
        end = pos + n
        while pos < end:
            # each stage once it has been filled: an arrival before the fill counts towards the
            # previous round's phase
            st, ph = pos % S, (pos // S) & 1
            if mutation != "skip_no_full_wait":
                while not k_full[st].try_wait(ph):
                    yield BLOCKED
            release(k_empty, st, pos, "K")
            if mutation != "skip_no_full_wait":
                while not v_full[st].try_wait(ph):
                    yield BLOCKED
            release(v_empty, st, pos, "V")
            pos += 1
        return pos

    def release_pending(c):
        if pending[c] is None:
            return
        b, store = pending[c]
        while store_wait and not store["read"]:  # tma_store_wait_read<0>
            yield BLOCKED
        q_empty[b][grp(c)].arrive(1)
        pending[c] = None

    def consumer(c):
        it = 0
        qr = 0

        if c == W - 1:
            pas(c)
        pvf = vt_full if fp8 else v_full
        pve = vt_empty if fp8 else v_empty
        pvb = vtbuf if fp8 else vbuf
        pvk = "V^T" if fp8 else "V"  # the stage P V reads (reading's key)
        q_tag = lambda t: ("q", t, c)  # noqa: E731

        def empty_turns(extra, t):
            # run_kv_tiles' extra_turns: the skipped tiles' turns, taken empty
            for _ in range(extra):
                yield from take(c, t)
                pas(c)

        def run_kv_tiles(n, t, b, extra=0):
            """kv_tile_schedule.cuh run_kv_tiles: tiles 0 .. n - 1 (n > 0) of tile t from ring position
            it, overlapped, or serial (kSerialGemms); extra: empty turns (extra_turns), before the last
            P V (the kernel) or, with extra_turns_at == "after_pv", after it. Each wgmma counts as
            reading its stage from its issue to the wait that completes it."""
            nonlocal it
            qk, pv = computed.setdefault((t, c), ([], []))
            st = it % S
            while not k_full[st].try_wait((it // S) & 1):
                yield BLOCKED
            if turns_at_ends:
                yield from take(c, t)
            assert qbuf[b]["rows"][c] == q_tag(t), ("stale Q", qbuf[b]["rows"][c], q_tag(t))
            assert kbuf[st] == (t, 0), ("stale K", kbuf[st], (t, 0))
            # (run_kv_tiles needs n > 0: its first Q K^T and last P V run regardless)
            assert n > 0, f"warpgroup {c} computes K/V tile 0 of tile {t}: not one of its own ({n})"
            qk.append(0)
            reading["K"][st] += 1
            if turns_at_ends:
                pas(c)
            yield from release_pending(c)  # run_kv_tiles' after_first_qk
            yield  # the wgmma runs until its wait: Q and K must still hold this tile's data
            assert qbuf[b]["rows"][c] == q_tag(t) and kbuf[st] == (t, 0), "Q or K overwritten under the wgmma"
            reading["K"][st] -= 1
            release(k_empty, st, it, "K")
            for i in range(1, n):
                prev = it % S
                it += 1
                st = it % S
                while not k_full[st].try_wait((it // S) & 1):
                    yield BLOCKED
                while not pvf[prev].try_wait(((it - 1) // S) & 1):
                    yield BLOCKED
                if serial:
                    # kSerialGemms: P V(i - 1) completes before Q K^T(i) is issued (at most O + P or S
                    # in flight at once).
                    yield from take(c, t)
                    assert pvb[prev] == (t, i - 1), ("stale V", pvb[prev], (t, i - 1))
                    pv.append(i - 1)  # issue_pv(prev)
                    reading[pvk][prev] += 1
                    if mutation == "release_v_before_pv_wait":
                        release(pve, prev, it - 1, "V")
                    yield from wgmma_runs()  # wgmma_wait<0>
                    assert pvb[prev] == (t, i - 1), "V overwritten under the wgmma"
                    reading[pvk][prev] -= 1
                    if mutation != "release_v_before_pv_wait":
                        release(pve, prev, it - 1, "V")
                    assert qbuf[b]["rows"][c] == q_tag(t), ("stale Q", qbuf[b]["rows"][c], q_tag(t))
                    assert kbuf[st] == (t, i), ("stale K", kbuf[st], (t, i))
                    qk.append(i)  # issue_qk(stage)
                    reading["K"][st] += 1
                    pas(c)
                    if mutation == "release_k_before_qk_wait":
                        release(k_empty, st, it, "K")
                    yield from wgmma_runs()  # wgmma_wait<0>
                    assert qbuf[b]["rows"][c] == q_tag(t) and kbuf[st] == (t, i), "Q or K overwritten under the wgmma"
                    reading["K"][st] -= 1
                    if mutation != "release_k_before_qk_wait":
                        release(k_empty, st, it, "K")
                    yield  # weights (rescale, pack)
                else:  # overlapped: S_i and P_{i-1} V_{i-1} in flight together
                    yield from take(c, t)
                    assert qbuf[b]["rows"][c] == q_tag(t), ("stale Q", qbuf[b]["rows"][c], q_tag(t))
                    assert kbuf[st] == (t, i), ("stale K", kbuf[st], (t, i))
                    assert pvb[prev] == (t, i - 1), ("stale V", pvb[prev], (t, i - 1))
                    qk.append(i)
                    pv.append(i - 1)
                    reading["K"][st] += 1
                    reading[pvk][prev] += 1
                    pas(c)
                    yield
                    assert qbuf[b]["rows"][c] == q_tag(t) and kbuf[st] == (t, i), "Q or K overwritten under the wgmma"
                    reading["K"][st] -= 1
                    release(k_empty, st, it, "K")
                    yield
                    assert pvb[prev] == (t, i - 1), "V overwritten under the wgmma"
                    reading[pvk][prev] -= 1
                    release(pve, prev, it - 1, "V")
            if extra_turns_at != "after_pv":
                yield from empty_turns(extra, t)
            last = it % S
            while not pvf[last].try_wait((it // S) & 1):
                yield BLOCKED
            if turns_at_ends:
                yield from take(c, t)
            assert pvb[last] == (t, n - 1), ("stale V", pvb[last], (t, n - 1))
            pv.append(n - 1)
            reading[pvk][last] += 1
            if turns_at_ends:
                pas(c)
            yield
            assert pvb[last] == (t, n - 1), "V overwritten under the wgmma"
            reading[pvk][last] -= 1
            release(pve, last, it, "V")
            it += 1
            if extra_turns_at == "after_pv":
                yield from empty_turns(extra, t)

        for r in range(len(tiles) + 1):
            t = yield from read_tile(qr, 4)  # one tile per Q round: qr is the ring position
            assert t == (tiles + [END])[r], ("consumer tile", t, r)
            if t == END:
                break
            n = ntiles_of(t)
            b = qr % QB
            while not q_full[b][grp(c)].try_wait((qr // QB) & 1):
                yield BLOCKED
            if n > 0:
                if own_diag:
                    # The warpgroup's own tiles (those its rows see), then the later ones given back
                    # unread: its ring position advances by n in all.
                    n_own = own_of(t, c)
                    assert 0 <= n_own <= n, ("own count", t, c, n_own, n)
                    if own_turns:
                        # at least one tile (a warpgroup without visible keys computes a masked
                        # one), the skipped tiles' turns taken empty: n - 1 turns a tile
                        n_run = n_own if mutation == "no_max" else max(n_own, 1)
                        extra = 0 if mutation == "no_extra_turns" else n - n_run
                        # (interleaved: one before the last P V, the others with the skips)
                        now = min(extra, 1) if extra_turns_at == "interleaved" else extra
                        if n_run > 0:
                            yield from run_kv_tiles(n_run, t, b, now)
                        if extra_turns_at == "interleaved":
                            for k in range(n - n_run):
                                if 1 <= k <= extra - now:
                                    yield from empty_turns(1, t)
                                it = yield from skip_kv_tiles(1, it)
                        else:
                            it = yield from skip_kv_tiles(n - n_run, it)
                    else:
                        if n_own > 0 or mutation == "no_own_guard":
                            yield from run_kv_tiles(n_own, t, b)
                        if mutation != "advance_by_own":
                            it = yield from skip_kv_tiles(n - n_own, it)
                else:
                    yield from run_kv_tiles(n, t, b)
            # epilogue: overwrite own Q rows, store them (a copy that reads them later), release the
            # buffer once the store has read it: now, or deferred (release_pending)
            yield from release_pending(c)
            qbuf[b]["rows"][c] = ("o", t)
            yield
            store = {"read": False}

            def store_reads(b=b, c=c, t=t, store=store):
                assert qbuf[b]["rows"][c] == ("o", t), ("O overwritten before its store read it", qbuf[b]["rows"][c], t)
                store["read"] = True
                _clock[0] += 1  # a state change: a warpgroup blocked on this read may go on

            tma(store_reads)
            pending[c] = (b, store)
            if not defer_q_release:
                yield from release_pending(c)
            qr += 1
        if c == 0:
            yield from take(c)

    # ---- the tail-row instance's consumers (kernel.cuh kTailRows) ----
    def wgmma_runs():
        for _ in range(rnd.randint(1, 3)):  # until its wgmma_wait: the operands must stay
            yield

    def run_kv_share(n_tiles, first, stride, it, c, t, b):
        """kv_tile_schedule.cuh run_kv_share: returns the tiles it computed."""
        end = it + n_tiles
        pos = it  # the next ring position this warpgroup has not given back

        def skip_to(target):  # tiles of the other warpgroups' shares
            nonlocal pos
            pos = yield from skip_kv_tiles(target - pos, pos)

        computed = []
        for i in range(first, n_tiles, stride):
            yield from skip_to(it + i)
            st, ph = pos % S, (pos // S) & 1
            while not k_full[st].try_wait(ph):
                yield BLOCKED
            # issue_qk: Q (this warpgroup's part: the tile's first 64 rows) and K of tile i
            assert qbuf[b]["rows"][c] == ("q", t, 0), f"Q rows {qbuf[b]['rows'][c]} under warpgroup {c}'s Q K^T"
            assert kbuf[st] == (t, i), ("K read", kbuf[st], (t, i))
            reading["K"][st] += 1
            if mutation == "release_k_before_qk":
                release(k_empty, st, pos, "K")
            yield from wgmma_runs()  # wgmma_wait<0>
            assert qbuf[b]["rows"][c] == ("q", t, 0) and kbuf[st] == (t, i), "Q or K overwritten under the wgmma"
            reading["K"][st] -= 1
            if mutation != "release_k_before_qk":
                release(k_empty, st, pos, "K")
            yield  # weights, rescale (not for the first), pack
            while not v_full[st].try_wait(ph):
                yield BLOCKED
            assert vbuf[st] == (t, i), ("V read", vbuf[st], (t, i))  # issue_pv
            reading["V"][st] += 1
            yield from wgmma_runs()
            assert vbuf[st] == (t, i), "V overwritten under the wgmma"
            reading["V"][st] -= 1
            release(v_empty, st, pos, "V")
            computed.append(i)
            pos += 1
        yield from skip_to(end)
        return computed

    def tail_consumer(c):
        it = 0
        qr = 0
        if c == W - 1:
            pas(c)  # the turns' start, as in every instance (no turn is taken in the tiles)
        # The merge's empty barrier starts armed: warpgroup 0's first arrival.
        if c == 0 and mutation not in ("no_arm", "no_empty_barrier"):
            merge_empty.arrive(128, c)
        for r in range(len(tiles) + 1):
            t = yield from read_tile(qr, 4)
            assert t == (tiles + [END])[r], ("consumer tile", t, r)
            if t == END:
                break
            n = ntiles_of(t)
            b = qr % QB
            while not q_full[b][grp(c)].try_wait((qr // QB) & 1):
                yield BLOCKED
            share = yield from run_kv_share(n, c, W, it, c, t, b)
            it += n
            assert share == list(range(c, n, W)), ("share", c, share)
            if c > 0:
                if mutation not in ("no_empty_sync", "no_empty_barrier"):
                    yield from merge_empty.sync(128, c)
                s = merge_slot[c - 1]
                assert s["state"] in ("free", "read"), (
                    f"merge slot {c - 1} overwritten before warpgroup 0 read it ({s['state']}, tile {s['tile']}; "
                    f"now tile {t})")
                s.update(state="writing", tile=t, share=None)
                yield  # the float4 stores of O, max and sum
                assert s["state"] == "writing" and s["tile"] == t, "merge slot written by two at once"
                s.update(state="written", share=tuple(share))
                merge_full.arrive(128, c)
            else:
                if mutation != "no_full_sync":
                    yield from merge_full.sync(128, c)
                for w in range(1, W):
                    s = merge_slot[w - 1]
                    assert s["state"] == "written" and s["tile"] == t, (
                        f"merge slot {w - 1} read before written (holds tile {s['tile']}, {s['state']}; "
                        f"warpgroup 0 merges tile {t})")
                    assert s["share"] == tuple(range(w, n, W)), ("merged share", w, s["share"])
                    s["state"] = "reading"
                yield  # the loads and the merge
                for w in range(1, W):
                    s = merge_slot[w - 1]
                    assert s["state"] == "reading" and s["tile"] == t, (
                        f"merge slot {w - 1} overwritten before warpgroup 0 read it (under the read of tile {t})")
                    s["state"] = "read"
                if mutation != "no_empty_barrier":
                    merge_empty.arrive(128, c)  # the slots are read
            # epilogue (only warpgroup 0 has rows inside the sequence): O staged in the
            # warpgroup's own rows of the Q buffer, then the Q release
            qbuf[b]["rows"][c] = ("o", t)
            yield
            q_empty[b][grp(c)].arrive(1)
            qr += 1
        if c == 0:
            yield from take(c)  # the last warpgroup's start arrival: the turns end balanced
        # warpgroup 0's last arrival: the empty barrier ends balanced
        if c > 0 and mutation not in ("no_final_balance", "no_empty_barrier"):
            yield from merge_empty.sync(128, c)

    agents = [producer()] + [(tail_consumer if tail else consumer)(c) for c in range(W)] + ([transposer()] if tw else [])
    alive = list(agents)
    blocked = {}  # agent -> the clock when it was last found blocked
    steps = 0
    while alive or pending_tma:
        steps += 1
        if pending_tma and rnd.random() < 0.3:
            cb = pending_tma.pop(rnd.randrange(len(pending_tma)))
            cb()
            continue
        if not alive:
            continue
        if not pending_tma and all(blocked.get(a) == _clock[0] for a in alive):
            raise Deadlock(f"deadlock: {len(alive)} agents blocked, no copy in flight: "
                           + "; ".join(_where(a) for a in alive))
        a = rnd.choice(alive)
        try:
            if next(a) == BLOCKED:
                blocked[a] = _clock[0]
        except StopIteration:
            alive.remove(a)
        if steps > 2_000_000:
            raise RuntimeError("deadlock?")
    assert all(b.arrived == 0 for b in turn), ("unbalanced turns", [b.arrived for b in turn])
    assert not any(any(r) for r in reading.values()), ("wgmmas never waited for", reading)
    # Every ring position given back by every warpgroup, each release in its own round's phase:
    # each stage's empty barrier ends with one completed phase per position through it.
    total = sum(ntiles_of(t) for t in tiles)
    for name, empty in [("K", k_empty)] + ([] if fp8 else [("V", v_empty)]):
        for st in range(S):
            through = len(range(st, total, S))
            assert empty[st].phase == through and empty[st].pending == empty[st].count, (
                f"{name} stage {st} not given back in full: {empty[st].phase} phases and "
                f"{empty[st].count - empty[st].pending} arrivals, {through} positions through it")
    if not tail:
        # Each warpgroup computed exactly its tiles: all of them, or (own diagonals) its first n_own.
        for t in tiles:
            for c in range(W):
                n = ntiles_of(t)
                n_run = (max(own_of(t, c), 1) if own_turns else own_of(t, c)) if own_diag and n > 0 else n
                own = list(range(n_run))
                assert computed.get((t, c), ([], [])) == (own, own), ("computed", t, c, computed.get((t, c)), own)
    if no_turns:
        assert order == [] and all(b.gen == 0 and b.arrived == 0 for b in turn), (
            "turn barriers used in the own-diagonal instance", order, [(b.gen, b.arrived) for b in turn])
    # The final take by warpgroup 0 only balances the barrier; every other turn is round robin.
    assert order[:-1] == [i % W for i in range(len(order) - 1)], ("turn order", order)
    if not tail and not no_turns:
        # Every warpgroup takes a tile's turns (n + 1 with turns at its ends, n - 1 without), the
        # own diagonals' empty ones included: the round robin stays whole.
        for t in tiles:
            n = ntiles_of(t)
            want = 0 if n == 0 else n + 1 if turns_at_ends else n - 1
            got = [turns_of.get((t, c), 0) for c in range(W)]
            assert got == [want] * W, ("turns a tile", t, got, want)
    if tail:
        # No turn in the tail tiles: warpgroup W - 1's start arrival, warpgroup 0's final take.
        assert order == [0] and [b.gen for b in turn] == [1] + [0] * (W - 1), ("turns in tail tiles", order)
        assert merge_full.arrived == 0 and merge_empty.arrived == 0, (
            "unbalanced merge barriers", merge_full.arrived, merge_empty.arrived)
        assert all(s["state"] in ("free", "read") for s in merge_slot), ("merge slot never read", merge_slot)
    return steps
