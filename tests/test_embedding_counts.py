"""An embedding is costed by what it does: it reads its indices and the rows they pick,
not its whole table (GPT-2's 50257 x 768 token table is 154 MB; 128 tokens read 0.4 MB of it).
Memory still holds the whole table."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import annette_torch as at

VOCAB, WIDTH, TOKENS = 50257, 768, 128


class Tokens(nn.Module):
    def __init__(self, functional: bool = False) -> None:
        super().__init__()
        self.functional = functional
        self.wte = nn.Embedding(VOCAB, WIDTH)

    def forward(self, ids):
        return F.embedding(ids, self.wte.weight) if self.functional else self.wte(ids)


def ids(n: int = TOKENS) -> torch.Tensor:
    return torch.zeros(1, n, dtype=torch.long)


@pytest.mark.parametrize("functional", [False, True], ids=["module", "F.embedding"])
def test_an_embedding_reads_the_rows_it_gathers(functional, one_layer):
    graph = at.trace(Tokens(functional), example_inputs=(ids(),))
    emb = one_layer(graph, "embedding")
    assert emb.attrs == {"num_embeddings": VOCAB, "embedding_dim": WIDTH}
    assert emb.counts.input_elems == TOKENS                     # the indices
    assert emb.counts.weight_elems == TOKENS * WIDTH            # rows gathered x width
    assert emb.counts.stored_weight_elems == VOCAB * WIDTH      # the table
    assert emb.counts.output_elems == TOKENS * WIDTH


def test_estimated_embedding_bytes_are_rows_times_width_and_memory_keeps_the_table():
    graph = at.trace(Tokens(), example_inputs=(ids(),))
    estimator = at.Estimator("zcu102-dpu", model_type="roofline", weights_from_memory=False)
    row = estimator.report(graph).iloc[0]
    assert row["kind"] == "embedding"
    bits = estimator.profile.layer_models["roofline"]["default"]
    rows = TOKENS * WIDTH
    expected = ((TOKENS + rows) * bits.bit_act + rows * bits.bit_weights) / 8   # ids + output, rows read
    assert row["bytes"] == pytest.approx(expected)
    assert row["bytes"] < VOCAB * WIDTH / 100                   # nowhere near the 154 MB table
    assert at.estimate_memory(graph).params_bytes == VOCAB * WIDTH * 4


def test_repeated_indices_read_at_most_the_table_and_a_computed_table_is_an_input(one_layer):
    small = nn.Embedding(2, 8)                                  # e.g. BERT's token types
    graph = at.trace(small, example_inputs=(ids(),))
    assert one_layer(graph, "embedding").counts.weight_elems == 2 * 8

    class Computed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Parameter(torch.zeros(100, 8))

        def forward(self, ids):
            return F.embedding(ids, self.table * 2)

    emb = one_layer(at.trace(Computed(), example_inputs=(ids(10),)), "embedding")
    assert (emb.counts.input_elems, emb.counts.weight_elems) == (10 + 10 * 8, 0)


def test_one_hot_has_no_table(one_layer):
    class OneHot(nn.Module):
        def forward(self, ids):
            return F.one_hot(ids, 16).float()

    emb = one_layer(at.trace(OneHot(), example_inputs=(ids(10),)), "embedding")
    assert (emb.counts.input_elems, emb.counts.weight_elems, emb.counts.output_elems) == (10, 0, 160)
