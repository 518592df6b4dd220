"""NAS-Bench-201 cell networks of the accuracy set (seed 201) the profile gets most wrong, for calibrate --for."""
from annette_torch.nas.nasbench201 import NB201Network

def conv3_a():
    return NB201Network("|nor_conv_3x3~0|+|none~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|nor_conv_3x3~2|").eval()

def conv3_b():
    return NB201Network("|avg_pool_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_1x1~0|nor_conv_3x3~1|skip_connect~2|").eval()

def pool_c():
    return NB201Network("|skip_connect~0|+|skip_connect~0|avg_pool_3x3~1|+|nor_conv_3x3~0|avg_pool_3x3~1|avg_pool_3x3~2|").eval()

def conv1_d():
    return NB201Network("|skip_connect~0|+|nor_conv_1x1~0|nor_conv_1x1~1|+|nor_conv_1x1~0|nor_conv_1x1~1|nor_conv_1x1~2|").eval()
