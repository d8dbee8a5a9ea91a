"""stalloc in the training stacks people use: where stalloc.step() goes.

stalloc plans from iterations, so it wants to know where one ends: after each optimizer step
(with gradient accumulation, after the step, not after every micro-batch). Each helper below
calls stalloc.step() exactly there; each enables stalloc first if it is not enabled yet, which
must happen before the first CUDA tensor.

    # a plain loop
    with stalloc.integrations.training(optimizer):      # or step_after(optimizer)
        for batch in loader:
            loss = model(batch).sum(); loss.backward(); optimizer.step(); optimizer.zero_grad()

    # Hugging Face Trainer
    trainer = Trainer(..., callbacks=[stalloc.integrations.hf_callback()])

    # PyTorch Lightning
    trainer = L.Trainer(..., callbacks=[stalloc.integrations.lightning_callback()])

The frameworks are imported only when their helper is called.
"""

import contextlib

from . import _api
from ._library import StallocError

def ensure_enabled(conf=""):
    """Enables stalloc unless it is already (by stalloc.enable() or an earlier helper)."""
    if not _api.enabled():
        _api.enable(conf)


def step_after(optimizer, conf=""):
    """Calls stalloc.step() after every optimizer.step() (torch.optim.Optimizer's post hook,
    PyTorch 2.0+). Returns the hook's handle: handle.remove() stops it."""
    ensure_enabled(conf)
    register = getattr(optimizer, "register_step_post_hook", None)
    if register is None:
        raise StallocError(
            "stalloc.integrations.step_after needs an optimizer with register_step_post_hook "
            "(torch.optim.Optimizer in PyTorch 2.0+); otherwise call stalloc.step() after each "
            "optimizer.step()"
        )
    return register(lambda opt, args, kwargs: _api.step())


@contextlib.contextmanager
def training(optimizer=None, conf=""):
    """A block of training: stalloc enabled, and with an optimizer, stalloc.step() after each
    of its steps for as long as the block runs. Without one, call stalloc.step() yourself."""
    ensure_enabled(conf)
    handle = step_after(optimizer, conf) if optimizer is not None else None
    try:
        yield
    finally:
        if handle is not None:
            handle.remove()


def hf_callback(conf=""):
    """A transformers.TrainerCallback that calls stalloc.step() at the end of each optimizer
    step (on_step_end: after gradient accumulation's last micro-batch)."""
    try:
        from transformers import TrainerCallback
    except ImportError as e:
        raise StallocError("stalloc.integrations.hf_callback needs transformers installed") from e
    ensure_enabled(conf)

    class StallocCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            _api.step()
            return control

    return StallocCallback()


def lightning_callback(conf=""):
    """A Lightning Callback that calls stalloc.step() once per optimizer step: in
    on_before_zero_grad, which Lightning calls after optimizer.step() (so after the last
    micro-batch of gradient accumulation), not after every batch."""
    Callback = None
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            Callback = __import__(module, fromlist=["Callback"]).Callback
            break
        except ImportError:
            continue
    if Callback is None:
        raise StallocError("stalloc.integrations.lightning_callback needs lightning installed")
    ensure_enabled(conf)

    class StallocCallback(Callback):
        def on_before_zero_grad(self, trainer, pl_module, optimizer):
            _api.step()

    return StallocCallback()
