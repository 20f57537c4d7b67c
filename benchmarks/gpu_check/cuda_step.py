"""Agent code for `make gpu-check`: a few training steps of a small torch model, run by Execute Script inside a
sandbox. The check copies it into the workspace with DEVICE set; it prints one JSON line the check reads."""
import json
import time

import torch

DEVICE = "cuda"  # the check writes the device it asks for here ("cpu" for a dry run without a GPU)
STEPS = 20

started = time.perf_counter()
device = torch.device(DEVICE)
torch.manual_seed(0)
# A fixed regression problem: a small MLP fits it well within a few Adam steps, so the loss must go down.
inputs = torch.randn(512, 64, device=device)
targets = inputs @ torch.randn(64, 1, device=device) + 0.1 * torch.randn(512, 1, device=device)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
losses = []
for _ in range(STEPS):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())  # .item() waits for the device: each step really ran
on_cuda = next(model.parameters()).is_cuda
print(json.dumps({
    "device": torch.cuda.get_device_name(device) if on_cuda else "cpu",
    "on_cuda": on_cuda, "torch": torch.__version__, "cuda": torch.version.cuda,
    "first_loss": losses[0], "last_loss": losses[-1], "steps": STEPS,
    "seconds": round(time.perf_counter() - started, 3)}))
