"""The stage this package holds: ``fuse`` (TensorFlow's optimize-pass fusions, on the float graph)."""

from __future__ import annotations

from qconvert.fold.identity_arith import remove_identity_arith
from qconvert.fuse.activation_patterns import fuse_hard_swish, fuse_prelu
from qconvert.fuse.into_op import (
    fold_mul_into_conv,
    fold_mul_into_following_weights,
    fold_constant_adds,
    fold_mul_into_weights,
    fuse_activation,
    fuse_add_into_fully_connected,
    fuse_bias_add,
    fuse_pad_into_conv,
    scalarize_splat_after_affine,
)
from qconvert.fuse.reshapes import (
    drop_reshape_before_broadcast,
    drop_reshape_before_fully_connected,
    fuse_reshapes_into_fully_connected,
    keep_fully_connected_dims_before_reshape,
    keep_reduced_dims,
    merge_reshapes,
    move_activation_before_reshape,
    move_binary_before_reshape,
    retarget_reshape_before_fully_connected,
)
from qconvert.ir.passes import Stage

FUSE = Stage("fuse", "fuse", "zero Pad into SAME convs; Dense on N-D; ops across RESHAPEs; bias adds, BatchNorm "
             "and an input scale into weights/bias; ReLU/ReLU6/ReLU1 into the op; hard-swish; PReLU",
             (merge_reshapes, fuse_pad_into_conv, fuse_reshapes_into_fully_connected, drop_reshape_before_fully_connected,
              move_binary_before_reshape, move_activation_before_reshape, merge_reshapes,
              keep_reduced_dims, drop_reshape_before_broadcast,
              remove_identity_arith, fold_mul_into_conv, fuse_add_into_fully_connected, fuse_bias_add, fold_mul_into_weights,
              fuse_hard_swish, fold_mul_into_following_weights, fuse_bias_add, fold_mul_into_weights, fuse_bias_add,
              fold_constant_adds, merge_reshapes, drop_reshape_before_broadcast,
              retarget_reshape_before_fully_connected,
              merge_reshapes, fuse_activation, keep_fully_connected_dims_before_reshape,
              retarget_reshape_before_fully_connected, merge_reshapes,
              fuse_hard_swish,
              fuse_prelu, scalarize_splat_after_affine))
