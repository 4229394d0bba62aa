"""Each ensemble member's head against the data's labels, before anything is profiled or trained: a model with fewer
outputs than the labels have classes failed only when its member first trained ("IndexError: Target 15 is out of
bounds", after the profiling of every member and the training of others). The submit-time check
(``ensemble_check``) reads the count a constructor declares; this one runs each model on one validation image, so a
head the file does not declare (built in a factory, inherited) is caught too."""
from __future__ import annotations

from typing import Sequence

import torch

from dlsched.errors import UserError
from dlsched.train.flotilla import MemberSpec, _build, eval_transform


def check_heads(members: Sequence[MemberSpec], data, val) -> None:
    """``UserError`` (one line naming the member, its model and both counts) for the first member whose output is
    narrower than the largest label of ``data`` and ``val`` (each (images, labels)) + 1."""
    labels = int(max(data[1].max(), val[1].max())) + 1
    image = eval_transform(val[0][:1])
    for i, m in enumerate(members):
        net, _ = _build(m)
        net.eval()
        with torch.no_grad():
            out = net(image)
        width = out.shape[-1] if out.dim() >= 2 else 0
        if width < labels:
            raise UserError(f"field models[{i}] ({m.name}, {m.model}{f' {dict(m.kwargs)}' if m.kwargs else ''}): its "
                            f"output has {width} classes, but the data's labels go to {labels - 1} ({labels} classes): "
                            f"give it {labels} outputs (e.g. kwargs: {{classes: {labels}}})")
