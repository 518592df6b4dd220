"""Memory estimate: a hand-counted network, training terms, free layers."""
import pytest
from torch import nn

import annette_torch as at
from annette_torch.memory import estimate_memory

SHAPE = (1, 3, 16, 16)


def small_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))


def test_inference_matches_hand_count():
    estimate = estimate_memory(at.trace(small_net(), input_shape=SHAPE))
    params = 4 * ((3 * 8 * 9 + 8) + (8 * 8 * 9 + 8))
    x, y = 4 * 3 * 16 * 16, 4 * 8 * 16 * 16          # input, each layer output
    assert estimate.params_bytes == params == 3232
    # step 0: input + conv1 out; step 1: conv1 out + relu out; step 2: relu out + conv2 out
    assert list(estimate.layers.live_bytes) == [x + y, 2 * y, 2 * y]
    assert estimate.activation_peak_bytes == 2 * y
    assert estimate.workspace_bytes == 4 * 8 * 9 * 16 * 16     # im2col of conv2
    assert list(estimate.layers.workspace_bytes) == [4 * 3 * 9 * 256, 0, 4 * 8 * 9 * 256]
    assert estimate.total_bytes == params + 2 * y


@pytest.mark.parametrize("optimizer, states", [("sgd", 0), ("momentum", 1), ("adam", 2)])
def test_training_adds_grads_and_optimizer_state(optimizer, states):
    graph = at.trace(small_net(), input_shape=SHAPE)
    estimate = estimate_memory(graph, training=True, optimizer=optimizer)
    params, x, y = 3232, 4 * 3 * 256, 4 * 8 * 256
    # saved for backward: the input (read by conv1's backward) and the ReLU output (read by
    # ReLU's and conv2's backward, counted once); conv1's and conv2's outputs are not kept
    assert estimate.activation_peak_bytes == x + y
    assert list(estimate.layers.saved_bytes) == [0, y, 0]
    assert estimate.grads_bytes == params
    assert estimate.optimizer_bytes == states * params
    # backward at layer i: saved activations of layers <= i, gradients of layers >= i, the gradient pair
    assert list(estimate.layers.backward_live_bytes) == [x + params + x + y, x + y + 4 * 584 + 2 * y,
                                                         x + y + 4 * 584 + 2 * y]
    assert estimate.total_bytes == (1 + states) * params + x + 3 * y + 4 * 584


def test_training_keeps_what_backward_reads():
    """Max pools keep int64 indices; adds and average pools keep nothing; a sigmoid keeps its output."""
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2), nn.Sigmoid(), nn.AvgPool2d(2))
    estimate = estimate_memory(at.trace(net, input_shape=SHAPE), training=True)
    x, y, pooled = 4 * 3 * 256, 4 * 8 * 256, 4 * 8 * 64
    # conv keeps the input; max pool the conv output and 8-byte indices; sigmoid its output
    assert list(estimate.layers.saved_bytes) == [y, 2 * pooled, pooled, 0]
    assert estimate.activation_peak_bytes == x + y + 3 * pooled


def test_adam_step_holds_two_temporaries_of_the_largest_parameter():
    """A big classifier: the optimizer step (all gradients + 2 temporaries of the linear's
    weight for Adam) is the peak, not backward."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 1000))
    graph = at.trace(net, input_shape=SHAPE)
    params = 4 * (768 * 1000 + 1000)
    sgd, adam = (estimate_memory(graph, training=True, optimizer=o) for o in ("sgd", "adam"))
    assert sgd.total_bytes == params + max(sgd.layers.backward_live_bytes.max(), params)
    assert adam.total_bytes == 3 * params + params + 2 * 4 * 768 * 1000


def test_multihead_attention_keeps_its_projections():
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    estimate = estimate_memory(at.trace(Attention(), input_shape=(2, 10, 16)), training=True)
    out = 4 * 2 * 10 * 16
    assert list(estimate.layers.saved_bytes) == [4 * out]      # q, k, v, attention output
    assert estimate.activation_peak_bytes == out + 4 * out      # + its input


def test_free_layers_add_no_memory():
    plain = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.Flatten(), nn.Linear(8 * 256, 10))
    viewed = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Identity(), nn.ReLU(), nn.Dropout(),
                           nn.Conv2d(8, 8, 3, padding=1), nn.Flatten(), nn.Dropout(), nn.Linear(8 * 256, 10))
    for training in (False, True):
        a = estimate_memory(at.trace(plain, input_shape=SHAPE), training=training)
        b = estimate_memory(at.trace(viewed, input_shape=SHAPE), training=training)
        assert a.activation_peak_bytes == b.activation_peak_bytes
        assert a.total_bytes == b.total_bytes


def test_alias_keeps_storage_alive():
    class Skip(nn.Module):          # flatten of the input is read by the last layer
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)

        def forward(self, x):
            return self.conv(x).flatten(1) + x.flatten(1)

    estimate = estimate_memory(at.trace(Skip(), input_shape=SHAPE))
    x = 4 * 3 * 256
    assert estimate.activation_peak_bytes == 3 * x       # input, conv out and the sum at the add


def test_estimator_memory_and_bad_optimizer():
    estimate = at.Estimator().memory(small_net(), input_shape=SHAPE, training=True, optimizer="adam")
    assert estimate.optimizer_bytes == 2 * estimate.params_bytes
    with pytest.raises(ValueError, match="unknown optimizer"):
        estimate_memory(at.trace(small_net(), input_shape=SHAPE), optimizer="lion")
