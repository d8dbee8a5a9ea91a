# python examples/hf_trainer.py   (needs transformers and datasets-free toy data)
# A Hugging Face Trainer: the callback enables stalloc when it is made (before the model moves
# to the GPU) and steps it once per optimizer step, gradient accumulation included.
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import stalloc

callback = stalloc.integrations.hf_callback()  # before the model is on the GPU
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4))
data = [{"input_ids": torch.randint(0, 50257, (128,)), "labels": torch.randint(0, 50257, (128,))}
        for _ in range(256)]
args = TrainingArguments(output_dir="/tmp/stalloc-hf", per_device_train_batch_size=8,
                         gradient_accumulation_steps=2, max_steps=20, report_to=[])
Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
print(stalloc.stats()["devices"]["0"]["iterations"], "iterations seen by stalloc")
