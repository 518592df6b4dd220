"""NAS-Bench-201 cell networks (accuracy set, seed 201) that openvino-cpu-2t overestimates most, and two it gets closer."""
from annette_torch.nas.nasbench201 import NB201Network

def conv1_small():
    return NB201Network("|none~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|none~0|none~1|none~2|").eval()

def pool_small():
    return NB201Network("|none~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|none~1|none~2|").eval()

def conv1_d():
    return NB201Network("|skip_connect~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_1x1~1|nor_conv_1x1~2|").eval()

def conv3_a():
    return NB201Network("|nor_conv_3x3~0|+|none~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|").eval()
