"""Layers, initializers and losses. Everything returns ordinary tensors (graph, or eager on eager inputs).

A layer is called on a tensor and returns a tensor; ``.parameters()`` lists the parameter tensors it
owns, which is what optimizers and ``sg.save_parameters`` take. Called on a placeholder it builds graph;
called on an eager tensor it computes at once (define-by-run) with the same parameters, whose gradients
``loss.backward()`` leaves in their ``.grad`` for ``opt.step()``: one model object, both modes.
``.to_eager()`` gives an independent copy over eager tensors instead.

``layers``: initializers, Linear, MLP, Sequential and the losses; ``sequence``: Embedding and the
recurrent layers (RNN, LSTM, GRU), laid out as in torch.nn; ``conv``: Conv1d, Conv2d, MaxPool2d, AvgPool2d
and Flatten; ``norm``: BatchNorm1d/2d and LayerNorm, over ``functional``'s batch_norm and layer_norm
(sg.batch_norm, sg.layer_norm), and Dropout.
``model.train()`` / ``model.eval()`` set the mode layers read when called (when the graph is built);
``.buffers()`` lists the state that is updated but not trained (running statistics).
"""
from .conv import AvgPool2d, Conv1d, Conv2d, Flatten, MaxPool2d
from .layers import (
    ACTIVATIONS,
    INITIALIZERS,
    MLP,
    Linear,
    Module,
    Sequential,
    accuracy,
    binary_cross_entropy_with_logits,
    glorot_normal,
    glorot_uniform,
    he_normal,
    he_uniform,
    mse,
    softmax_cross_entropy,
    zeros,
)
from .norm import BatchNorm1d, BatchNorm2d, Dropout, LayerNorm
from .sequence import GRU, LSTM, RNN, Embedding

__all__ = ["ACTIVATIONS", "INITIALIZERS", "Module", "Linear", "MLP", "Sequential", "Embedding", "RNN", "LSTM",
           "GRU", "Conv1d", "Conv2d", "MaxPool2d", "AvgPool2d", "Flatten", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
           "Dropout", "glorot_uniform", "glorot_normal", "he_uniform", "he_normal", "zeros", "mse",
           "binary_cross_entropy_with_logits", "softmax_cross_entropy", "accuracy"]
