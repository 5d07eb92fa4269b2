"""A model of the sm90 forward kernel's synchronisation (src/cuda/sm90/forward/kernel.cuh), run
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

The consumers follow run_kv_tiles' overlapped schedule (Q K^T of tile i and P V of tile i - 1 in
flight together), or with serial=True its serial one (kv_tile_schedule.cuh kSerialGemms: the FP8
instances but the V^T-only head_dim 256 one, and causal 16-bit head_dim 128 on three warpgroups
with own diagonals, whose registers do not hold O, S and P at once): each steady-state step waits
for K(i) and V(i - 1), takes its turn, issues P V(i - 1), waits for it, gives V(i - 1) back, issues
Q K^T(i), passes the turn, waits for it and gives K(i) back; the first Q K^T and the last P V as in
the overlapped one. Either, in the normal turn modes and in the own-diagonal instance. In both the
consumers register the wgmmas in flight on each stage (from the issue to the wait that completes
them), and no TMA (nor a transposing warp) may refill a stage one of them still reads.

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
wgmma).
"""

import random

import pytest

# Every change to a barrier's state ticks the clock: an agent found blocked at the current tick
# stays blocked until it ticks again.
_clock = [0]
BLOCKED = "blocked"  # what an agent yields when it spins on a barrier that has not completed


class Deadlock(RuntimeError):
    pass


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


def run(tiles_per_cta, ntiles_of, S, seed, fp8=False, W=2, QB=1, vt_global=False, transposers=True, tail=False,
        mutation=None, turns_at_ends=True, defer_q_release=False, store_wait=True, own_diag=False, own_of=None,
        serial=False):
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
    serial: run_kv_tiles' serial schedule (kSerialGemms: P V of tile i - 1 completed before Q K^T of
    tile i is issued) instead of the overlapped one, in any of the modes but the tail instance's
    (mutation: one of SERIAL_MUTATIONS);
    agents are generators advanced in random order, TMA copies land at random later times."""
    assert transposers or (fp8 and vt_global), "only V^T-only FP8 instances lack the transposing warps"
    assert not tail or (not fp8 and QB == 2), "the tail-row instance: 16-bit, two Q buffers (kQGroups == 1)"
    assert mutation is None or (tail and mutation in TAIL_MUTATIONS) or (
        own_diag and mutation in OWN_MUTATIONS) or (serial and mutation in SERIAL_MUTATIONS), mutation
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
        own_table = [masked_own_counts(orng, ntiles_of(t), W) for t in tiles]
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

    # kOwnDiagonal: take_turn and pass_turn are empty (the warpgroups take different numbers of
    # steps per tile), the start's arrival and the final take included.
    no_turns = own_diag and mutation != "turns_kept"

    def take(c):
        if no_turns:
            return
        yield from turn[c].sync(128, c)
        order.append(c)

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

        def run_kv_tiles(n, t, b):
            """kv_tile_schedule.cuh run_kv_tiles: tiles 0 .. n - 1 (n > 0) of tile t from ring position
            it, overlapped, or serial (kSerialGemms). Each wgmma counts as reading its stage from its
            issue to the wait that completes it."""
            nonlocal it
            qk, pv = computed.setdefault((t, c), ([], []))
            st = it % S
            while not k_full[st].try_wait((it // S) & 1):
                yield BLOCKED
            if turns_at_ends:
                yield from take(c)
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
                    yield from take(c)
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
                    yield from take(c)
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
            last = it % S
            while not pvf[last].try_wait((it // S) & 1):
                yield BLOCKED
            if turns_at_ends:
                yield from take(c)
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
            raise Deadlock(f"deadlock: {len(alive)} agents blocked, no copy in flight")
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
                own = list(range(own_of(t, c) if own_diag else ntiles_of(t)))
                assert computed.get((t, c), ([], [])) == (own, own), ("computed", t, c, computed.get((t, c)), own)
    if no_turns:
        assert order == [] and all(b.gen == 0 and b.arrived == 0 for b in turn), (
            "turn barriers used in the own-diagonal instance", order, [(b.gen, b.arrived) for b in turn])
    # The final take by warpgroup 0 only balances the barrier; every other turn is round robin.
    assert order[:-1] == [i % W for i in range(len(order) - 1)], ("turn order", order)
    if tail:
        # No turn in the tail tiles: warpgroup W - 1's start arrival, warpgroup 0's final take.
        assert order == [0] and [b.gen for b in turn] == [1] + [0] * (W - 1), ("turns in tail tiles", order)
        assert merge_full.arrived == 0 and merge_empty.arrived == 0, (
            "unbalanced merge barriers", merge_full.arrived, merge_empty.arrived)
        assert all(s["state"] in ("free", "read") for s in merge_slot), ("merge slot never read", merge_slot)
    return steps


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
