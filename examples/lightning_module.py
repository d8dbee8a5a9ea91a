# python examples/lightning_module.py   (needs lightning)
# PyTorch Lightning: the callback steps stalloc in on_before_zero_grad, once per optimizer step
# (after the last batch of gradient accumulation).
import lightning as L
import torch

import stalloc


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


callback = stalloc.integrations.lightning_callback()  # before the trainer touches CUDA
data = torch.utils.data.TensorDataset(torch.randn(1024, 512), torch.randn(1024, 1))
trainer = L.Trainer(max_epochs=2, accelerator="gpu", devices=1, accumulate_grad_batches=2,
                    callbacks=[callback], logger=False, enable_checkpointing=False)
trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=32))
print(stalloc.stats()["devices"]["0"]["iterations"], "iterations seen by stalloc")
