"""pytorch/examples' MNIST network: two convolutions, max-pooling, dropout, two linear layers,
log_softmax and nll_loss, trained with Adadelta and a StepLR schedule."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self, p_drop1=0.25, p_drop2=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(p_drop1)
        self.dropout2 = nn.Dropout(p_drop2)
        self.fc1 = nn.Linear(16 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def build(p_drop=0.0):
    return Net(p_drop, p_drop)


def train(model, batches, steps):
    device = torch.device("cpu")
    model = model.to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=2, gamma=0.7)
    model.train()
    losses = []
    for step in range(steps):
        data, target = batches[step % len(batches)]
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in batches:
            pred = model(data).argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return [*losses, float(correct)]
