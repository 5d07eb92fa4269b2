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

The model mirrors the kernel's waits and arrivals line by line; keep the two in step when the
protocol changes. It fails on each of these deliberate mistakes (checked when it was written):
consumer Q parity flipped, no Q release after the epilogue, no final turn taken by warpgroup 0,
producer's empty-stage parity not flipped, ring position advanced one step early; and, with two Q
buffers, a Q phase counted per tile instead of per buffer round (r instead of r // 2); a tile
slot published without waiting for its release, a reader's tile-slot parity flipped; with one Q
buffer (a Q barrier pair per warpgroup), a warpgroup waiting on the first warpgroup's Q barrier
instead of its own, a warpgroup's box landing on every warpgroup's rows (checked when the pairs
were split, twentieth session).
"""

import random

import pytest


class MBar:
    """mbarrier: a phase completes when its arrivals and its transaction bytes are both done;
    try_wait(p) is true once the phase of parity p has completed (PTX try_wait.parity)."""

    def __init__(self, count):
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0

    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, "too many arrivals"
        self._maybe()

    def expect_tx(self, b):
        self.tx += b

    def complete_tx(self, b):
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
    """bar.sync / bar.arrive with a thread count: a generation completes at `count` arrivals."""

    def __init__(self, count):
        self.count = count
        self.arrived = 0
        self.gen = 0

    def arrive(self, n):
        self.arrived += n
        if self.arrived >= self.count:
            assert self.arrived == self.count, "named barrier over-arrived"
            self.arrived -= self.count
            self.gen += 1


def run(tiles_per_cta, ntiles_of, S, seed, fp8=False, W=2, QB=1, vt_global=False, transposers=True):
    """One CTA walking `tiles_per_cta` tiles of ntiles_of(t) K/V tiles each, S ring stages, W
    consumer warpgroups, QB Q buffers (Q tile r in buffer r % QB, phase r // QB), vt_global: FP8
    with V^T loaded by the producer's TMA instead of transposed by warps; transposers=False (with
    vt_global): the V^T-only instance, no transposing warps at all (kernel_traits.cuh kVtOnly);
    agents are generators advanced in random order, TMA copies land at random later times."""
    assert transposers or (fp8 and vt_global), "only V^T-only FP8 instances lack the transposing warps"
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
    turn = [NamedBar(256) for _ in range(W)]
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
    qbuf = [{"rows": [None] * W} for _ in range(QB)]
    pending_tma = []  # (callback)
    tiles = list(range(tiles_per_cta))

    def tma(cb):
        pending_tma.append(cb)

    def publish(r, value):
        while not tile_empty[r % 2].try_wait(((r // 2) & 1) ^ 1):
            yield
        slot[r % 2] = value
        tile_full[r % 2].arrive()

    def read_tile(r, warps):
        while not tile_full[r % 2].try_wait((r // 2) & 1):
            yield
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
                            yield
                        q_full[b][g].expect_tx(W // QG)
                        q_full[b][g].arrive()

                    def land(t=t, b=b, c=c, g=g):
                        qbuf[b]["rows"][c] = ("q", t)
                        q_full[b][g].complete_tx(1)

                    tma(land)
                qr += 1

            def load_stage(empty, full, buf, st, par, tag):
                # A ring stage: wait for it to be free, expect the bytes, the copy lands later.
                while not empty[st].try_wait(par):
                    yield
                full[st].expect_tx(1)
                full[st].arrive()
                tma(lambda: (buf.__setitem__(st, tag), full[st].complete_tx(1)))

            if n == 0:
                yield from load_q()
            for i in range(n):
                st = it % S
                par = ((it // S) & 1) ^ 1
                yield from load_stage(k_empty, k_full, kbuf, st, par, (t, i))
                if i == 0:
                    yield from load_q()
                if fp8 and vt_global:  # V^T from global memory by TMA (FwdArgs::vt_global): no transposer
                    yield from load_stage(vt_empty, vt_full, vtbuf, st, par, (t, i))
                else:
                    yield from load_stage(v_empty, v_full, vbuf, st, par, (t, i))
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
                    yield
                while not vt_empty[st].try_wait(par ^ 1):
                    yield
                assert vbuf[st] == (t, i), ("transposer read", vbuf[st], (t, i))
                yield
                vtbuf[st] = vbuf[st]
                vt_full[st].arrive(3)
                v_empty[st].arrive(3)
                it += 1

    def consumer(c):
        it = 0
        qr = 0

        def take():
            g = turn[c].gen
            turn[c].arrive(128)
            while turn[c].gen == g:
                yield
            order.append(c)

        def pas():
            turn[(c + 1) % W].arrive(128)

        if c == W - 1:
            pas()
        pvf = vt_full if fp8 else v_full
        pve = vt_empty if fp8 else v_empty
        pvb = vtbuf if fp8 else vbuf
        for r in range(len(tiles) + 1):
            t = yield from read_tile(qr, 4)  # one tile per Q round: qr is the ring position
            assert t == (tiles + [END])[r], ("consumer tile", t, r)
            if t == END:
                break
            n = ntiles_of(t)
            b = qr % QB
            while not q_full[b][grp(c)].try_wait((qr // QB) & 1):
                yield
            if n > 0:
                st = it % S
                while not k_full[st].try_wait((it // S) & 1):
                    yield
                yield from take()
                assert qbuf[b]["rows"][c] == ("q", t)
                assert kbuf[st] == (t, 0)
                pas()
                yield  # the wgmma runs until its wait: Q and K must still hold this tile's data
                assert qbuf[b]["rows"][c] == ("q", t) and kbuf[st] == (t, 0), "Q or K overwritten under the wgmma"
                k_empty[st].arrive(4)
                for i in range(1, n):
                    prev = it % S
                    it += 1
                    st = it % S
                    while not k_full[st].try_wait((it // S) & 1):
                        yield
                    while not pvf[prev].try_wait(((it - 1) // S) & 1):
                        yield
                    yield from take()
                    assert qbuf[b]["rows"][c] == ("q", t)
                    assert kbuf[st] == (t, i)
                    assert pvb[prev] == (t, i - 1), (pvb[prev], (t, i - 1))
                    pas()
                    yield
                    assert qbuf[b]["rows"][c] == ("q", t) and kbuf[st] == (t, i), "Q or K overwritten under the wgmma"
                    k_empty[st].arrive(4)
                    yield
                    assert pvb[prev] == (t, i - 1), "V overwritten under the wgmma"
                    pve[prev].arrive(4)
                last = it % S
                while not pvf[last].try_wait((it // S) & 1):
                    yield
                yield from take()
                assert pvb[last] == (t, n - 1)
                pas()
                yield
                assert pvb[last] == (t, n - 1), "V overwritten under the wgmma"
                pve[last].arrive(4)
                it += 1
            # epilogue: overwrite own Q rows, release
            qbuf[b]["rows"][c] = ("o", t)
            yield
            q_empty[b][grp(c)].arrive(1)
            qr += 1
        if c == 0:
            yield from take()

    agents = [producer()] + [consumer(c) for c in range(W)] + ([transposer()] if tw else [])
    alive = list(agents)
    steps = 0
    stalled = 0
    while alive or pending_tma:
        steps += 1
        if pending_tma and rnd.random() < 0.3:
            cb = pending_tma.pop(rnd.randrange(len(pending_tma)))
            cb()
            stalled = 0
            continue
        if not alive:
            continue
        a = rnd.choice(alive)
        try:
            next(a)
        except StopIteration:
            alive.remove(a)
        if steps > 2_000_000:
            raise RuntimeError("deadlock?")
    assert all(b.arrived == 0 for b in turn), ("unbalanced turns", [b.arrived for b in turn])
    # The final take by warpgroup 0 only balances the barrier; every other turn is round robin.
    assert order[:-1] == [i % W for i in range(len(order) - 1)], ("turn order", order)
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
    # FP8 with V^T loaded by TMA from the pass's workspace (fp8_v_transpose.h).
    run(tiles, lambda t: lens[t], stages, seed + 7777, fp8=True, W=warpgroups, QB=q_buffers, vt_global=True)
    # The V^T-only instance (FP8 d256: two consumer warpgroups, two Q buffers): no transposers.
    run(tiles, lambda t: lens[t], stages, seed + 9999, fp8=True, W=2, QB=q_buffers, vt_global=True, transposers=False)
