"""stalloc.integrations against stand-ins for torch, transformers and Lightning: each helper
enables stalloc before CUDA is touched and calls stalloc.step() once per optimizer step, not per
micro-batch. The steps are counted by the runtime itself (its iterations), with requests made
through the C ABI as PyTorch would.

Its own process: enabling is allowed once.
"""

import os
import sys
import types
import unittest

os.environ["STALLOC_CONF"] = "backend:host,granularity:65536"

import stalloc  # noqa: E402


class FakeAllocator:
    def __init__(self, path, alloc, free):
        self.native = types.SimpleNamespace()

    def allocator(self):
        return self.native


def fake_torch(initialized=False):
    memory = types.SimpleNamespace(CUDAPluggableAllocator=FakeAllocator, change_current_allocator=lambda a: None)
    cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: initialized)
    return types.SimpleNamespace(cuda=cuda, __version__="2.4.0")


class FakeOptimizer:
    """torch.optim.Optimizer's post-step hooks, as PyTorch 2.0+ calls them."""

    def __init__(self):
        self.hooks = {}

    def register_step_post_hook(self, hook):
        key = object()
        self.hooks[key] = hook
        return types.SimpleNamespace(remove=lambda: self.hooks.pop(key, None))

    def step(self):
        for hook in list(self.hooks.values()):
            hook(self, (), {})


def iterations():
    """Iterations ended by stalloc.step() (not those the runtime found itself before the first)."""
    device = stalloc.stats()["devices"]["0"]
    return device["iterations"] - device["auto_steps"]


def micro_batch():
    """What a forward and backward ask of the allocator: a few tensors, made and freed."""
    lib = stalloc.load_library()
    blocks = [lib.stalloc_malloc(size, 0, None) for size in (1 << 20, 3 << 20, 4096)]
    assert all(blocks)
    for block, size in zip(blocks, (1 << 20, 3 << 20, 4096)):
        lib.stalloc_free(block, size, 0, None)


class IntegrationsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.modules["torch"] = fake_torch()
        stalloc.integrations.ensure_enabled()
        micro_batch()  # the device's runtime exists from here on

    @classmethod
    def tearDownClass(cls):
        for name in ("torch", "transformers", "lightning", "lightning.pytorch", "pytorch_lightning"):
            sys.modules.pop(name, None)

    def test_enabled_once(self):
        self.assertTrue(stalloc.enabled())
        stalloc.integrations.ensure_enabled()  # a second time: nothing, and no error

    def test_a_plain_loop_steps_after_each_optimizer_step(self):
        optimizer = FakeOptimizer()
        before = iterations()
        with stalloc.integrations.training(optimizer):
            for _ in range(5):
                micro_batch()
                micro_batch()
                optimizer.step()
        self.assertEqual(iterations() - before, 5)
        optimizer.step()  # after the block the hook is gone
        self.assertEqual(iterations() - before, 5)

    def test_an_optimizer_without_post_hooks_is_named(self):
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.integrations.step_after(object())
        self.assertIn("register_step_post_hook", str(ctx.exception))

    def test_hugging_face_steps_at_the_end_of_each_optimizer_step(self):
        class TrainerCallback:
            pass

        sys.modules["transformers"] = types.SimpleNamespace(TrainerCallback=TrainerCallback)
        callback = stalloc.integrations.hf_callback()
        self.assertIsInstance(callback, TrainerCallback)
        before = iterations()
        control = object()
        for _ in range(4):  # Trainer: gradient_accumulation_steps=3, then on_step_end
            for _ in range(3):
                micro_batch()
            self.assertIs(callback.on_step_end(None, None, control), control)
        self.assertEqual(iterations() - before, 4)

    def test_lightning_steps_once_per_optimizer_step(self):
        class Callback:
            pass

        lightning = types.ModuleType("lightning")
        pytorch = types.ModuleType("lightning.pytorch")
        pytorch.Callback = Callback
        lightning.pytorch = pytorch
        sys.modules["lightning"] = lightning
        sys.modules["lightning.pytorch"] = pytorch
        callback = stalloc.integrations.lightning_callback()
        self.assertIsInstance(callback, Callback)
        before = iterations()
        for batch in range(6):  # accumulate_grad_batches=2: an optimizer step every 2 batches
            micro_batch()
            if batch % 2 == 1:
                callback.on_before_zero_grad(None, None, None)
        self.assertEqual(iterations() - before, 3)

    def test_a_missing_framework_is_named(self):
        sys.modules["transformers"] = None  # import transformers raises ImportError
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.integrations.hf_callback()
        self.assertIn("transformers", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
