"""pytorch/examples' variational autoencoder: an encoder to a mean and log-variance, the
reparameterisation, a decoder, and binary cross-entropy plus the KL divergence."""

import torch
import torch.nn.functional as F
from torch import nn, optim


class VAE(nn.Module):
    def __init__(self, d=64, h=32, z=8):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc21 = nn.Linear(h, z)
        self.fc22 = nn.Linear(h, z)
        self.fc3 = nn.Linear(z, h)
        self.fc4 = nn.Linear(h, d)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, 64))
        return self.decode(self.reparameterize(mu, logvar, eps)), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def build():
    return VAE()


def train(model, batches, steps):
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for step in range(steps):
        data, eps = batches[step % len(batches)]
        optimizer.zero_grad()
        recon, mu, logvar = model(data, eps)
        loss = loss_function(recon, data, mu, logvar)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
