import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferencekit.data.random_prompts import WORDS
from inferencekit.data.trace_blocks import plan_blocks
from inferencekit.data.traces import TraceRow, load_sample
from inferencekit.errors import OpError

VOCAB = list(WORDS)


def rows_of(*specs):
    """TraceRows from ``(hash_ids or None, input_len)``, lines 1, 2, ..."""
    return [TraceRow(i + 1, float(i), n, 8, None if ids is None else tuple(ids)) for i, (ids, n) in enumerate(specs)]


def common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ---- a hand-made trace of four requests, 4 words per block ----

HAND = rows_of(([1, 2, 3], 10),  # blocks 4, 4, 2
               ([1, 2, 4], 12),  # shares 1 and 2 with the first; 4 is its own
               ([1, 2, 3], 11),  # the first's blocks; its block 3 longer (3 words against 2)
               (None, 5))  # no hash_ids: two blocks of its own


def test_hand_made_trace_shares_and_salt_positions():
    plan = plan_blocks(HAND, block_size=4, vocabulary=VOCAB, seed=7)
    r = plan.requests
    assert [q.lengths for q in r] == [(4, 4, 2), (4, 4, 4), (4, 4, 3), (4, 1)]
    assert [q.blocks for q in r][:3] == [(1, 2, 3), (1, 2, 4), (1, 2, 3)]
    assert r[3].blocks == ((3, 0), (3, 1))
    assert [q.shared for q in r] == [0, 8, 10, 0]
    # first block no other request shares: none for the first and third (len(blocks)), id 4 for the second
    assert [(q.salt_block, q.salt_word) for q in r] == [(3, 10), (2, 8), (3, 11), (0, 0)]
    assert [q.line for q in r] == [1, 2, 3, 4]
    w = [plan.words(i) for i in range(4)]
    assert [len(x) for x in w] == [10, 12, 11, 5]
    assert w[2][:10] == w[0]  # the first's whole text starts the third's
    assert common(w[0], w[1]) == 8 and common(w[1], w[2]) == 8  # blocks 3 and 4 differ from their first word
    assert common(w[3], w[0]) == 0
    assert plan.text(0) == "".join(" " + x for x in w[0])
    assert plan.describe() == {"block_size": 4, "seed": 7, "vocabulary": len(VOCAB), "requests": 4,
                               "distinct_blocks": 6, "input_words": 38, "shared_words": 18, "clashes": 0}


def test_shared_ids_are_byte_identical_and_different_ids_differ():
    trace = load_sample("mooncake")
    plan = plan_blocks(trace.rows, block_size=64, vocabulary=VOCAB, seed=3)
    texts: dict = {}
    for i, req in enumerate(plan.requests):
        words = plan.words(i)
        at = 0
        for key, n in zip(req.blocks, req.lengths):
            piece = "".join(" " + x for x in words[at:at + n])
            at += n
            full = texts.setdefault(key, "".join(" " + x for x in plan.block_words(key)))
            assert full.startswith(piece)  # every request holding the id has the same text for it
    assert len(set(texts.values())) == len(texts)  # different ids, different texts
    # siblings (different ids after the same ids) differ in their first word
    firsts: dict = {}
    for req in plan.requests:
        for j in range(1, len(req.blocks)):
            firsts.setdefault(req.blocks[:j], {})[req.blocks[j]] = plan.block_words(req.blocks[j])[0]
    for kids in firsts.values():
        assert len(set(kids.values())) == len(kids)
    assert plan.clashes == 0


def test_word_counts_are_exact_and_texts_are_space_led_words():
    for fmt in ("mooncake", "azure", "burstgpt"):
        trace = load_sample(fmt)
        plan = plan_blocks(trace.rows, block_size=64, vocabulary=VOCAB, seed=11)
        for row, req, text in zip(trace.rows, plan.requests, plan.texts()):
            assert req.input_len == row.input_len == len(text.split()) == sum(req.lengths)
            assert text.startswith(" ") and "  " not in text and set(text.split()) <= set(VOCAB)
            assert all(0 < n <= 64 for n in req.lengths) and all(n == 64 for n in req.lengths[:-1])


def test_the_mooncake_sample_has_long_intended_reuse():
    trace = load_sample("mooncake")
    d = plan_blocks(trace.rows, block_size=64, vocabulary=VOCAB, seed=0).describe()
    assert d["shared_words"] > d["input_words"] // 2


def test_same_seed_same_texts_other_seed_other_texts():
    a = plan_blocks(HAND, block_size=4, vocabulary=VOCAB, seed=1)
    b = plan_blocks(HAND, block_size=4, vocabulary=VOCAB, seed=1)
    c = plan_blocks(HAND, block_size=4, vocabulary=VOCAB, seed=2)
    assert list(a.texts()) == list(b.texts()) != list(c.texts())


def test_more_shared_siblings_than_words_are_counted_as_clashes():
    # three shared tails after block 0 and a vocabulary of two words: one tail must repeat a first word
    rows = rows_of(*[([0, k], 2) for k in (1, 1, 2, 2, 3, 3)])
    plan = plan_blocks(rows, block_size=1, vocabulary=["red", "blue"], seed=0)
    assert plan.clashes == 1
    # blocks no other request shares are not counted: the salt goes before them
    many = rows_of(*[(None, 3)] * 5)
    assert plan_blocks(many, block_size=1, vocabulary=["red", "blue"], seed=0).clashes == 0


def test_a_block_under_two_parents_differs_from_its_siblings_under_both():
    # X (9) follows nothing in one request and Z (2) in another: its first word must differ from A's and Z's
    # (its siblings at the start) and from B's (its sibling after Z); every path shared, so clashes would count
    specs = [([1], 1), ([2, 3], 2), ([9], 1), ([2, 9], 2)]
    for seed in range(30):
        plan = plan_blocks(rows_of(*[s for s in specs for _ in (0, 1)]), block_size=1,
                           vocabulary=["red", "blue", "green", "gold"], seed=seed)
        first = {k: plan.block_words(k)[0] for k in (1, 2, 3, 9)}
        assert len({first[1], first[2], first[9]}) == 3 and first[9] != first[3], seed
        assert plan.clashes == 0


@pytest.mark.parametrize("kw,msg", [
    ({"block_size": 0}, "block size"),
    ({"block_size": True}, "block size"),
    ({"seed": "x"}, "seed"),
    ({"vocabulary": ["a"]}, "at least 2 distinct"),
    ({"vocabulary": ["a", "b", "a"]}, "at least 2 distinct"),
    ({"vocabulary": ["a", "b c"]}, "without spaces"),
    ({"vocabulary": ["a", ""]}, "without spaces"),
])
def test_bad_arguments(kw, msg):
    args = {"block_size": 4, "vocabulary": VOCAB, "seed": 0} | kw
    with pytest.raises(OpError, match=msg):
        plan_blocks(HAND, **args)


def test_hash_ids_that_do_not_fit_the_block_size_name_the_line():
    with pytest.raises(OpError, match=r"trace line 2: 2 hash_ids for 9 input tokens at 4 tokens per block"):
        plan_blocks(rows_of(([1], 4), ([1, 2], 9)), block_size=4, vocabulary=VOCAB, seed=0)


# ---- the property: texts share exactly what their common leading block ids imply ----

def implied(a, b, bs):
    """Words two requests share by their blocks: common leading ids, a partial block ending it."""
    (ia, na), (ib, nb) = a, b
    if ia is None or ib is None:
        return 0
    la = [bs] * (len(ia) - 1) + [na - bs * (len(ia) - 1)]
    lb = [bs] * (len(ib) - 1) + [nb - bs * (len(ib) - 1)]
    total = 0
    for x, y, m, n in zip(ia, ib, la, lb):
        if x != y:
            break
        total += min(m, n)
        if min(m, n) < bs:
            break
    return total


request = st.tuples(st.one_of(st.none(), st.lists(st.integers(0, 5), min_size=1, max_size=5)), st.integers(0, 7))


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(bs=st.integers(1, 4), reqs=st.lists(request, min_size=2, max_size=6), seed=st.integers(0, 3))
def test_texts_share_exactly_the_prefix_their_block_ids_imply(bs, reqs, seed):
    specs = []
    for ids, extra in reqs:
        n = (len(ids) - 1) * bs + 1 + extra % bs if ids is not None else 1 + extra
        specs.append((ids, n))
    # 16 words: first words collide often, and no block has 16 siblings here (at most 6 ids + 6 rows without ids)
    plan = plan_blocks(rows_of(*specs), block_size=bs, vocabulary=VOCAB[:16], seed=seed)
    assert plan.clashes == 0
    words = [plan.words(i) for i in range(len(specs))]
    assert [len(w) for w in words] == [n for _, n in specs]
    for b in range(len(specs)):
        for a in range(b):
            assert common(words[a], words[b]) == implied(specs[a], specs[b], bs), (a, b)
        assert plan.requests[b].shared == max([implied(specs[a], specs[b], bs) for a in range(b)], default=0)
        ids = specs[b][0]
        if ids is None:
            assert plan.requests[b].salt_block == 0
            continue
        others = [s[0] for k, s in enumerate(specs) if k != b and s[0] is not None]
        salt = next((j for j in range(len(ids)) if not any(o[:j + 1] == ids[:j + 1] for o in others)), len(ids))
        assert plan.requests[b].salt_block == salt
        assert plan.requests[b].salt_word == min(salt * bs, specs[b][1])
